// Memory that follows the work: pooled backup blocks are reused while busy,
// kept within their budget, and released when the communicator goes idle; the
// algorithms' scratch space likewise.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/algorithms/context.h"
#include "runtime/ledger.h"
#include "base/ring_queue.h"

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

// A backup of nothing (a broadcast's receiver reads no input) takes no block
// and gives none back: the free list must not fill with blocks no later take
// fits exactly (each take scanned past them: 1850 instructions per 4 KiB
// broadcast at a receiver, measured with callgrind).
TEST(BufferPool, NothingTakenForAnEmptyBackup) {
  BufferPool pool(1u << 20);
  {
    std::vector<PooledBuffer> held;
    for (int i = 0; i < 300; ++i) held.push_back(pool.take(0));
    for (const auto& b : held) EXPECT_EQ(b.size(), 0u);
    held.push_back(pool.take(4096));
  }
  EXPECT_EQ(pool.free_bytes(), 4096u) << "only the 4 KiB block comes back";
  EXPECT_EQ(pool.trim(), 4096u);
}

// The smallest free block that fits, whatever order the blocks came back in;
// of equal ones any; every block handed out at most once.
TEST(BufferPool, TakesTheSmallestBlockThatFits) {
  BufferPool pool(1u << 20);
  char* small = nullptr;
  char* mid = nullptr;
  char* large = nullptr;
  {
    PooledBuffer l = pool.take(64 * 1024), s = pool.take(4 * 1024), m = pool.take(16 * 1024);
    large = l.data();
    small = s.data();
    mid = m.data();
  }  // given back in the order m, s, l
  EXPECT_EQ(pool.free_bytes(), 84u * 1024);
  PooledBuffer a = pool.take(10 * 1024);
  EXPECT_EQ(a.data(), mid) << "16 KiB is the smallest block that fits 10 KiB";
  PooledBuffer b = pool.take(4 * 1024);
  EXPECT_EQ(b.data(), small) << "an exact fit";
  PooledBuffer c = pool.take(4 * 1024);
  EXPECT_EQ(c.data(), large) << "the only block left that fits";
  PooledBuffer d = pool.take(1);
  EXPECT_NE(d.data(), nullptr);
  EXPECT_TRUE(d.data() != small && d.data() != mid && d.data() != large) << "a block handed out twice";
  EXPECT_EQ(pool.free_bytes(), 0u);

  // Many blocks of one size (a period of small eager broadcasts let go at
  // once): each is handed out once, then new memory.
  std::vector<PooledBuffer> held;
  for (int i = 0; i < 8; ++i) held.push_back(pool.take(4096));
  std::vector<char*> given;
  for (auto& h : held) given.push_back(h.data());
  held.clear();
  std::vector<char*> again;
  for (int i = 0; i < 8; ++i) {
    held.push_back(pool.take(4096));
    again.push_back(held.back().data());
  }
  std::sort(given.begin(), given.end());
  std::sort(again.begin(), again.end());
  EXPECT_EQ(again, given) << "the 8 free blocks, each once";
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

// Pushes a completed op of `bytes` (backed up whole) into the log.
void push_op(ReplayLog& log, std::vector<char>& data, OpKind kind, int peer, uint64_t seq, size_t bytes) {
  OpRecord r;
  r.op.kind = kind;
  r.op.is_send = kind == OpKind::kSendRecv;
  r.op.peer = kind == OpKind::kSendRecv ? peer : -1;
  r.op.in = r.op.out = Buffer{data.data(), bytes, DataType::kUint8};
  r.op.seq = r.op.match_seq = seq;
  r.pool = log.pool();
  r.complete = true;
  r.done = r.total = 1;
  r.tuning.piece_bytes = 1u << 20;  // one slice
  r.back_up(0, 3, 0, 1);
  log.push(std::move(r));
}

// A peer's sends stay until later sends to that same peer carried more than
// the sockets hold (8 KiB here); collectives leave once two synchronizing
// collectives followed, even past a send that must stay. Bytes follow.
TEST(ReplayLog, SendsStayWhileTheSocketsMayHoldThemCollectivesLeaveAfterTwo) {
  ReplayLog log(64u << 20, 8u << 10);
  log.reset(3);
  std::vector<char> data(4096, 1);
  for (uint64_t k = 1; k <= 5; ++k) {
    push_op(log, data, OpKind::kSendRecv, 1, k, 4096);  // to rank 1, 4 KiB each
    push_op(log, data, OpKind::kSendRecv, 2, k, 1024);  // to rank 2, 1 KiB each
    if (k <= 4) push_op(log, data, OpKind::kAllreduce, -1, k, 1024);
  }
  std::vector<std::string> kept;
  for (const OpRecord& r : log.records())
    kept.push_back((r.op.kind == OpKind::kSendRecv ? "S" + std::to_string(r.op.peer) : std::string("C")) + ":" +
                   std::to_string(r.op.match_seq));
  // To rank 1: sends 1 and 2 have 16 and 12 KiB after them (> 8 KiB), 3 has 8.
  // To rank 2: at most 4 KiB after any. Collectives: 1 and 2 had two after.
  const std::vector<std::string> want = {"S2:1", "S2:2", "S1:3", "S2:3", "C:3", "S1:4", "S2:4", "C:4", "S1:5", "S2:5"};
  EXPECT_EQ(kept, want);
  EXPECT_EQ(log.bytes(), 3u * 4096 + 5u * 1024 + 2u * 1024);
}

// A long stream of small sends keeps the log at what the sockets can hold,
// record for record, and recycles the records that leave.
TEST(ReplayLog, AStreamOfSmallSendsKeepsWhatTheSocketsHold) {
  ReplayLog log(64u << 20, 16u << 10);
  log.reset(2);
  std::vector<char> data(4096, 1);
  for (uint64_t k = 1; k <= 10000; ++k) push_op(log, data, OpKind::kSendRecv, 1, k, 4096);
  // A send leaves once more than 16 KiB followed it: the last 5 stay.
  ASSERT_EQ(log.records().size(), 5u);
  EXPECT_EQ(log.records().front().op.match_seq, 9996u);
  EXPECT_EQ(log.bytes(), 5u * 4096);
  EXPECT_EQ(log.pool()->free_bytes(), 4096u) << "the backups of sends that left went back to the pool";
}

// First in, first out across wrap-around and growth (which happens here while
// the live elements wrap past the end of the array); a move empties the source.
TEST(RingQueue, KeepsOrderAcrossWrapAndGrowth) {
  RingQueue<int> q;
  int next_in = 0, next_out = 0;
  for (int i = 0; i < 6; ++i) q.push_back(next_in++);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(q.front(), next_out++);
    q.pop_front();
  }
  for (int i = 0; i < 20; ++i) q.push_back(next_in++);  // wraps, then grows from 8 slots
  ASSERT_EQ(q.size(), 21u);
  for (size_t i = 0; i < q.size(); ++i) EXPECT_EQ(q[i], next_out + static_cast<int>(i));
  RingQueue<int> moved = std::move(q);
  EXPECT_TRUE(q.empty());  // NOLINT(bugprone-use-after-move): a moved-from queue is empty
  while (!moved.empty()) {
    ASSERT_EQ(moved.front(), next_out++);
    moved.pop_front();
  }
  EXPECT_EQ(next_out, next_in);
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
