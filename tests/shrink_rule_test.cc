// Shrink mode's rule for which collective failed (runtime/shrink_rule.h):
// every survivor must report the same one.
#include "runtime/shrink_rule.h"

#include <gtest/gtest.h>

#include <vector>

namespace rcoll {
namespace {

bool completes(ShrinkStand mine, std::vector<ShrinkStand> others) {
  return failed_collective_completes(mine, others);
}

TEST(ShrinkRule, CompletesWhenEverySurvivorHeldTheWholeResultOrCompletedIt) {
  const ShrinkStand failed_whole{7, true, 6};
  // Another survivor completed 7 (and failed at 8): it had this rank's word.
  EXPECT_TRUE(completes(failed_whole, {{8, false, 7}}));
  // Another failed 7 holding its whole result too; a third was idle past 7.
  EXPECT_TRUE(completes(failed_whole, {{7, true, 6}, {0, false, 7}}));
}

TEST(ShrinkRule, FailsWhenSomeSurvivorDidNotHoldIt) {
  const ShrinkStand failed_whole{7, true, 6};
  EXPECT_FALSE(completes(failed_whole, {{7, false, 6}})) << "a survivor still missing data";
  EXPECT_FALSE(completes(failed_whole, {{0, false, 6}})) << "a survivor that never started 7";
  EXPECT_FALSE(completes(failed_whole, {{8, false, 7}, {6, false, 5}})) << "one behind is enough";
  EXPECT_FALSE(completes(failed_whole, {{9, true, 8}, {7, true, 6}, {5, true, 4}}));
}

TEST(ShrinkRule, ARankWithoutTheWholeResultOrNothingFailedNeverCompletes) {
  EXPECT_FALSE(completes({7, false, 6}, {{8, false, 7}}));
  EXPECT_FALSE(completes({0, false, 6}, {{0, false, 6}})) << "no collective failed here";
  EXPECT_TRUE(completes({7, true, 6}, {})) << "the only survivor holds it: done";
}

// The rule is symmetric: if any survivor completed N, then every survivor
// whose N failed completes it too, for every way the survivors can stand
// (each: failed N holding it, failed N without it, completed N).
TEST(ShrinkRule, NoTwoSurvivorsDisagree) {
  const uint64_t n = 5;
  const std::vector<ShrinkStand> ways = {{n, true, n - 1}, {n, false, n - 1}, {n + 1, false, n}};
  for (size_t a = 0; a < ways.size(); ++a) {
    for (size_t b = 0; b < ways.size(); ++b) {
      for (size_t c = 0; c < ways.size(); ++c) {
        const std::vector<ShrinkStand> group = {ways[a], ways[b], ways[c]};
        // Completion implies every rank held the whole result (the
        // confirmation round): skip groups where that is broken.
        bool someone_completed = false, someone_short = false;
        for (const auto& s : group) {
          someone_completed |= s.through >= n;
          someone_short |= s.failed == n && !s.whole;
        }
        if (someone_completed && someone_short) continue;
        int done = 0, failed = 0;
        for (size_t i = 0; i < group.size(); ++i) {
          std::vector<ShrinkStand> others;
          for (size_t j = 0; j < group.size(); ++j)
            if (j != i) others.push_back(group[j]);
          const bool ok = group[i].through >= n || completes(group[i], others);
          ok ? ++done : ++failed;
        }
        EXPECT_TRUE(done == 0 || failed == 0)
            << a << b << c << ": " << done << " completed, " << failed << " failed";
      }
    }
  }
}

TEST(ShrinkRule, Encoding) {
  const ShrinkStand s{12, true, 11};
  auto back = decode_shrink_stand(encode(s));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->failed, 12u);
  EXPECT_TRUE(back->whole);
  EXPECT_EQ(back->through, 11u);
  EXPECT_FALSE(decode_shrink_stand("12 2 11").has_value());
  EXPECT_FALSE(decode_shrink_stand("12 1").has_value());
  EXPECT_FALSE(decode_shrink_stand("12 1 11 junk").has_value());
}

}  // namespace
}  // namespace rcoll
