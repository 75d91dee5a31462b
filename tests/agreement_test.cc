// Agreement, the core of "no silent corruption" (runtime/ledger.h,
// agree_resume): from every rank's published ledger, each rank computes where
// each op resumes. Property-based: generated per-rank progress over every
// combination the window invariants allow, each rank's plan computed from
// the ledgers exactly as the recovery publishes them, and checked against the
// rules:
//   - a collective resumes at the same slice on every rank: the least any
//     rank has done (every slice needs every rank);
//   - a rank that finished the op re-runs it (from its backups) exactly when
//     a peer has not, and never loses the inputs it needs for that;
//   - a send and its receive resume at the receiver's count;
//   - a rank that would need inputs it no longer holds says so (kInternal
//     naming the op), rather than resume with the wrong data.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/ledger.h"

namespace rcoll {
namespace {

// One rank's state in a scenario: its replay log and its op in flight.
struct RankLedger {
  std::unique_ptr<ReplayLog> log;
  std::unique_ptr<OpRecord> current;  // null when this rank finished the op
};

constexpr uint64_t kSeq = 7;

Op allreduce_op(std::vector<float>& in, std::vector<float>& out) {
  Op op;
  op.kind = OpKind::kAllreduce;
  op.in = Buffer::of(in);
  op.out = Buffer::of(out);
  op.seq = op.match_seq = kSeq;
  return op;
}

// The resume slice `plan` gives this rank's op kSeq (or total when no entry:
// nothing to re-run).
size_t resume_of(const ResumePlan& plan, size_t total) {
  for (const auto& e : plan.entries)
    if (e.local_seq == kSeq) return e.resume;
  return total;
}

struct Scenario {
  int size = 2;
  Tuning tuning;
  std::vector<size_t> done;  // per rank
};

// Builds each rank's ledger for `s`: a rank that did every slice holds the op
// in its log, complete, with the backup record_completion takes (its last
// window); the others have it in flight. Every rank finished seq kSeq - 1.
std::vector<RankLedger> ledgers_for(const Scenario& s, std::vector<float>& in, std::vector<float>& out, size_t total,
                                    bool drop_backups) {
  std::vector<RankLedger> ranks(static_cast<size_t>(s.size));
  for (int q = 0; q < s.size; ++q) {
    RankLedger& l = ranks[static_cast<size_t>(q)];
    l.log = std::make_unique<ReplayLog>(64u << 20, 16u << 20);
    l.log->reset(s.size);
    l.log->collective_through = kSeq - 1;
    OpRecord rec;
    rec.op = allreduce_op(in, out);
    rec.tuning = s.tuning;
    rec.total = total;
    rec.done = s.done[static_cast<size_t>(q)];
    rec.pool = l.log->pool();
    const size_t window = static_cast<size_t>(s.tuning.window);
    rec.last_window_first = (total - 1) / window * window;
    if (rec.done == total) {
      rec.complete = true;
      if (!drop_backups) rec.back_up(q, s.size, rec.last_window_first, total);
      l.log->collective_through = kSeq;
      l.log->push(std::move(rec));
    } else {
      l.current = std::make_unique<OpRecord>(std::move(rec));
    }
  }
  return ranks;
}

Result<std::vector<size_t>> plans_for(const std::vector<RankLedger>& ranks, size_t total) {
  std::vector<std::string> texts;
  for (const auto& l : ranks)
    texts.push_back(
        serialize_ledger(*l.log, one_record(l.current.get()), static_cast<int>(ranks.size())));
  std::vector<size_t> resume;
  for (size_t q = 0; q < ranks.size(); ++q) {
    auto plan = agree_resume(static_cast<int>(q), static_cast<int>(ranks.size()), *ranks[q].log,
                             one_record(ranks[q].current.get()), texts);
    if (!plan.ok()) return plan.status();
    resume.push_back(resume_of(plan.value(), total));
  }
  return resume;
}

// Every per-rank progress the ring's window invariant allows: a rank starts
// window i + 1 only once every rank finished window i, so all ranks are
// within one window [m W, (m + 1) W] of each other (or all done).
std::vector<std::vector<size_t>> allowed_progress(int size, size_t total, size_t window) {
  std::vector<std::vector<size_t>> out;
  for (size_t m = 0; m * window < total; ++m) {
    const size_t lo = m * window, hi = std::min(total, (m + 1) * window);
    std::vector<size_t> d(static_cast<size_t>(size), lo);
    for (;;) {
      out.push_back(d);
      size_t i = 0;
      while (i < d.size() && d[i] == hi) d[i++] = lo;
      if (i == d.size()) break;
      ++d[i];
    }
  }
  return out;
}

TEST(Agreement, CollectiveResumesAtTheLeastDoneOnEveryRankOverEveryAllowedProgress) {
  size_t scenarios = 0;
  for (int size : {2, 3, 4}) {
    for (int window : {1, 2, 3}) {
      for (size_t count : {16u, 40u, 100u}) {
        std::vector<float> in(count, 1.0f), out(count);
        Scenario s;
        s.size = size;
        s.tuning.window = window;
        s.tuning.piece_bytes = 64;  // 16 floats a frame: several slices
        s.tuning.allreduce = AllreduceAlgorithm::kRing;
        const size_t total = plan_slices(allreduce_op(in, out), 0, size, s.tuning, 0, 0).slices;
        ASSERT_GE(total, 1u);
        for (const auto& done : allowed_progress(size, total, static_cast<size_t>(window))) {
          s.done = done;
          if (*std::min_element(done.begin(), done.end()) == total) continue;  // nothing failed mid-op
          ++scenarios;
          const size_t least = *std::min_element(done.begin(), done.end());
          auto ranks = ledgers_for(s, in, out, total, false);
          auto resume = plans_for(ranks, total);
          ASSERT_TRUE(resume.ok()) << resume.status().to_string();
          for (int q = 0; q < size; ++q) {
            EXPECT_EQ(resume.value()[static_cast<size_t>(q)], least)
                << size << " ranks, window " << window << ", " << total << " slices: rank " << q << " done "
                << done[static_cast<size_t>(q)];
          }
        }
      }
    }
  }
  EXPECT_GT(scenarios, 500u);
}

TEST(Agreement, AFinishedRankWithoutItsBackupsSaysSoInsteadOfResuming) {
  std::vector<float> in(64, 1.0f), out(64);
  Scenario s;
  s.size = 3;
  s.tuning.window = 2;
  s.tuning.piece_bytes = 64;
  s.tuning.allreduce = AllreduceAlgorithm::kRing;
  const size_t total = plan_slices(allreduce_op(in, out), 0, s.size, s.tuning, 0, 0).slices;
  ASSERT_GE(total, 2u);
  s.done = {total, total - 1, total};  // rank 1 still needs the last slice
  auto ranks = ledgers_for(s, in, out, total, true);
  auto resume = plans_for(ranks, total);
  ASSERT_FALSE(resume.ok());
  EXPECT_EQ(resume.status().code(), ErrorCode::kInternal);
  EXPECT_NE(resume.status().message().find("no longer holds its inputs"), std::string::npos) << resume.status().message();
}

// A collective on NCCL, 3 slices, that ranks 0 and 2 completed and rank 1
// did not (its slices were done on the GPU but it failed before counting
// them). `logged`: the completed ranks hold it in their logs, as
// record_completion keeps one that settles later.
std::vector<RankLedger> nccl_ledgers(bool settles_later, bool logged, std::vector<float>& in,
                                     std::vector<float>& out) {
  std::vector<RankLedger> ranks(3);
  for (int q = 0; q < 3; ++q) {
    RankLedger& l = ranks[static_cast<size_t>(q)];
    l.log = std::make_unique<ReplayLog>(64u << 20, 16u << 20);
    l.log->reset(3);
    l.log->collective_through = kSeq - 1;
    OpRecord rec;
    rec.op = allreduce_op(in, out);
    rec.nccl = true;
    rec.settles_later = settles_later;
    rec.total = 3;
    rec.pool = l.log->pool();
    if (q == 1) {
      l.current = std::make_unique<OpRecord>(std::move(rec));
      continue;
    }
    l.log->collective_through = kSeq;
    rec.complete = true;
    rec.done = rec.total;
    if (logged) l.log->push(std::move(rec));
  }
  return ranks;
}

TEST(Agreement, ACollectiveOnNcclThatSettlesLaterIsReplayedByTheRanksThatCompletedIt) {
  std::vector<float> in(64, 1.0f), out(64);
  auto resume = plans_for(nccl_ledgers(true, true, in, out), 3);
  ASSERT_TRUE(resume.ok()) << resume.status().to_string();
  // Every rank runs all three slices again: rank 1 its op, ranks 0 and 2 a
  // replay of the one they logged.
  EXPECT_EQ(resume.value(), (std::vector<size_t>{0, 0, 0}));
}

TEST(Agreement, ACollectiveOnNcclConfirmedOnItsOwnIsDoneEverywhereOnceOneRankHasIt) {
  std::vector<float> in(64, 1.0f), out(64);
  // Its confirmation came back on ranks 0 and 2 (not logged): rank 1's
  // slices were done, whatever it counted.
  auto resume = plans_for(nccl_ledgers(false, false, in, out), 3);
  ASSERT_TRUE(resume.ok()) << resume.status().to_string();
  EXPECT_EQ(resume.value()[1], 3u);
}

TEST(Agreement, ARankThatNoLongerHoldsACollectiveThatSettlesLaterSaysSo) {
  std::vector<float> in(64, 1.0f), out(64);
  auto resume = plans_for(nccl_ledgers(true, false, in, out), 3);
  ASSERT_FALSE(resume.ok());
  EXPECT_EQ(resume.status().code(), ErrorCode::kInternal);
  EXPECT_NE(resume.status().message().find("no longer holds its inputs"), std::string::npos)
      << resume.status().message();
}

// A send and its receive: the receiver's count is the truth, on both sides,
// however far ahead the sender got (what the sockets held).
TEST(Agreement, SendAndReceiveResumeAtTheReceiversCount) {
  std::vector<uint8_t> data(4096, 7);
  Tuning tuning;
  tuning.piece_bytes = 512;
  Op send;
  send.kind = OpKind::kSendRecv;
  send.is_send = true;
  send.peer = 1;
  send.in = send.out = Buffer::of(data);
  send.seq = send.match_seq = kSeq;
  Op recv = send;
  recv.is_send = false;
  recv.peer = 0;
  const size_t total = plan_slices(send, 0, 2, tuning, 0, 0).slices;
  ASSERT_GE(total, 4u);
  for (size_t r = 0; r <= total; ++r) {
    for (size_t s = r; s <= total; ++s) {
      if (r == total) continue;  // the receiver has it all: nothing to resume
      ReplayLog log0(64u << 20, 16u << 20), log1(64u << 20, 16u << 20);
      log0.reset(2);
      log1.reset(2);
      OpRecord sender, receiver;
      sender.op = send;
      receiver.op = recv;
      sender.tuning = receiver.tuning = tuning;
      sender.total = receiver.total = total;
      sender.done = s;
      receiver.done = r;
      sender.pool = log0.pool();
      std::unique_ptr<OpRecord> current0;
      if (s == total) {
        sender.complete = true;
        sender.back_up(0, 2, r, total);  // what it keeps: what the receiver may still need
        log0.send_through[1] = kSeq;
        log0.push(std::move(sender));
      } else {
        current0 = std::make_unique<OpRecord>(std::move(sender));
      }
      const std::vector<std::string> texts = {serialize_ledger(log0, one_record(current0.get()), 2),
                                              serialize_ledger(log1, one_record(&receiver), 2)};
      auto p0 = agree_resume(0, 2, log0, one_record(current0.get()), texts);
      auto p1 = agree_resume(1, 2, log1, one_record(&receiver), texts);
      ASSERT_TRUE(p0.ok()) << p0.status().to_string();
      ASSERT_TRUE(p1.ok()) << p1.status().to_string();
      EXPECT_EQ(resume_of(p0.value(), total), r) << "sender done " << s << ", receiver " << r;
      EXPECT_EQ(resume_of(p1.value(), total), r) << "sender done " << s << ", receiver " << r;
    }
  }
}

// Two ranks in a group each (a send to the other and a receive from it, as
// a 2-stage ring does): every member resumes on its own, at its receiver's
// count, however far each got; the two ends of each transfer agree.
TEST(Agreement, GroupMembersResumeEachAtItsOwnReceiversCount) {
  std::vector<uint8_t> a(4096, 1), b(4096, 2), c(4096, 3), d(4096, 4);
  Tuning tuning;
  tuning.piece_bytes = 512;
  auto member = [&](int peer, bool is_send, std::vector<uint8_t>& buf, uint64_t seq) {
    OpRecord r;
    r.op.kind = OpKind::kSendRecv;
    r.op.is_send = is_send;
    r.op.peer = peer;
    r.op.in = r.op.out = Buffer::of(buf);
    r.op.seq = seq;
    r.op.match_seq = 1;
    r.tuning = tuning;
    r.total = plan_slices(r.op, 0, 2, tuning, 0, 0).slices;
    return r;
  };
  ReplayLog log0(64u << 20, 16u << 20), log1(64u << 20, 16u << 20);
  log0.reset(2);
  log1.reset(2);
  // Rank 0: op 1 sends to 1, op 2 receives from 1. Rank 1: op 1 receives from 0, op 2 sends to 0.
  OpRecord g0[2] = {member(1, true, a, 1), member(1, false, b, 2)};
  OpRecord g1[2] = {member(0, false, c, 1), member(0, true, d, 2)};
  const size_t total = g0[0].total;
  ASSERT_EQ(total, 8u);
  g0[0].done = 6;  // ahead of its receiver (bytes in the socket)
  g1[0].done = 3;
  g0[1].done = 5;
  g1[1].done = 7;
  const std::vector<std::string> texts = {serialize_ledger(log0, g0, 2),
                                          serialize_ledger(log1, g1, 2)};
  auto p0 = agree_resume(0, 2, log0, g0, texts);
  auto p1 = agree_resume(1, 2, log1, g1, texts);
  ASSERT_TRUE(p0.ok()) << p0.status().to_string();
  ASSERT_TRUE(p1.ok()) << p1.status().to_string();
  auto at = [](const ResumePlan& p, uint64_t seq) {
    for (const auto& e : p.entries)
      if (e.local_seq == seq) return e.resume;
    return size_t{999};
  };
  EXPECT_EQ(at(p0.value(), 1), 3u);  // 0 -> 1: rank 1 received 3 slices
  EXPECT_EQ(at(p1.value(), 1), 3u);
  EXPECT_EQ(at(p0.value(), 2), 5u);  // 1 -> 0: rank 0 received 5
  EXPECT_EQ(at(p1.value(), 2), 5u);
}

// On NCCL a send completes only once the pair's confirmation is through,
// behind the receive on the receiver's stream: a receiver stopped before it
// saw its receive end (done 0) while the sender completed and moved on has
// the bytes. Resuming at 0 would wait for ever for a send never made again.
TEST(Agreement, AReceiveOnNcclWhoseSenderCompletedItIsDone) {
  std::vector<uint8_t> data(4096, 7);
  for (const bool sender_completed : {true, false}) {
    ReplayLog log0(64u << 20, 16u << 20), log1(64u << 20, 16u << 20);
    log0.reset(2);
    log1.reset(2);
    OpRecord sender, receiver;
    for (OpRecord* r : {&sender, &receiver}) {
      r->op.kind = OpKind::kSendRecv;
      r->op.in = r->op.out = Buffer::of(data);
      r->op.seq = r->op.match_seq = kSeq;
      r->nccl = true;
      r->total = 1;
    }
    sender.op.is_send = true;
    sender.op.peer = 1;
    receiver.op.peer = 0;
    std::unique_ptr<OpRecord> current0;
    if (sender_completed) {
      log0.send_through[1] = kSeq;  // an NCCL send is not logged once complete (record_completion)
    } else {
      sender.done = 1;  // its group ended on the GPU, its confirmation not yet
      current0 = std::make_unique<OpRecord>(std::move(sender));
    }
    const std::vector<std::string> texts = {serialize_ledger(log0, one_record(current0.get()), 2),
                                            serialize_ledger(log1, one_record(&receiver), 2)};
    auto p1 = agree_resume(1, 2, log1, one_record(&receiver), texts);
    ASSERT_TRUE(p1.ok()) << p1.status().to_string();
    // Still in flight on the sender: both run it again, from the receiver's count.
    EXPECT_EQ(resume_of(p1.value(), 1), sender_completed ? 1u : 0u)
        << "sender completed " << sender_completed;
    if (!sender_completed) {
      auto p0 = agree_resume(0, 2, log0, one_record(current0.get()), texts);
      ASSERT_TRUE(p0.ok()) << p0.status().to_string();
      EXPECT_EQ(resume_of(p0.value(), 1), 0u);
    }
  }
}

TEST(Agreement, AMalformedLedgerIsAnErrorNamingTheRank) {
  ReplayLog log(1u << 20, 1u << 20);
  log.reset(2);
  auto plan = agree_resume(0, 2, log, {}, {serialize_ledger(log, {}, 2), "through C -1 3\n"});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("rank 1"), std::string::npos) << plan.status().message();
}

}  // namespace
}  // namespace rcoll
