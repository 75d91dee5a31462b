// AlgoContext's wait, alone: a transport whose requests never finish and a
// guard that records when it is asked. The guard may ask for its next look
// sooner or later than a progress budget (a cycle to confirm, a link that may
// be retransmitting): the wait asks it then.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "runtime/algorithms/context.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;

// Two ranks' worth of a transport on which nothing ever arrives.
class SilentTransport final : public Transport {
 public:
  const char* name() const override { return "silent"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  uint32_t epoch() const override { return 0; }
  void post_send(int, const FrameHeader&, const void*, Request* req) override { pend(req); }
  void post_recv(int, const FrameHeader&, void*, Request* req) override { pend(req); }
  void progress(Deadline until) override { std::this_thread::sleep_until(until.time()); }
  void abort(const Status& why) override {
    for (Request* r : pending_) {
      r->status = why;
      r->state = Request::State::kFailed;
    }
    pending_.clear();
  }
  void break_link(int) override {}
  uint64_t bytes_sent() const override { return 0; }
  uint64_t bytes_received() const override { return 0; }

 private:
  void pend(Request* req) {
    req->state = Request::State::kPending;
    pending_.push_back(req);
  }
  std::vector<Request*> pending_;
};

// Says "keep waiting, and look again in `look`" the first time; fails the op
// the second. Records when it was asked and the stall it was told of.
class LookAgainGuard final : public ProgressGuard {
 public:
  explicit LookAgainGuard(Clock::duration look) : look_(look) {}
  Status on_stall(const Op&, int peer, Clock::duration stalled_for) override {
    asked_.push_back(Clock::now());
    stalled_.push_back(stalled_for);
    if (asked_.size() == 1) return Status();
    return Status(ErrorCode::kTimeout, ErrorContext{0, peer, 1, 0, "silent"}, "hung");
  }
  Status interrupted() override { return Status(); }
  Clock::duration next_look() const override {
    return asked_.size() == 1 ? look_ : Clock::duration::max();
  }

  std::vector<Clock::time_point> asked_;
  std::vector<Clock::duration> stalled_;

 private:
  Clock::duration look_;
};

void expect_second_look_after(Clock::duration budget, Clock::duration look) {
  SilentTransport t;
  Op op;
  op.kind = OpKind::kSendRecv;
  op.peer = 1;
  op.seq = 1;
  Tuning tuning;
  Scratch scratch;
  AlgoContext ctx(t, op, tuning, scratch);
  LookAgainGuard guard(look);
  ctx.set_guard(&guard, budget);
  std::vector<char> dst(64);
  Request& r = ctx.requests(1)[0];
  ctx.recv(1, 0, 0, dst.data(), dst.size(), &r);
  const Clock::time_point began = Clock::now();
  const Status s = ctx.wait(r);
  EXPECT_EQ(s.code(), ErrorCode::kTimeout) << s.to_string();
  ASSERT_EQ(guard.asked_.size(), 2u);
  EXPECT_GE(guard.asked_[0] - began, budget);
  // Asked again when it wanted, not a budget later, with the stall counted
  // afresh from the first look (the guard keeps what it saw).
  EXPECT_GE(guard.stalled_[1], look);
  EXPECT_LT(guard.stalled_[1], look + budget);
}

TEST(ProgressWait, ALookLaterThanTheBudgetWaitsForIt) { expect_second_look_after(200ms, 700ms); }

TEST(ProgressWait, ALookSoonerThanTheBudgetComesSooner) { expect_second_look_after(600ms, 150ms); }

}  // namespace
}  // namespace rcoll
