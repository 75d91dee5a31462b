// Groups of sends and receives (Communicator::group_async): NCCL's
// ncclGroupStart/ncclGroupEnd on rcoll's ledger.
//
// Each member of a group is an ordinary send or receive: numbered in issue
// order (seq, and the per-peer match_seq its frames carry), logged, resumed
// and re-run for a peer exactly as its ungrouped form, so the ledger, the
// agreement and the replays need nothing new. What the group changes is how
// the members run: together, in rounds. In round j every member posts its
// slices [first + j*W, first + (j+1)*W) (W: the frames a lone send keeps in
// flight), members in group order, and then the round is waited for whole.
//
// Why that cannot wait in a cycle: a member's round-j frames are matched by
// its peer's round-j posts for the counterpart member (both ends resume a
// member at the same agreed slice and cut it the same way, and members to
// one peer in one direction are posted in group order on both ends, so the
// frames of one connection pair up in order). Every rank posts round 0
// without waiting; a rank that finished round j-1 posts round j; so by
// induction over j every round of every rank is posted and completes, for
// any groups NCCL would complete (each send matched by a receive of the same
// size in the peer's group). Ungrouped, the same pattern can deadlock: a
// large send completes only once its receiver takes the bytes.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "runtime/communicator_impl.h"

namespace rcoll {

Status CommunicatorImpl::run_group(const Op& carrier) {
  const std::vector<Op>& members = *carrier.group;
  if (!fatal_.ok()) {
    for (const Op& m : members) recorder_.finished(m.seq, false);
    return Status(
        fatal_.code(),
        ErrorContext{rank_, fatal_.context().peer, carrier.seq, epoch_.load(),
                     transport_name_.load()},
        carrier.describe() +
            " not run: the communicator gave up after an earlier failure: " + fatal_.message());
  }
  // An array, not a vector: records move but do not copy (their backups).
  const auto storage = std::make_unique<OpRecord[]>(members.size());
  const std::span<OpRecord> recs(storage.get(), members.size());
  for (size_t i = 0; i < members.size(); ++i) recs[i] = new_record(members[i]);
  for (const Op& m : members) inject_late_start(m);
  in_flight_.record = &recs.front();
  in_flight_.group = recs;
  in_flight_.group_op = &carrier;
  in_flight_.started = Clock::now();
  for (const auto& r : recs)
    recorder_.started(r.op.seq, epoch_.load(), r.total, in_flight_.started);
  in_flight_.straggler = -1;
  in_flight_.straggler_expired = false;
  in_flight_.recoveries = 0;
  publish_state(true);
  std::vector<size_t> first(recs.size(), 0);
  for (;;) {
    Status s = run_group_slices(recs, first);
    if (!s.ok() || in_flight_.recoveries > 0) {
      for (const auto& r : recs) recorder_.progressed(r.op.seq, r.done, epoch_.load());
    }
    if (s.ok()) break;
    if (in_flight_.straggler_expired) {
      // A live rank that is merely late: rebuilding the data plane cannot help.
    } else if (in_flight_.recoveries >= options_.max_recoveries_per_op) {
      s = Status(s.code(), s.context(),
                 s.message() + " (gave up after " + std::to_string(in_flight_.recoveries) +
                     " recoveries of this group)");
    } else if (recoverable(s) && options_.recovery && size_ > 1) {
      s = recover_and_replay(s, recs, first);
      if (s.ok()) continue;
    }
    return end_failed_group(recs, carrier, std::move(s));
  }
  if (in_flight_.straggler >= 0) {
    RCOLL_LOG(kWarn, "%s completed; rank %d held it up for %.1f s (straggler, no recovery needed)",
              carrier.describe().c_str(), in_flight_.straggler,
              std::chrono::duration<double>(Clock::now() - in_flight_.started).count());
  }
  in_flight_ = OpInFlight{};
  const Clock::time_point ended = Clock::now();
  for (auto& r : recs) {
    recorder_.finished(r.op.seq, true, ended);
    record_completion(std::move(r));
  }
  publish_state(false);
  return Status();
}

Status CommunicatorImpl::end_failed_group(std::span<OpRecord> recs, const Op& carrier, Status s) {
  const bool too_late = in_flight_.straggler_expired;
  in_flight_ = OpInFlight{};
  if (options_.shrink_on_death && s.code() == ErrorCode::kPeerDead && first_dead_peer() >= 0) {
    // The members write only their receive buffers (nothing in place): the
    // caller issues the group again for the new group of ranks, or not.
    const int was = rank_, of = size_;
    (void)shrink(s);
    for (const auto& r : recs) recorder_.finished(r.op.seq, false);
    if (fatal_.ok()) {
      return Status(ErrorCode::kPeerDead, s.context(),
                    s.message() + "; shrink mode: the communicator went on without it, rank " +
                        std::to_string(was) + " of " + std::to_string(of) + " is now rank " +
                        std::to_string(rank_.load()) + " of " + std::to_string(size_.load()) +
                        "; " + carrier.describe() +
                        " did not complete: its receive buffers hold undefined data");
    }
    return fatal_;
  }
  fatal_ = s;
  publish_fatal(s);
  RCOLL_LOG(kError, "%s; %s", s.to_string().c_str(),
            too_late
                ? "a rank was too late for this group: later ops on this communicator will fail"
            : recoverable(s) && options_.recovery
                ? "recovery failed: later ops on this communicator will fail"
                : "not recoverable: later ops on this communicator will fail");
  publish_state(false);
  for (const auto& r : recs) recorder_.finished(r.op.seq, false);
  report_positions(s);
  return s;
}

// One attempt at the members' slices from first[i] on, in rounds.
Status CommunicatorImpl::run_group_slices(std::span<OpRecord> recs, std::span<const size_t> first) {
  in_flight_.straggler_expired = false;
  struct Member {
    OpRecord* rec;
    std::unique_ptr<AlgoContext> ctx;
    std::span<Request> reqs;
    size_t piece;  // elements per slice
    size_t first;
  };
  std::vector<Member> ms;
  ms.reserve(recs.size());
  size_t window = 1;
  for (size_t i = 0; i < recs.size(); ++i) {
    OpRecord& rec = recs[i];
    if (first[i] >= rec.total) continue;  // complete on both ends
    auto ctx = std::make_unique<AlgoContext>(*transport_, rec.op, rec.tuning, scratch_,
                                             /*shares_scratch=*/!ms.empty());
    ctx->set_guard(this, progress_budget(rec.op, rec.tuning.piece_bytes, rec.tuning.window));
    ctx->set_slice_range(first[i], rec.total);
    ctx->set_window_hook([&rec](size_t begin, size_t) { rec.last_window_first = begin; });
    window = ctx->window() * 2;  // as a lone send or receive keeps in flight (point_to_point.cc)
    Member m{&rec, std::move(ctx), {}, 0, first[i]};
    m.piece = m.ctx->piece_elements();
    m.reqs = m.ctx->requests(std::min(window, rec.total - first[i]));
    ms.push_back(std::move(m));
  }
  for (auto& m : ms) {
    if (m.first == 0 && !faults_.empty()) inject_before(m.rec->op, *m.ctx, m.rec->total);
  }
  Status s;
  for (size_t round = 0; s.ok(); ++round) {
    bool any = false;
    for (auto& m : ms) {
      const size_t start = m.first + round * window;
      if (start >= m.rec->total) continue;
      any = true;
      const size_t w = std::min(window, m.rec->total - start);
      const Op& op = m.rec->op;
      const size_t es = op.element_size(), n = op.out.count;
      m.ctx->before_window(start, start + w);
      for (size_t k = 0; k < w; ++k) {
        const size_t off = (start + k) * m.piece, len = std::min(m.piece, n - std::min(n, off));
        const auto chunk = static_cast<uint32_t>(start + k);
        if (op.is_send) {
          m.ctx->send(op.peer, chunk, 0, m.ctx->in(off), len * es, &m.reqs[k]);
        } else {
          m.ctx->recv(op.peer, chunk, 0, m.ctx->out(off), len * es, &m.reqs[k]);
        }
      }
    }
    if (!any) break;
    for (auto& m : ms) {
      const size_t start = m.first + round * window;
      if (start >= m.rec->total) continue;
      const size_t w = std::min(window, m.rec->total - start);
      const std::span<Request> reqs = m.reqs.first(w);
      // Whom this group waits on now, for the peers that follow chains of waits.
      if (!std::all_of(reqs.begin(), reqs.end(), [](const Request& r) { return r.finished(); })) {
        publish_awaited(m.rec->op);
      }
      s = m.ctx->wait_all(reqs);
      if (!s.ok()) break;
      m.ctx->slices_done(start + w);
      m.rec->done = std::max(m.rec->done, start + w);
    }
  }
  for (auto& m : ms) injected_ += m.ctx->faults_fired();
  bytes_sent_ = transport_->bytes_sent();
  bytes_received_ = transport_->bytes_received();
  return s;
}

}  // namespace rcoll
