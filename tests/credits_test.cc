// The completion-credit schedule (runtime/credits.h): which eager broadcasts
// are credit points. Every rank must pick the same ones from the op sequence
// alone; the replay log lets go of broadcasts only at these points.
#include "runtime/credits.h"

#include <gtest/gtest.h>

#include <vector>

namespace rcoll {
namespace {

// The credit points among collectives 1..n, each an eager broadcast of `bytes`.
std::vector<uint64_t> points(CreditSchedule& s, uint64_t first, uint64_t n, uint64_t bytes) {
  std::vector<uint64_t> at;
  for (uint64_t seq = first; seq < first + n; ++seq) {
    if (s.advance(seq, bytes)) at.push_back(seq);
  }
  return at;
}

TEST(CreditSchedule, SmallBroadcastsGetThePeriodOfMostOps) {
  CreditSchedule s;
  s.reset(4);
  const uint64_t max = eager_credit_max_period(4);
  EXPECT_EQ(points(s, 1, 2 * max + 1, 8), (std::vector<uint64_t>{1, 1 + max, 1 + 2 * max}));
}

TEST(CreditSchedule, LargeBroadcastsEndAPeriodByBytesButNotBeforeTheMinimum) {
  CreditSchedule s;
  s.reset(4);
  const uint64_t min = eager_credit_min_period(4);
  // Each broadcast alone is a period's bytes: still a minimum period apart.
  EXPECT_EQ(points(s, 1, 2 * min + 1, kCreditPeriodBytes),
            (std::vector<uint64_t>{1, 1 + min, 1 + 2 * min}));
  // Bytes add up over the broadcasts since the last point.
  CreditSchedule t;
  t.reset(4);
  const uint64_t quarter = kCreditPeriodBytes / 4;
  std::vector<uint64_t> at = points(t, 1, 3 * min, quarter);
  ASSERT_GE(at.size(), 2u);
  EXPECT_EQ(at[1] - at[0], min)
      << "a minimum period carries more than a period's bytes at a quarter each";
}

TEST(CreditSchedule, LargerGroupsHaveLongerMinimumPeriods) {
  CreditSchedule s;
  s.reset(11);
  const uint64_t min = eager_credit_min_period(11);
  EXPECT_GT(min, eager_credit_min_period(4));
  EXPECT_EQ(points(s, 1, min + 1, kCreditPeriodBytes), (std::vector<uint64_t>{1, 1 + min}));
}

TEST(CreditSchedule, ARecoveryRestartsAtTheFirstCollectiveNoRankStarted) {
  CreditSchedule s;
  s.reset(4);
  EXPECT_TRUE(s.advance(1, 8));
  EXPECT_FALSE(s.advance(2, 8));
  s.restart_from(10);
  // Replays of collectives before 10 are never points (some rank may have
  // run them in the old epoch); 10 is, at once, whatever the period.
  EXPECT_FALSE(s.is_point(9, kCreditPeriodBytes));
  EXPECT_FALSE(s.advance(9, 8));
  EXPECT_TRUE(s.advance(10, 8));
  EXPECT_EQ(s.last_point(), 10u);
  EXPECT_FALSE(s.advance(11, 8));
}

TEST(CreditSchedule, EveryRankPicksTheSamePointsWhateverItSawBefore) {
  // Two ranks with the same op sequence since a recovery agree, though one
  // counted bytes the other never saw before it.
  CreditSchedule a, b;
  a.reset(4);
  b.reset(4);
  points(a, 1, 40, 4096);
  a.restart_from(50);
  b.restart_from(50);
  EXPECT_EQ(points(a, 50, 600, 4096), points(b, 50, 600, 4096));
}

TEST(CreditSchedule, AShrinkStartsOver) {
  CreditSchedule s;
  s.reset(4);
  EXPECT_TRUE(s.advance(1, 8));
  s.reset(3);  // a shrink: sequences start over
  EXPECT_TRUE(s.advance(1, 8));
}

}  // namespace
}  // namespace rcoll
