// Detection, as the progress thread asks for it while an op waits: the
// progress deadline, a stalled op judged (runtime/stall_judge.h), and what
// interrupts a wait (a dead peer, a peer's abort notice), with the straggler
// logged once per op.
#include <algorithm>
#include <csignal>
#include <string>
#include <thread>

#include "runtime/communicator_impl.h"
#include "base/log.h"
#include "runtime/stall_judge.h"

namespace rcoll {

// The progress deadline: how long an op may move no bytes at all. The caller's
// timeout (per op, or per communicator) if set; else a floor plus the time the
// measured data plane needs for a whole window of slices, times a slack factor.
Clock::duration CommunicatorImpl::progress_budget(const Op& op, size_t piece_bytes, int window) const {
  Millis timeout = op.options.timeout.count() > 0 ? op.options.timeout : options_.op_timeout;
  constexpr auto kYear = std::chrono::hours(24 * 365);
  if (timeout.count() > 0) return timeout >= Millis(kYear) ? Clock::duration(kYear) : Clock::duration(timeout);
  const double window_bytes = static_cast<double>(piece_bytes) * std::max(1, window) * size_;
  const double measured = bandwidth_.load();
  const double bw = measured > 0 ? measured : 100e6;  // until measured: a pessimistic 100 MB/s
  const auto derived = std::chrono::duration<double>(options_.deadline_slack * window_bytes / bw);
  return Clock::duration(options_.deadline_floor) + std::chrono::duration_cast<Clock::duration>(derived);
}

StallView CommunicatorImpl::stall_view(const Op& op, int awaited) const {
  StallView v;
  v.rank = rank_;
  v.size = size_;
  v.point_to_point = op.kind == OpKind::kSendRecv;
  v.match_seq = op.match_seq;
  v.awaited = awaited;
  if (liveness_) {
    v.peer = [this](int q) { return liveness_->peer(q); };
    v.seen_dead = [this](int q) { return dead_[static_cast<size_t>(q)].load(); };
  }
  return v;
}

// No bytes moved for the progress budget: judged by runtime/stall_judge.h.
// A live straggler is waited for (OK); the rest become the op's error, which
// run_op turns into a recovery where one can help.
Status CommunicatorImpl::on_stall(const Op& op, int peer, Clock::duration stalled_for) {
  const auto ms = std::chrono::duration_cast<Millis>(stalled_for).count();
  ErrorContext ctx{rank_, peer, op.seq, epoch_.load(), transport_->name()};
  if (!liveness_ || peer < 0) {
    return Status(ErrorCode::kTimeout, ctx, op.describe() + ": no bytes moved for " + std::to_string(ms) +
                                                " ms (the op's progress deadline)");
  }
  StallRules rules;
  rules.late = Clock::now() - in_flight_.started;
  rules.straggler_timeout = straggler_timeout(op);
  const StallVerdict verdict = judge_stall(stall_view(op, peer), rules);
  ctx.peer = verdict.peer;
  const std::string who = "rank " + std::to_string(verdict.peer);
  switch (verdict.kind) {
    case Stall::kDead:
      return Status(ErrorCode::kPeerDead, ctx, op.describe() + ": " + who + " is dead (its process is gone)");
    case Stall::kSilent:
      // DESIGN.md, silent peers: recover, and the recovery waits for it.
      return Status(ErrorCode::kTimeout, ctx,
                    op.describe() + ": no bytes moved for " + std::to_string(ms) + " ms and " + who +
                        " is silent (no heartbeat); recovering and waiting for it");
    case Stall::kWait:
      return Status();  // a live straggler: wait on (interrupted() logs it)
    case Stall::kStragglerExpired: {
      in_flight_.straggler_expired = true;
      const PeerView late_view = liveness_->peer(verdict.peer);
      return Status(ErrorCode::kTimeout, ctx,
                    op.describe() + ": " + who + " is alive but has not reached this op after " +
                        std::to_string(std::chrono::duration_cast<Millis>(rules.late).count()) +
                        " ms (it is at collective seq " + std::to_string(late_view.state.op_seq) +
                        (late_view.state.in_comm ? ", in comm" : ", in compute") + ")" +
                        "; the straggler timeout expired");
    }
    case Stall::kHung:
      break;
  }
  ctx.peer = peer;
  return Status(ErrorCode::kTimeout, ctx,
                op.describe() + ": no bytes moved for " + std::to_string(ms) + " ms (the op's progress deadline)");
}

Status CommunicatorImpl::interrupted() {
  if (size_ == 1) return Status();
  if (int dead = first_dead_peer(); dead >= 0) {
    return Status(ErrorCode::kPeerDead,
                  ErrorContext{rank_, dead, in_flight_.record ? in_flight_.record->op.seq : 0,
                               epoch_.load(), transport_->name()},
                  "rank " + std::to_string(dead) +
                      " died (its process is gone: liveness connection closed without a goodbye); "
                      "a dead rank cannot be recovered in place");
  }
  // Log a straggler once per op, as soon as it is clearly late: for a
  // collective any live rank not at the op yet, for a send or receive the
  // rank at the end of the chain of waits (runtime/stall_judge.h).
  if (liveness_ && in_flight_.record && in_flight_.straggler < 0 &&
      Clock::now() - in_flight_.started > options_.liveness_budget) {
    const Op& op = in_flight_.record->op;
    const bool p2p = op.kind == OpKind::kSendRecv;
    const StallView view = stall_view(op, p2p ? op.peer : -1);
    if (const int q = p2p ? holds_up(view, op.peer) : first_behind(view); q >= 0) {
      in_flight_.straggler = q;
      const PeerView v = liveness_->peer(q);
      const double secs = std::chrono::duration<double>(Clock::now() - in_flight_.started).count();
      const double timeout_s = std::chrono::duration<double>(straggler_timeout(op)).count();
      if (p2p) {
        RCOLL_LOG(kWarn,
                  "%s waits on rank %d%s, which is in compute (at collective seq %llu) %.1f s "
                  "after this rank "
                  "arrived; waiting (straggler timeout %g s), no recovery",
                  op.describe().c_str(), q,
                  q == op.peer ? ""
                               : (" (through rank " + std::to_string(op.peer) +
                                  "'s chain of sends and receives)")
                                     .c_str(),
                  static_cast<unsigned long long>(v.state.op_seq), secs, timeout_s);
      } else {
        RCOLL_LOG(kWarn,
                  "rank %d is late to %s: it is at collective seq %llu (%s) %.1f s after this rank "
                  "arrived; waiting "
                  "(straggler timeout %g s), no recovery",
                  q, op.describe().c_str(), static_cast<unsigned long long>(v.state.op_seq),
                  v.state.in_comm ? "in comm" : "in compute", secs, timeout_s);
      }
    }
  }
  if (!options_.recovery || !epoch_failed_elsewhere()) return Status();
  return Status(ErrorCode::kAborted, ErrorContext{rank_, -1, 0, epoch_.load(), transport_->name()},
                "a peer announced that epoch " + std::to_string(epoch_.load()) + " failed");
}

}  // namespace rcoll
