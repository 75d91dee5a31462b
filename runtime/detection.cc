// Detection, as the progress thread asks for it while an op waits: the
// progress deadline, a stalled op judged (runtime/stall_judge.h), and what
// interrupts a wait (a dead peer, a peer's abort notice), with the straggler
// logged once per op.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "base/log.h"
#include "runtime/communicator_impl.h"
#include "runtime/stall_judge.h"

namespace rcoll {

// The progress deadline: how long an op may move no bytes at all. The caller's
// timeout (per op, or per communicator) if set; else a floor plus the time the
// measured data plane needs for a whole window of slices, times a slack factor.
// Reads no state of the op in flight: diagnostics() shows it from any thread.
Clock::duration CommunicatorImpl::derived_budget(const Op& op, size_t piece_bytes,
                                                 int window) const {
  Millis timeout = op.options.timeout.count() > 0 ? op.options.timeout : options_.op_timeout;
  if (timeout.count() > 0)
    return timeout >= kYear ? Clock::duration(kYear) : Clock::duration(timeout);
  const double window_bytes = static_cast<double>(piece_bytes) * std::max(1, window) * size_;
  const double measured = bandwidth_.load();
  const double bw = measured > 0 ? measured : 100e6;  // until measured: a pessimistic 100 MB/s
  const auto derived = std::chrono::duration<double>(options_.deadline_slack * window_bytes / bw);
  return Clock::duration(options_.deadline_floor) + std::chrono::duration_cast<Clock::duration>(derived);
}

// The deadline an attempt runs under (progress thread): for the op in flight
// (not a replay of an earlier one) never more than what is left of the hang
// timeout (Options::hang_timeout), and before its first hang at most half of
// it, so that a recovery fits in it.
Clock::duration CommunicatorImpl::progress_budget(const Op& op, size_t piece_bytes,
                                                  int window) const {
  const Clock::duration budget = derived_budget(op, piece_bytes, window);
  if (options_.hang_timeout.count() <= 0 || !in_flight_.holds(op.seq)) return budget;
  const Clock::duration left = in_flight_.hang_since == Clock::time_point{}
                                   ? in_flight_.hang_left(options_.hang_timeout) / 2
                                   : in_flight_.hang_left(options_.hang_timeout);
  return std::min(budget, std::max<Clock::duration>(Millis(1), left));
}

// After a failed attempt, before another recovery: did the hang timeout
// expire? A stall judged hung begins a spell of hangs, which lasts across
// recoveries while no slice of the op completes (replays and resends move
// bytes without moving the op on); a slice completed ends it, whatever ended
// the attempt. An attempt shorter than a tenth of the hang timeout (at most a
// second) could not tell a hang from a slow link, so that little left is none.
Status CommunicatorImpl::hang_timeout_expired(const Status& s) {
  const Millis limit = options_.hang_timeout;
  if (limit.count() <= 0) return Status();
  size_t done = 0;
  for (const OpRecord& r : in_flight_.current()) done += r.done;
  if (in_flight_.hang_since != Clock::time_point{} && done > in_flight_.hang_done)
    in_flight_.hang_since = Clock::time_point{};  // the op moved on
  if (in_flight_.stall_began == Clock::time_point{}) return Status();
  if (in_flight_.hang_since == Clock::time_point{}) {
    in_flight_.hang_since = in_flight_.stall_began;
    in_flight_.hang_done = done;
    in_flight_.recoveries_at_hang = in_flight_.recoveries;
  }
  in_flight_.stall_began = Clock::time_point{};
  const Clock::duration least =
      std::min<Clock::duration>(std::chrono::seconds(1), in_flight_.hang_limit(limit) / 10);
  if (in_flight_.hang_left(limit) >= least) return Status();
  const int tried = in_flight_.recoveries - in_flight_.recoveries_at_hang;
  char what[320];
  std::snprintf(what, sizeof(what),
                "; no slice of it completed for %.1f s with every rank in the op, across %d "
                "recover%s: the hang timeout (%.1f s: Options::hang_timeout, "
                "RCOLL_HANG_TIMEOUT_MS, the process group's timeout under PyTorch) expired, no "
                "further recovery",
                std::chrono::duration<double>(Clock::now() - in_flight_.hang_since).count(), tried,
                tried == 1 ? "y" : "ies", std::chrono::duration<double>(limit).count());
  return Status(ErrorCode::kTimeout, s.context(), s.message() + what);
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
// A member of a group stalled: peers following the chain of waits see the
// member it is stuck on, not the one published when the group began.
void CommunicatorImpl::publish_awaited(const Op& op) {
  if (!liveness_ || in_flight_.group.empty() || op.kind != OpKind::kSendRecv) return;
  RankState st = liveness_->peer(rank_).state;
  if (st.waiting_on == op.peer && st.waiting_send == op.is_send &&
      st.p2p_seq == static_cast<uint32_t>(op.match_seq))
    return;
  st.waiting_on = op.peer;
  st.waiting_send = op.is_send;
  st.p2p_seq = static_cast<uint32_t>(op.match_seq);
  liveness_->set_local(st);
}

// An ungrouped send or receive that stalled with no one to blame: is it in a
// cycle of waits that can never end (stall_judge.h, wait_cycle)? Seen once,
// it is noted and looked at again a few heartbeats later (next_look: the
// peers' views come from heartbeats, a little behind); the same cycle seen
// again is the
// op's error, kDesync naming every rank and transfer in it. OK with
// in_flight_.cycle empty: no cycle here, judge the stall as hung.
Status CommunicatorImpl::judge_cycle(const Op& op, int peer) {
  const std::vector<WaitLink> cycle = wait_cycle(stall_view(op, peer));
  if (cycle.empty()) {
    in_flight_.cycle.clear();
    return Status();
  }
  if (cycle != in_flight_.cycle) {
    in_flight_.cycle = cycle;
    RCOLL_LOG(kWarn,
              "%s: no bytes moved and the ranks wait on each other in a cycle: %s; looking again "
              "in a few heartbeats",
              op.describe().c_str(), describe_cycle(cycle).c_str());
    return Status();
  }
  return Status(
      ErrorCode::kDesync, ErrorContext{rank_, peer, op.seq, epoch_.load(), transport_->name()},
      op.describe() + ": the ranks wait on each other in a cycle that can never complete: " +
          describe_cycle(cycle) +
          ". Ops run one at a time in issue order, and a large send completes only once its "
          "receiver takes the bytes: issue such sends and receives together as a group "
          "(Communicator::group_async, batch_isend_irecv) or order them so that each send "
          "meets its receive");
}

// A cycle seen once, or a send or receive that seems hung, is looked at
// again a few heartbeats later: long enough for every view on its chain of
// waits to have been refreshed, so a rank that had just moved on, or just
// begun to wait on someone, shows it.
Clock::duration CommunicatorImpl::next_look() const {
  const Clock::duration heartbeat =
      std::max<Clock::duration>(Millis(10), options_.liveness_budget / 15);
  // A stall whose judging waits for the peers' views: they answer a watch at
  // once, so two heartbeat intervals are plenty even on a loaded host.
  if (in_flight_.views_deferred) return 2 * heartbeat;
  if (in_flight_.cycle.empty() && !in_flight_.look_again) return Clock::duration::max();
  // And long enough for a link that lost a segment to have sent it again
  // (Transport::retransmission_wait): a pair of ranks waiting on each other
  // over a link in a retransmission timeout moves nothing until it fires.
  const Clock::duration retransmit =
      transport_ ? transport_->retransmission_wait() : Clock::duration::zero();
  return std::max(4 * heartbeat, retransmit + 2 * heartbeat);
}

Clock::duration CommunicatorImpl::want_views_after(const OpRecord& rec) const {
  // The attempt's progress deadline, hang cap included (an op on NCCL
  // counts its slices otherwise, but the floor dominates both).
  const Clock::duration budget = progress_budget(rec.op, rec.tuning.piece_bytes, rec.tuning.window);
  return std::min<Clock::duration>(options_.liveness_budget / 3, budget / 3);
}

void CommunicatorImpl::want_views(const Op& op, int awaited) {
  if (!liveness_) return;
  if (op.kind != OpKind::kSendRecv) return liveness_->want(-1);  // who is behind: any rank
  // Down the chain of waits, through the views that have not answered yet
  // too (their last-known waits): asking costs a frame, and a chain known
  // only one hop per look would leave a long pipeline's tail unknown when the
  // stall is judged.
  std::vector<bool> seen(static_cast<size_t>(size_), false);
  for (int q = awaited; q >= 0 && q < size_ && q != rank_ && !seen[static_cast<size_t>(q)];) {
    seen[static_cast<size_t>(q)] = true;
    liveness_->want(q);
    const PeerView v = liveness_->peer(q);
    if (v.health != PeerHealth::kAlive || !v.state.in_comm) return;
    q = v.state.waiting_on;
  }
}

bool CommunicatorImpl::views_current(const Op& op, int awaited) const {
  if (!liveness_) return true;
  // A dead or silent peer's health is what counts, not its state.
  auto known = [](const PeerView& v) { return v.current || v.health != PeerHealth::kAlive; };
  if (op.kind != OpKind::kSendRecv) {
    for (int q = 0; q < size_; ++q)
      if (q != rank_ && !known(liveness_->peer(q))) return false;
    return true;
  }
  int q = awaited;
  for (int hops = 0; q >= 0 && q < size_ && q != rank_ && hops < size_; ++hops) {
    const PeerView v = liveness_->peer(q);
    if (!known(v)) return false;
    if (v.health != PeerHealth::kAlive || !v.state.in_comm) return true;
    q = v.state.waiting_on;
  }
  return true;
}

void CommunicatorImpl::moved(uint64_t bytes) {
  ++in_flight_.moves;
  if (liveness_) liveness_->note_progress(bytes);
}

// A silent rank (no heartbeat, its connection open: frozen, stopped or
// partitioned) holds an op on NCCL while a caller's stream waits at a stream
// gate (Work::stream_wait). A recovery would stop NCCL's communicator, and
// NCCL then frees its pinned memory (ncclCommRevoke too: its proxy thread
// calls cudaFreeHost), which waits for the whole GPU, the gated stream
// included, while holding a lock of the CUDA driver that the recovery's next
// CUDA call (a new communicator's event, its allocations) needs: the gate
// would open only after the recovery, which waits for the free, which waits
// for the gate. Stacks of both threads were taken on an H200 in a DDP run
// with a rank SIGSTOPped for 5 s (bench/RESULTS.md, stop 47). So the silent
// rank is waited for on the same communicator, as a recovery would wait for
// it, up to the recovery timeout: a frozen rank that comes back joins the op
// and it completes with no recovery; one that does not fails the op for good
// (kPeerUnreachable), and only then, with the gate about to open, is NCCL
// stopped. A dead rank is judged dead (its connection closes).
Status CommunicatorImpl::wait_for_silent_under_gate(const Op& op, int silent) {
  const Clock::time_point now = Clock::now();
  OpInFlight& f = in_flight_;
  if (f.silent_under_gate != silent || f.moves != f.silent_under_gate_moves) {
    f.silent_under_gate = silent;
    f.silent_under_gate_since = now;
    f.silent_under_gate_moves = f.moves;
    RCOLL_LOG(kWarn,
              "%s on nccl, epoch %u: rank %d is silent (no heartbeat) and a CUDA stream waits at a "
              "stream gate of this process: waiting for rank %d on the same NCCL communicator, no "
              "recovery (stopping NCCL now would wait for that stream); if it is not back within "
              "the recovery timeout (%lld ms), the op fails",
              op.describe().c_str(), epoch_.load(), silent, silent,
              static_cast<long long>(options_.recovery_timeout.count()));
  }
  const auto waited = std::chrono::duration_cast<Millis>(now - f.silent_under_gate_since);
  if (waited < options_.recovery_timeout) return Status();
  return Status(
      ErrorCode::kPeerUnreachable, ErrorContext{rank_, silent, op.seq, epoch_.load(), "nccl"},
      op.describe() + " on nccl: rank " + std::to_string(silent) +
          " stayed silent (no heartbeat) for " + std::to_string(waited.count()) +
          " ms (the recovery timeout, " + std::to_string(options_.recovery_timeout.count()) +
          " ms) while a CUDA stream waited at a stream gate of this process; the op failed "
          "without a recovery (its output is undefined), and this communicator's later ops fail");
}

Status CommunicatorImpl::on_stall(const Op& op, int peer, Clock::duration stalled_for) {
  publish_awaited(op);
  // Judged after waiting for the peers' views: the stall began before that wait.
  // (Counted from the deferral, whatever clock the caller kept meanwhile.)
  if (in_flight_.views_deferred) {
    in_flight_.views_deferred = false;
    if (in_flight_.moves == in_flight_.views_moves)
      stalled_for = in_flight_.views_stall + (Clock::now() - in_flight_.views_deferred_at);
  }
  // The views the judging reads came in heartbeats since they were wanted
  // (want_views, from interrupted()). Where they have not all come yet (an
  // op timeout shorter than the wait for them), ask and look again shortly:
  // once per op and epoch, then judge with what there is (a view not current
  // reads as unknown).
  const int views_of =
      op.kind == OpKind::kSendRecv && liveness_ && liveness_->peer(rank_).state.waiting_on >= 0
          ? liveness_->peer(rank_).state.waiting_on
          : peer;
  if (liveness_ && peer >= 0 && !views_current(op, views_of)) {
    want_views(op, views_of);
    in_flight_.views_wanted = Clock::now();
    if (in_flight_.views_deferred_epoch != static_cast<int64_t>(epoch_.load())) {
      in_flight_.views_deferred_epoch = epoch_.load();
      in_flight_.views_deferred = true;
      in_flight_.views_stall = stalled_for;
      in_flight_.views_deferred_at = Clock::now();
      in_flight_.views_moves = in_flight_.moves;
      RCOLL_LOG(kDebug,
                "%s: no bytes moved for %lld ms; asked the peers it waits on for their state, "
                "judging once they answer",
                op.describe().c_str(),
                static_cast<long long>(std::chrono::duration_cast<Millis>(stalled_for).count()));
      return Status();
    }
  }
  in_flight_.look_again = false;
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
  if (verdict.kind != Stall::kSilent)
    in_flight_.silent_under_gate = -1;  // a wait under the gate starts over
  ctx.peer = verdict.peer;
  const std::string who = "rank " + std::to_string(verdict.peer);
  switch (verdict.kind) {
    case Stall::kDead:
      return Status(ErrorCode::kPeerDead, ctx, op.describe() + ": " + who + " is dead (its process is gone)");
    case Stall::kSilent:
      if (in_flight_.record != nullptr && in_flight_.record->nccl &&
          kernels::cuda::StreamGate::any_held()) {
        // A stream waits at a stream gate: stopping NCCL's communicator
        // for a recovery would deadlock (see wait_for_silent_under_gate).
        return wait_for_silent_under_gate(op, verdict.peer);
      }
      // DESIGN.md, silent peers: recover, and the recovery waits for it.
      return Status(ErrorCode::kTimeout, ctx,
                    op.describe() + ": no bytes moved for " + std::to_string(ms) + " ms and " + who +
                        " is silent (no heartbeat); recovering and waiting for it");
    case Stall::kWait:
      in_flight_.cycle.clear();  // what a cycle seen before would be is judged afresh
      return Status();           // a live straggler: wait on (interrupted() logs it)
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
      if (Status cycle = judge_cycle(op, peer); !cycle.ok() || !in_flight_.cycle.empty())
        return cycle;
      if (op.kind == OpKind::kSendRecv) {
        // The chain of waits is read from heartbeats, each up to an interval
        // old: a stage that just began waiting on the one holding it up may
        // not say so yet. Look once more, a few heartbeats later, before
        // calling the data plane hung; and if anyone on the chain moved bytes
        // meanwhile (a receiver still working through what was queued for it
        // before this send), it is busy, not hung: wait on, as for a
        // straggler, up to the straggler timeout.
        // A busy look counts the stall afresh from here, as a straggler's
        // wait does.
        const std::vector<ChainMember> chain = wait_chain(stall_view(op, peer), peer);
        const bool again = in_flight_.second_look(epoch_.load());
        const bool busy =
            again && chain_moved(in_flight_.chain, chain) && rules.late < rules.straggler_timeout;
        if (!again || busy) {
          in_flight_.look_at(busy ? Clock::now() : Clock::now() - stalled_for, epoch_.load());
          in_flight_.chain = chain;
          if (busy) {
            RCOLL_LOG(kDebug,
                      "%s: no bytes moved here for %lld ms, but rank %d (which it waits on%s) is "
                      "moving bytes: busy, not hung; waiting on",
                      op.describe().c_str(), static_cast<long long>(ms), peer,
                      chain.size() > 1 ? ", or one down its chain of waits" : "");
          }
          return Status();
        }
      } else if (transport_->retransmission_wait() > Clock::duration::zero() &&
                 !in_flight_.second_look(epoch_.load())) {
        // A collective: every rank in it and nothing moving. A link that
        // dropped segments while a straggler's buffer was full may still be
        // waiting out its retransmission timeout: look once more after it.
        in_flight_.look_at(Clock::now() - stalled_for, epoch_.load());
        return Status();
      }
      break;
  }
  ctx.peer = peer;
  // Judged on a second look, the stall began before the first.
  const Clock::time_point began = in_flight_.second_look(epoch_.load())
                                      ? in_flight_.stall_began_at_look
                                      : Clock::now() - stalled_for;
  // The hang timeout's clock: a stall of the op in flight, not of a replay.
  if (in_flight_.holds(op.seq)) in_flight_.stall_began = began;
  const auto stalled_ms = std::chrono::duration_cast<Millis>(Clock::now() - began).count();
  return Status(ErrorCode::kTimeout, ctx,
                op.describe() + ": no bytes moved for " + std::to_string(stalled_ms) +
                    " ms (the op's progress deadline)");
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
  // An op that moves no bytes asks for the views its judging will read
  // (heartbeats go to ring neighbours only), renewed every heartbeat
  // interval while it stays still.
  if (liveness_ && in_flight_.record) {
    const Clock::time_point now = Clock::now();
    if (in_flight_.moves != in_flight_.moves_seen ||
        in_flight_.still_since == Clock::time_point{}) {
      in_flight_.moves_seen = in_flight_.moves;
      in_flight_.still_since = now;
    }
    const Op& op = in_flight_.record->op;
    const Clock::duration interval =
        std::max<Clock::duration>(Millis(10), options_.liveness_budget / 15);
    if (now - in_flight_.views_wanted >= interval &&
        now - in_flight_.still_since >= want_views_after(*in_flight_.record)) {
      in_flight_.views_wanted = now;
      const int published = liveness_->peer(rank_).state.waiting_on;
      want_views(op, op.kind != OpKind::kSendRecv ? -1 : published >= 0 ? published : op.peer);
      // A device group on NCCL cannot tell which member holds it up (its
      // stall is judged on any member's chain: NcclWatch::judged): every
      // open member's chain of waits.
      if (in_flight_.record->nccl) {
        for (const OpRecord& r : in_flight_.group)
          if (r.done < r.total && r.op.peer != published) want_views(r.op, r.op.peer);
      }
    }
  }
  // Log a straggler as soon as it is clearly late: for a collective any live
  // rank not at the op yet, for a send or receive the rank at the end of the
  // chain of waits (runtime/stall_judge.h); and again every minute while
  // this rank still waits.
  if (liveness_ && in_flight_.record && in_flight_.straggler >= 0 &&
      Clock::now() - in_flight_.straggler_noted > std::chrono::seconds(60)) {
    in_flight_.straggler_noted = Clock::now();
    const PeerView v = liveness_->peer(in_flight_.straggler);
    RCOLL_LOG(kWarn,
              "%s: still waiting for rank %d, %.0f s after this rank arrived (it is at collective "
              "seq %llu, %s; "
              "straggler timeout %g s)",
              in_flight_.what("").c_str(), in_flight_.straggler,
              std::chrono::duration<double>(Clock::now() - in_flight_.started).count(),
              static_cast<unsigned long long>(v.state.op_seq),
              v.state.in_comm ? "in comm" : "in compute",
              std::chrono::duration<double>(straggler_timeout(in_flight_.record->op)).count());
  }
  if (liveness_ && in_flight_.record && in_flight_.straggler < 0 &&
      Clock::now() - in_flight_.started > options_.liveness_budget) {
    const Op& op = in_flight_.record->op;
    const bool p2p = op.kind == OpKind::kSendRecv;
    // A group waits on the member published as awaited (publish_state, publish_awaited).
    const int published = liveness_->peer(rank_).state.waiting_on;
    const int awaited = !p2p ? -1 : published >= 0 ? published : op.peer;
    const StallView view = stall_view(op, awaited);
    if (const int q = p2p ? holds_up(view, awaited) : first_behind(view); q >= 0) {
      in_flight_.straggler = q;
      in_flight_.straggler_noted = Clock::now();
      const PeerView v = liveness_->peer(q);
      const double secs = std::chrono::duration<double>(Clock::now() - in_flight_.started).count();
      const double timeout_s = std::chrono::duration<double>(straggler_timeout(op)).count();
      if (p2p) {
        RCOLL_LOG(kWarn,
                  "%s waits on rank %d%s, which is in compute (at collective seq %llu) %.1f s "
                  "after this rank "
                  "arrived; waiting (straggler timeout %g s), no recovery",
                  in_flight_.what("").c_str(), q,
                  q == awaited ? ""
                               : (" (through rank " + std::to_string(awaited) +
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
