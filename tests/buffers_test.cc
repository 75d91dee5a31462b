// Memory that follows the work: pooled backup blocks are reused while busy,
// kept within their budget, and released when the communicator goes idle; the
// algorithms' scratch space likewise.
#include <gtest/gtest.h>

#include "runtime/algorithms/context.h"
#include "runtime/ledger.h"

namespace rcoll {
namespace {

TEST(BufferPool, ReusesWithinItsBudgetAndTrimsToNothing) {
  BufferPool pool(1u << 20);
  char* first = nullptr;
  {
    PooledBuffer a = pool.take(256 * 1024);
    first = a.data();
  }
  EXPECT_EQ(pool.free_bytes(), 256u * 1024);
  {
    PooledBuffer b = pool.take(100 * 1024);  // the free block fits: reused, not allocated
    EXPECT_EQ(b.data(), first);
    PooledBuffer big = pool.take(2u << 20);  // over the budget: freed when given back
  }
  EXPECT_EQ(pool.free_bytes(), 256u * 1024);
  EXPECT_EQ(pool.trim(), 256u * 1024);
  EXPECT_EQ(pool.free_bytes(), 0u);
}

// Requests for one op: idle, never moved while the op runs (a span handed
// out earlier stays valid when a later one needs a new block), and the same
// memory again for the next op.
TEST(Scratch, RequestsAreFreshStableAndReusedAcrossOps) {
  Scratch s;
  s.start_op();
  EXPECT_TRUE(s.requests(0).empty());
  EXPECT_EQ(s.held(), 0u) << "no requests, no block";
  std::span<Request> a = s.requests(40);
  ASSERT_EQ(a.size(), 40u);
  for (Request& r : a) EXPECT_EQ(r.state, Request::State::kIdle);
  a[39].state = Request::State::kDone;
  std::span<Request> b = s.requests(40);  // does not fit the first block's 24 left
  ASSERT_EQ(b.size(), 40u);
  EXPECT_EQ(a[39].state, Request::State::kDone) << "a later request moved an earlier one";
  EXPECT_TRUE(b.data() + b.size() <= a.data() || a.data() + a.size() <= b.data()) << "spans overlap";
  const size_t held = s.held();
  s.start_op();
  std::span<Request> c = s.requests(40);
  EXPECT_EQ(c.data(), a.data()) << "the next op reuses the first block";
  EXPECT_EQ(c[39].state, Request::State::kIdle) << "reused requests start idle";
  EXPECT_EQ(s.held(), held) << "no new memory once warm";
  EXPECT_GT(s.release(), 0u);
}

// Eager broadcasts synchronize nothing: only completion credits (every rank
// has every collective up to a seq) let their records and backups go, and the
// byte total follows.
TEST(ReplayLog, CreditsLetGoOfEagerBroadcastsAndTheirBackups) {
  ReplayLog log(1u << 20, 1u << 20);
  log.reset(4);
  std::vector<float> data(256, 1.0f);  // 1 KiB: eager
  for (uint64_t seq = 1; seq <= 10; ++seq) {
    OpRecord r;
    r.op.kind = OpKind::kBroadcast;
    r.op.in = r.op.out = Buffer{data.data(), data.size(), DataType::kFloat32};
    r.op.root = 0;
    r.op.seq = r.op.match_seq = seq;
    r.pool = log.pool();
    r.complete = true;
    r.done = r.total = 1;
    r.back_up(0, 4, 0, 1);
    log.push(std::move(r));
  }
  EXPECT_EQ(log.records().size(), 10u) << "eager broadcasts must not evict each other";
  EXPECT_EQ(log.bytes(), 10u * 1024);
  log.done_everywhere(6);
  ASSERT_EQ(log.records().size(), 4u);
  EXPECT_EQ(log.records().front().op.match_seq, 7u);
  EXPECT_EQ(log.bytes(), 4u * 1024);
}

TEST(Scratch, ReleaseGivesTheMemoryBack) {
  Scratch s;
  EXPECT_NE(s.get(1u << 20), nullptr);
  EXPECT_EQ(s.release(), 1u << 20);
  EXPECT_EQ(s.release(), 0u);
  EXPECT_NE(s.get(16), nullptr);
}

}  // namespace
}  // namespace rcoll
