// While no op runs, the progress thread's checks (progress_loop calls them
// between ops): memory given back after a quiet spell, a dead peer in shrink
// mode, a peer that failed the epoch and needs this rank in its recovery.
#include <string>

#include "base/log.h"
#include "runtime/communicator_impl.h"

namespace rcoll {

// While no op runs: a dead peer (shrink mode), or a peer that failed the epoch
// and needs this rank in the recovery.
void CommunicatorImpl::idle_checks() {
  // Staging and backup memory grows to the working set while ops run; after a
  // quiet spell it goes back to the system (the next op grows it again).
  if (!idle_trimmed_ && Clock::now() - last_op_end_ > kIdleTrimAfter) {
    idle_trimmed_ = true;
    // Device and pinned memory stay until close: freeing either can wait for
    // the whole GPU (other communicators' kernels included).
    const size_t freed = scratch_.release() + log_.trim();
    tally_.held_bytes = log_.bytes();
    if (freed > 0) {
      RCOLL_LOG(kDebug, "idle for %lld ms: released %zu bytes of staging and backup memory",
                static_cast<long long>(std::chrono::duration_cast<Millis>(kIdleTrimAfter).count()),
                freed);
    }
  }
  // Stops and frees put off while some stream gate held a stream, once none
  // does (no CUDA call when there are none).
  bury_nccl();
  kernels::cuda::StreamGate::free_deferred();
  if (shrink_if_peer_died()) return;
  recover_if_peer_failed();
}

bool CommunicatorImpl::shrink_if_peer_died() {
  if (!fatal_.ok() || !options_.shrink_on_death || size_ <= 1 || first_dead_peer() < 0)
    return false;
  const int dead = first_dead_peer();
  Status why(ErrorCode::kPeerDead,
             ErrorContext{rank_, dead, 0, epoch_.load(), transport_name_.load()},
             "rank " + std::to_string(dead) + " died (its process is gone)");
  shrink_idle(why);
  return true;
}

// A peer failed the epoch while this rank runs no op: take part in the
// recovery (it needs every rank's ledger), then go back to waiting.
void CommunicatorImpl::recover_if_peer_failed() {
  if (fatal_.ok() && options_.recovery && size_ > 1 && epoch_failed_elsewhere()) {
    Status cause(ErrorCode::kAborted, ErrorContext{rank_, -1, 0, epoch_.load(), transport_->name()},
                 "a peer announced that epoch " + std::to_string(epoch_.load()) + " failed");
    transport_->abort(cause);
    in_flight_.recoveries = 0;
    Status s = recover_and_replay(cause, {}, {});
    if (!s.ok() && options_.shrink_on_death && s.code() == ErrorCode::kPeerDead &&
        first_dead_peer() >= 0) {
      shrink_idle(s);
      return;
    }
    if (!s.ok()) {
      fatal_ = s;
      publish_fatal(s);
      report_positions(s);
      RCOLL_LOG(kError, "%s; the communicator is unusable from here on", s.to_string().c_str());
    }
  }
}

// A shrink while no op was running: the caller learns it from its next op
// (unless ops already queued for the old group failed and told it).
// The caller learns of the shrink from its queued ops (failed as issued for
// the old group) or from its next op (shrink_unreported_, set by
// leave_old_group).
void CommunicatorImpl::shrink_idle(const Status& why) { (void)shrink(why, nullptr, nullptr, true); }

}  // namespace rcoll
