// RCOLL_NCCL_PHASES's bookkeeping (runtime/nccl_phases.h): each op's phases
// count under its own size, a staged op not at all, and a new size starts a
// new run. Its first version gave each size the next size's first op.
#include "runtime/nccl_phases.h"

#include <gtest/gtest.h>

#include <thread>

namespace rcoll {
namespace {

// One op of `bytes` through the phases, `on_nccl` or staged, that spends at
// least `ms` in its issue phase.
void run_op(NcclPhases& p, size_t bytes, bool on_nccl, int ms) {
  p.start();
  p.mark(NcclPhases::kCallerStream);
  if (on_nccl) p.mark(NcclPhases::kSetup);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  p.mark(NcclPhases::kIssue);
  p.mark(NcclPhases::kEnd);
}

TEST(NcclPhases, EachOpCountsUnderItsOwnSize) {
  NcclPhases q;
  q.on = true;
  for (int i = 0; i < 3; ++i) {
    run_op(q, 8, true, 1);
    EXPECT_FALSE(q.new_size(8));
    q.take_op(8);
  }
  EXPECT_EQ(q.ops, 3u);
  EXPECT_EQ(q.bytes, 8u);
  const auto small = q.sum[NcclPhases::kIssue];
  EXPECT_GE(small, std::chrono::milliseconds(3));
  // A larger op, slower: a new size, whose run holds it alone.
  run_op(q, 1 << 20, true, 20);
  EXPECT_TRUE(q.new_size(1 << 20));
  // What is logged now for 8 bytes holds the small ops alone.
  EXPECT_EQ(q.sum[NcclPhases::kIssue], small);
  EXPECT_EQ(q.ops, 3u);
  q.take_op(1 << 20);
  EXPECT_EQ(q.ops, 1u);
  EXPECT_EQ(q.bytes, size_t{1} << 20);
  EXPECT_GE(q.sum[NcclPhases::kIssue], std::chrono::milliseconds(20));
  EXPECT_LT(q.sum[NcclPhases::kIssue], std::chrono::seconds(5));
}

TEST(NcclPhases, AStagedOpIsNotCounted) {
  NcclPhases p;
  p.on = true;
  run_op(p, 8, true, 0);
  p.take_op(8);
  run_op(p, 64, false, 0);  // staged: no setup mark
  EXPECT_FALSE(p.new_size(64));
  p.take_op(64);
  EXPECT_EQ(p.ops, 1u);
  EXPECT_EQ(p.bytes, 8u);
}

TEST(NcclPhases, OffMarksNothing) {
  NcclPhases p;
  run_op(p, 8, true, 0);
  p.take_op(8);
  EXPECT_EQ(p.ops, 0u);  // take_op after a start that did nothing: no NCCL mark seen
}

}  // namespace
}  // namespace rcoll
