// Collectives on device buffers over NCCL, with the guarantees every other op
// has (DESIGN.md: NCCL is the primary path for GPU buffers):
//
//   - Each epoch's NCCL communicator is made at the epoch's first device
//     collective: every rank arrives (rank 0 with a unique id; arrivals are
//     waited for as an op waits for its peers, so a straggler is waited for
//     and a frozen rank recovered from), then all init within a deadline and
//     publish the outcome. If any failed, the op fails into a recovery; a
//     rank that cannot join (no GPU, a fail-connect fault) or will not (NCCL
//     failed too often lately) votes there to stop using NCCL, and the
//     recovery's vote makes every rank stage device collectives over the
//     host transports from the next epoch on, together.
//   - An op is cut into slices (contiguous element ranges where one NCCL call
//     can take them), issued back to back on the communicator's stream, one
//     event each. The ledger counts the slices whose event fired before any
//     failure; an event that fires after an abort does not count.
//   - Nothing an op reads is lost: an in-place all-reduce copies each slice's
//     input aside (device memory, same stream) before the slice runs, and a
//     re-run puts it back first; other ops never write what they read. So any
//     slice can run again on any rank, whatever an aborted kernel left behind.
//   - A confirmation all-reduce, queued on the stream behind an op's slices,
//     makes each rank contribute only once its slices are done. Once it is
//     done here, every rank's are: the op is never re-run for a peer, and
//     keeps nothing after it returns. It carries the folded fingerprints of
//     every collective completed on NCCL before it, so ranks that ran
//     different ops learn it (a desync) instead of going on with garbage.
//   - Small collectives settle later (docs/gpu.md): no confirmation of their
//     own; a collective whose seq (counted over every collective, host ones
//     too) is a multiple of Options::nccl_confirm_every is confirmed on its
//     own. Ranks are never more than one such op apart (a rank issues
//     the next only once it saw this one done, and none can complete until
//     every rank issued it), so each keeps the input of the last one it
//     completed on the device (NcclPlane::kept); a recovery that finds a
//     peer still inside it replays its remaining slices from there into
//     scratch, as the host path replays from its log. A desync among them is
//     reported at the next confirmation, naming the range of seqs.
//   - No slice completing for the op's progress budget is a stall, judged as
//     for any op (straggler: wait; silent or hung: recover; dead: error). A
//     peer's abort notice or an NCCL error aborts the communicator at once.
//     Recovery rebuilds the epoch; the op's next run makes the new epoch's
//     communicator and resumes at the slice every rank agreed on.
//   - Never stopped under a held gate: while a caller's stream waits at the
//     stream gate, an abort leaves NCCL alone (nccl::Comm::abort puts the
//     stop off), because stopping NCCL frees pinned memory, a wait for the
//     whole GPU, the gated stream included, that holds the CUDA driver
//     meanwhile: no CUDA call of the process could follow it until the gate
//     opens, and the gate opens only after the recovery's attempt (stop 52's
//     hang; stop 56 saw the same with the stop made once the next attempt
//     was queued). The old calls run on: the recovery's attempt goes on the
//     next communicator, on a stream of its own (NcclPlane::streams),
//     ordered after what the old one queued but a confirmation queued last,
//     which may wait for ever for a peer that failed before issuing its own.
//     Once the gate opened (bury_nccl), every stop put off is made, all
//     before any communicator is freed. Old calls that never end (a link
//     really dead) hold the attempt behind them: it stalls, and is judged so.
#include <algorithm>
#include <csignal>
#include <new>
#include <string>
#include <thread>

#include "base/log.h"
#include "base/store_exchange.h"
#include "runtime/communicator_impl.h"
#include "runtime/nccl_fingerprint.h"
#include "runtime/store/keys.h"

namespace rcoll {
namespace {

namespace cuda = kernels::cuda;
using nccl::Call;

// How long a wait for an op's NCCL calls polls without sleeping, and the
// longest sleep between polls after: an op on NCCL is worth a core, and a
// data-parallel step's ops (tens of ms each) each end up to a sleep late
// (with the 1 ms every other wait allows, 3% of DDP's step on one GPU).
constexpr std::chrono::microseconds kNcclSpin{1000};
constexpr std::chrono::microseconds kNcclMaxSleep{100};
using nccl::CallKind;

ElementRange slice_range(const Op& op, size_t k, size_t slices) {
  const size_t n = op.out.count;
  return {n * k / slices, n * (k + 1) / slices};
}

// The NCCL calls of slice k (one group).
std::vector<Call> slice_calls(const Op& op, int size, size_t k, size_t slices) {
  const size_t es = op.element_size();
  auto at = [es](const void* base, size_t element) { return static_cast<const char*>(base) + element * es; };
  auto at_mut = [es](void* base, size_t element) { return static_cast<char*>(base) + element * es; };
  const ElementRange r = slice_range(op, k, slices);
  switch (op.kind) {
    case OpKind::kAllreduce:
      return {Call{CallKind::kAllReduce, at(op.in.data, r.begin), at_mut(op.out.data, r.begin), r.end - r.begin, op.out.dtype, op.reduce}};
    case OpKind::kBroadcast:
      return {Call{CallKind::kBroadcast, at(op.in.data, r.begin), at_mut(op.out.data, r.begin), r.end - r.begin, op.out.dtype,
                   ReduceOp::kSum, op.root}};
    case OpKind::kAllgather:
      return {Call{CallKind::kAllGather, op.in.data, op.out.data, op.in.count, op.out.dtype}};
    case OpKind::kReduceScatter:
      return {Call{CallKind::kReduceScatter, op.in.data, op.out.data, op.out.count, op.out.dtype, op.reduce}};
    case OpKind::kSendRecv:
      if (op.is_send) {
        return {Call{CallKind::kSend, at(op.in.data, r.begin), nullptr, r.end - r.begin, op.out.dtype, ReduceOp::kSum, op.peer}};
      }
      return {Call{CallKind::kRecv, nullptr, at_mut(op.out.data, r.begin), r.end - r.begin, op.out.dtype, ReduceOp::kSum,
                   op.peer}};
    case OpKind::kAlltoall: {
      // NCCL has no all-to-all of its own in every version: a group of sends and receives.
      const size_t block = op.out.count / static_cast<size_t>(size);
      std::vector<Call> calls;
      for (int q = 0; q < size; ++q) {
        calls.push_back(Call{CallKind::kSend, at(op.in.data, block * static_cast<size_t>(q)), nullptr, block, op.out.dtype,
                             ReduceOp::kSum, q});
        calls.push_back(Call{CallKind::kRecv, nullptr, at_mut(op.out.data, block * static_cast<size_t>(q)), block,
                             op.out.dtype, ReduceOp::kSum, q});
      }
      return calls;
    }
    default:
      return {};
  }
}

// An in-place all-reduce overwrites its input: the one op whose input slices
// are copied aside before they run.
bool backs_up(const Op& op) { return op.kind == OpKind::kAllreduce && op.in_place(); }

// Whether the op's input and output share no byte (an in-place all-gather's
// or reduce-scatter's lie one inside the other).
bool disjoint(const Op& op) {
  const char* in = static_cast<const char*>(op.in.data);
  const char* out = static_cast<const char*>(op.out.data);
  return in + op.in.bytes() <= out || out + op.out.bytes() <= in;
}

// Collectives of less than this many input bytes settle later (no confirmation
// of their own): keeping their input costs a device copy of at most this,
// where a confirmation costs an NCCL group (tens of us). Larger ones are
// confirmed one by one, as their own time dwarfs a confirmation's.
constexpr size_t kSettleLaterBytes = size_t{1} << 20;

}  // namespace

bool CommunicatorImpl::runs_on_nccl(const Op& op) const {
  if (!nccl::built() || !chain_.nccl() || !nccl_.off.empty() || op.device < 0) return false;
  if (op.group) return true;  // sends and receives on one device: one NCCL group (run_nccl_group)
  return op.kind == OpKind::kAllreduce || op.kind == OpKind::kAllgather || op.kind == OpKind::kReduceScatter ||
         op.kind == OpKind::kBroadcast || op.kind == OpKind::kAlltoall || op.kind == OpKind::kSendRecv;
}

size_t CommunicatorImpl::nccl_slice_count(const Op& op) {
  if (op.kind != OpKind::kAllreduce && op.kind != OpKind::kBroadcast && op.kind != OpKind::kSendRecv) return 1;
  return std::max<size_t>(1, (op.out.bytes() + kNcclSliceBytes - 1) / kNcclSliceBytes);
}

// The same answer on every rank for the same op (the calls each rank makes
// must match): the op, the group's size and the options every rank shares
// alone decide it (not backup_bytes, a rank's own). Every
// nccl_confirm_every-th collective seq is confirmed on its own instead (and
// so completes everywhere once one rank has it, as before). Below 1 MiB:
// from there a host collective ends with a confirmation round of its own
// (confirms_completion), which a staged replay (replay_nccl_staged) would
// not join. Not in shrink mode, where a rank that completed an op must know
// every survivor has it (shrink()).
bool CommunicatorImpl::settles_later(const Op& op) const {
  const bool kind = op.kind == OpKind::kAllreduce || op.kind == OpKind::kAllgather ||
                    op.kind == OpKind::kReduceScatter || op.kind == OpKind::kAlltoall;
  return kind && op.on_device() && size_ > 1 && options_.recovery && !options_.shrink_on_death &&
         op.in.bytes() < kSettleLaterBytes &&
         op.match_seq % static_cast<uint64_t>(options_.nccl_confirm_every) != 0;
}

CommunicatorImpl::NcclFault CommunicatorImpl::inject_nccl(const Op& op) {
  if (op.seq <= injected_through_seq_) return NcclFault::kNone;
  injected_through_seq_ = op.seq;
  NcclFault planned = NcclFault::kNone;
  for (const Fault& f : faults_) {
    if ((f.rank != -1 && f.rank != rank_) || f.op != op.seq) continue;
    if (!f.at.empty() && !(f.kind == FaultKind::kCloseLink && f.at == "done")) continue;
    switch (f.kind) {
      case FaultKind::kKill:
        RCOLL_LOG(kWarn, "fault injection: killing this process (SIGKILL) at %s on nccl", op.describe().c_str());
        std::raise(SIGKILL);
        break;
      case FaultKind::kCloseLink:
        RCOLL_LOG(kWarn,
                  "fault injection: aborting this rank's NCCL communicator during %s, as a failed "
                  "link would%s",
                  op.describe().c_str(),
                  f.at == "done" ? " (once its slices are done, before it counts them)" : "");
        planned = f.at == "done" ? NcclFault::kAfterLastSlice : NcclFault::kAfterFirstSlice;
        break;
      case FaultKind::kDelayChunk:
        ++tally_.delays_injected;
        std::this_thread::sleep_for(Millis(f.ms));
        break;
      case FaultKind::kBadAlloc:
      case FaultKind::kThrow:
        throw_injected(f.kind, rank_, op.seq, op.describe() + " on nccl");
      default:
        break;  // stall is applied in run_op; the rest act on frames NCCL does not have
    }
  }
  return planned;
}

// How a wait for NCCL (enqueuing or completing) goes on: a peer's abort
// notice ends it, and no completion for the op's progress budget is a stall,
// judged as for any op (runtime/stall_judge.h).
struct CommunicatorImpl::NcclWatch {
  CommunicatorImpl& c;
  const Op& op;
  Clock::duration budget;
  int awaited;  // the other side of a send or receive, else the ring neighbour (what a collective waits on most)
  Clock::time_point last_progress = Clock::now();
  // A device group's members still running, receives first (`op` is the
  // first): a stall is judged on the member whose peer's chain of waits
  // leads to a rank in compute, if one does (NCCL shows no member's
  // progress, so the group cannot tell which member it is stuck on).
  std::vector<const Op*> group;

  NcclWatch(CommunicatorImpl& impl, const Op& o)
      : c(impl), op(o),
        budget(impl.progress_budget(o, std::max<size_t>(std::min(o.out.bytes(), kNcclSliceBytes), 1), 1)),
        awaited(o.kind == OpKind::kSendRecv ? o.peer : (impl.rank_ + 1) % impl.size_) {}

  // A rank that went silent (frozen, partitioned) holds NCCL's kernels on
  // every rank: judged at once rather than after the whole progress budget
  // (DESIGN.md: a silent peer is suspect after the liveness budget).
  bool silent_participant() const {
    if (!c.liveness_) return false;
    auto in_op = [this](int q) {
      if (op.kind != OpKind::kSendRecv) return true;
      if (q == op.peer) return true;
      return std::any_of(group.begin(), group.end(), [q](const Op* m) { return m->peer == q; });
    };
    for (int q = 0; q < c.size_; ++q) {
      if (q == c.rank_ || !in_op(q)) continue;
      if (c.liveness_->peer(q).health == PeerHealth::kSilent) return true;
    }
    return false;
  }
  // What a stall is judged on (see `group`).
  const Op& judged() const {
    if (c.liveness_) {
      for (const Op* m : group)
        if (holds_up(c.stall_view(*m, m->peer), m->peer) >= 0) return *m;
    }
    return op;
  }
  Status keep_waiting() {
    if (Status s = c.interrupted(); !s.ok()) return s;
    const Clock::time_point now = Clock::now();
    if (now - last_progress < budget && !(now - last_progress >= c.options_.liveness_budget && silent_participant())) {
      return Status();
    }
    const Op& on = judged();
    Status verdict = c.on_stall(on, &on == &op ? awaited : on.peer, now - last_progress);
    if (verdict.ok()) last_progress = c.restart_stall_clock(now, budget);
    return verdict;
  }
  nccl::Comm::Waiter waiter() {
    return [this] { return keep_waiting(); };
  }
  // Polls `ticket` until done. Yielding for the first kNcclSpin of each wait
  // (as cudaStreamSynchronize spins: an op on NCCL is worth a core), then
  // sleeping a little more the longer it takes.
  Status wait_for(nccl::Comm& comm, uint64_t ticket) {
    PollPause pause(std::max<Clock::duration>(c.spin(), kNcclSpin), kNcclMaxSleep);
    for (;;) {
      auto done = comm.poll(ticket);
      if (!done.ok()) return done.status();
      if (done.value()) return Status();
      if (Status s = keep_waiting(); !s.ok()) return s;
      pause();
    }
  }
};

// Device memory on NCCL's stream: allocated in order on rcoll's device
// stream, behind every use of the old block and before any use of the new.
Status CommunicatorImpl::reserve_for_nccl(kernels::cuda::DeviceBuffer& buffer, size_t bytes,
                                          nccl::Comm& comm) {
  if (buffer.capacity() >= bytes) return Status();
  Status s = nccl_.device_stream.create();
  if (s.ok()) s = nccl_.device_event.create();
  if (s.ok()) s = comm.order_after_me(nccl_.device_stream.get());
  if (s.ok()) s = buffer.reserve(bytes, nccl_.device_stream.get());
  if (s.ok()) s = kernels::cuda::event_record(nccl_.device_event.get(), nccl_.device_stream.get());
  if (s.ok()) s = comm.order_after_event(nccl_.device_event.get());
  return s;
}

// Where the op's input is kept: an in-place all-reduce's slices before they
// run (within the backup budget), a collective that settles later whole, in
// the slot the last such op does not hold. Null when there is no memory for
// it; an error only when the GPU failed.
Result<NcclPlane::KeptInput*> CommunicatorImpl::keep_nccl_input(const OpRecord& rec,
                                                                nccl::Comm& comm) {
  const Op& op = rec.op;
  if (!rec.settles_later && op.in.bytes() > options_.backup_bytes) return nullptr;
  NcclPlane::KeptInput& k =
      rec.settles_later ? nccl_.kept[nccl_.last_kept == 0 ? 1 : 0] : nccl_.backup;
  if (k.seq == op.seq) return &k;  // a re-run: what the first run kept
  k.seq = op.seq;
  k.bytes = 0;
  Status s = reserve_for_nccl(k.buffer, op.in.bytes(), comm);
  if (s.ok()) return &k;
  k.clear();
  if (s.code() == ErrorCode::kDevice) return s;
  // A safety net, not the op: run without it. An in-place op failing in the
  // middle then cannot be recovered (as beyond the budget), and a peer that
  // needs this op again is told this rank no longer holds it.
  RCOLL_LOG(
      kWarn,
      "%s on nccl, epoch %u: no device memory to keep its input (%s); running it without a copy "
      "(%s)",
      op.describe().c_str(), epoch_.load(), s.message().c_str(),
      rec.settles_later
          ? "should a peer fail inside it, the recovery fails for good, saying this rank no "
            "longer holds it"
          : "should it fail in its middle, it cannot run again: the op fails for good");
  return nullptr;
}

Status CommunicatorImpl::run_nccl_slices(OpRecord& rec, size_t first) {
  const Op& op = rec.op;
  if (op.one_rank) {
    nccl_.phases.mark(NcclPhases::kSetup);
    if (Status s = await_one_rank_copy(rec); !s.ok()) return s;
    nccl_.phases.mark(NcclPhases::kSlices);
    rec.done = rec.total;
    if (runs_on_nccl(op)) ++nccl_.ops;  // NCCL's own one-rank path is this copy
    return Status();
  }
  if (!nccl_.off.empty()) {
    // Every rank agreed (in the recovery just done) to stop using NCCL.
    nccl_.restart_staged = true;
    return Status(ErrorCode::kUnsupported, ErrorContext{rank_, -1, op.seq, epoch_.load(), "nccl"},
                  "NCCL dropped: " + nccl_.off);
  }
  if (op.kind == OpKind::kSendRecv && op.out.count == 0) {
    // Moves nothing, so NCCL is not asked (both sides skip it alike).
    rec.done = rec.total;
    return Status();
  }
  if (Status s = ensure_nccl(op); !s.ok()) return s;
  nccl::Comm& comm = *nccl_.comm;
  nccl_.phases.mark(NcclPhases::kSetup);
  const NcclFault fault = first == 0 && !faults_.empty() ? inject_nccl(op) : NcclFault::kNone;
  NcclWatch watch(*this, op);

  // The ledger counts what this run has seen done: slices from `first` may
  // be half-written by the failed run until they complete again. Without a
  // backup, an in-place op that fails after its first slice was issued
  // cannot run again: every failure from here on is for good.
  rec.done = first;
  const bool in_place_backup = backs_up(op) && size_ > 1 && options_.recovery;
  NcclPlane::KeptInput* keep = nullptr;
  if (in_place_backup || rec.settles_later) {
    auto kept = keep_nccl_input(rec, comm);
    if (!kept.ok()) return nccl_op_failure(op, comm, kept.status(), false);
    keep = kept.value();
  }
  const bool unbacked = in_place_backup && keep == nullptr;
  auto fail = [&](const Status& why) { return nccl_op_failure(op, comm, why, unbacked); };
  // The whole input of any other op, once: inside its first slice's group
  // (a send and a receive to this rank: no call of its own) when the op
  // writes nowhere it reads, so where the copy runs in the group does not
  // matter (it counts once the slice is done); else by a copy before it.
  // (An in-place all-reduce's slices are kept one by one, in
  // issue_nccl_slices: before each runs.)
  void* keep_in_group = nullptr;
  if (keep != nullptr && !backs_up(op) && keep->bytes < op.in.bytes()) {
    if (nccl_.keep_in_group && first == 0 && disjoint(op)) {
      keep_in_group = keep->buffer.data();
    } else {
      if (Status s = comm.copy(keep->buffer.data(), op.in.data, op.in.bytes()); !s.ok())
        return fail(s);
      keep->bytes = op.in.bytes();
    }
  }
  nccl_.phases.mark(NcclPhases::kKeep);

  // (ticket, slice) in issue order.
  std::vector<std::pair<uint64_t, size_t>> tickets;
  if (Status s = issue_nccl_slices(rec, first, comm, keep, keep_in_group, watch, &tickets); !s.ok())
    return fail(s);
  nccl_.phases.mark(NcclPhases::kIssue);

  // The confirmation goes right behind the slices on the stream: it runs,
  // and contributes this rank's fingerprints, only once this rank's slices
  // are done, so when it is done here every rank's are (no host round trip
  // between the op and its confirmation: one NCCL launch after the other).
  // A send or receive confirms between its pair only: one send and one
  // receive each way. NCCL matches a pair's messages in order per direction,
  // so two ranks that send to each other at once (each send issued before
  // its receive, ungrouped) would see one's data matched against the other's
  // confirmation. Raw NCCL hangs on that pattern for messages larger than
  // its buffers; grouped send/recv (issue 35) is the way to write it.
  // A collective that settles later has none: the next confirmation of any
  // collective carries its fingerprint (settles_later, settle()).
  const bool confirms = size_ > 1 && options_.recovery && !rec.settles_later;
  // (With a close-link fault planned the op fails after its slices: no confirmation then.)
  uint64_t confirmation = 0;  // its ticket
  if (confirms && !(fault != NcclFault::kNone && !tickets.empty())) {
    const bool pair = op.kind == OpKind::kSendRecv;
    const uint64_t carried = pair ? fingerprint(op) : fold(nccl_.completed_hash, fingerprint(op));
    auto t = comm.issue_confirmation(carried, watch.waiter(), pair ? op.peer : -1);
    if (!t.ok()) return fail(t.status());
    confirmation = t.value();
  }
  // The caller's stream waits for the op's verdict (queue_verdict), queued
  // last: the gate closes only on work already queued (stop 56 queued it
  // before the confirmation, and a fault-free DDP run then stalled with
  // every slice done: the confirmation, queued after the gate's wait, did
  // not complete).
  if (op.gated && rec.work != nullptr && !rec.work->issued) {
    if (Status s = queue_verdict(op, *rec.work, comm); !s.ok()) return fail(s);
  }
  nccl_.phases.mark(NcclPhases::kQueueVerdict);
  if (Status s = await_nccl_slices(rec, first, comm, watch, tickets, fault); !s.ok())
    return fail(s);
  if (keep_in_group != nullptr) keep->bytes = op.in.bytes();
  nccl_.phases.mark(NcclPhases::kSlices);
  if (confirms) {
    if (Status s = watch.wait_for(comm, confirmation); !s.ok()) return fail(s);
    nccl_.phases.mark(NcclPhases::kConfirmation);
    if (Status s = check_nccl_fingerprints(op, comm); !s.ok()) return s;
    if (op.kind != OpKind::kSendRecv) nccl_.agreed_through = op.match_seq;
    rec.confirmed = true;
  }
  ++nccl_.ops;
  // The host saw every call of the op finish: work the caller queues from
  // here on sees the result without waiting on the GPU for it.
  return Status();
}

// A group of device sends and receives (Communicator::group_async) on NCCL:
// every member not yet done on both ends, as one NCCL group, as NCCL users
// write it (ncclGroupStart/End), so any set of groups NCCL completes
// completes here. The group's end is the only progress NCCL shows: each
// member is one slice, done with the group or run again whole (a send
// never writes what it reads; a receive written again gets the same bytes).
// Then a confirmation with each peer of the group, one after the other in
// rank order (every rank goes up the ranks, so the lowest pair still open
// is first on both its ranks: no cycle of waits). Once a peer's is done
// here, that peer has done its side of every member between the two: the
// members are never re-run for it, as a lone send or receive on NCCL.
// Its fingerprint covers the members between the pair, so a peer that ran
// other sends or receives is a desync. The peer issues its counterparts as
// a group too (batch_isend_irecv on both sides, as with NCCL): issued one by
// one, each would confirm on its own, and NCCL would match one side's data
// against the other's confirmation.
Status CommunicatorImpl::run_nccl_group(std::span<OpRecord> recs, std::span<const size_t> first,
                                        const Op& carrier) {
  std::vector<OpRecord*> run;
  size_t bytes = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    OpRecord& rec = recs[i];
    // Empty ones move nothing, so NCCL is not asked (both sides skip them alike).
    rec.done = first[i] >= rec.total || rec.op.out.count == 0 ? rec.total : 0;
    if (rec.done < rec.total) {
      run.push_back(&rec);
      bytes += rec.op.out.bytes();
    }
  }
  // Done on both ends (a recovery may find every member so): nothing to run,
  // on NCCL or staged.
  if (run.empty()) return Status();
  if (!nccl_.off.empty()) {
    // Every rank agreed (in the recovery just done) to stop using NCCL: the
    // members still open run again from the start, staged (run_device_group).
    nccl_.restart_staged = true;
    return Status(ErrorCode::kUnsupported,
                  ErrorContext{rank_, -1, carrier.seq, epoch_.load(), "nccl"},
                  "NCCL dropped: " + nccl_.off);
  }
  // Receives first: the first is what a pipeline stage most often waits
  // for (upstream), and what a stall is judged on unless another member's
  // chain of waits reaches a rank in compute (NcclWatch::judged).
  std::vector<const Op*> ordered;
  for (const bool sends : {false, true})
    for (const OpRecord* r : run)
      if (r->op.is_send == sends) ordered.push_back(&r->op);
  const Op& lead = *ordered.front();
  if (Status s = ensure_nccl(lead); !s.ok()) return s;
  nccl::Comm& comm = *nccl_.comm;
  // A close-link fault planned for a member strikes once the group is done,
  // before this rank counts it.
  NcclFault fault = NcclFault::kNone;
  if (!faults_.empty()) {
    for (const OpRecord* r : run)
      if (inject_nccl(r->op) != NcclFault::kNone) fault = NcclFault::kAfterLastSlice;
  }
  NcclWatch watch(*this, lead);
  // The group's one sign of progress is its end: its budget is for all its bytes.
  watch.budget = progress_budget(lead, bytes, 1);
  watch.group = std::move(ordered);
  auto fail = [&](const Status& why) { return nccl_op_failure(carrier, comm, why, false); };

  std::vector<Call> calls;
  for (const OpRecord* r : run) {
    const std::vector<Call> c = slice_calls(r->op, size_, 0, 1);
    calls.insert(calls.end(), c.begin(), c.end());
  }
  auto data = comm.issue(calls, watch.waiter());
  if (!data.ok()) return fail(data.status());

  std::vector<int> peers;
  if (options_.recovery && fault == NcclFault::kNone) {
    for (const OpRecord* r : run) peers.push_back(r->op.peer);
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  }
  // The caller's stream waits for the verdict, queued behind the attempt's
  // last GPU work (run_nccl_slices says why): the last confirmation, else
  // the group.
  WorkState* work = carrier.work.get();
  auto queue_verdict_if_last = [&](size_t confirmations_issued) {
    if (!carrier.gated || work == nullptr || work->issued || confirmations_issued < peers.size())
      return Status();
    return queue_verdict(carrier, *work, comm);
  };
  auto confirm = [&](size_t k) -> Result<uint64_t> {
    uint64_t pair = 0;
    for (const OpRecord* r : run)
      if (r->op.peer == peers[k]) pair += pair_term(r->op, rank_);
    return comm.issue_confirmation(pair, watch.waiter(), peers[k]);
  };
  uint64_t confirmation = 0;
  if (!peers.empty()) {
    auto t = confirm(0);  // behind the group on the stream: no host round trip between them
    if (!t.ok()) return fail(t.status());
    confirmation = t.value();
  }
  if (Status s = queue_verdict_if_last(peers.empty() ? 0 : 1); !s.ok()) return fail(s);
  if (Status s = watch.wait_for(comm, data.value()); !s.ok()) return fail(s);
  watch.last_progress = Clock::now();
  ++in_flight_.moves;
  if (fault != NcclFault::kNone) {
    ++tally_.injected;
    return fail(
        Status(ErrorCode::kTransport,
               "the link failed once the group's calls were done, before this rank counted them "
               "(fault injection: close-link)"));
  }
  for (OpRecord* r : run) r->done = r->total;
  for (size_t k = 0; k < peers.size(); ++k) {
    if (k > 0) {
      // One confirmation at a time: each is read back into the same host words.
      auto t = confirm(k);
      if (!t.ok()) return fail(t.status());
      confirmation = t.value();
      if (Status s = queue_verdict_if_last(k + 1); !s.ok()) return fail(s);
    }
    if (Status s = watch.wait_for(comm, confirmation); !s.ok()) return fail(s);
    watch.last_progress = Clock::now();
    if (!comm.fingerprints_agree()) {
      return Status(
          ErrorCode::kDesync, ErrorContext{rank_, peers[k], carrier.seq, epoch_.load(), "nccl"},
          carrier.describe() + " on nccl: rank " + std::to_string(rank_) + " and rank " +
              std::to_string(peers[k]) +
              " did not run the same sends and receives between them (their fingerprints differ: "
              "count, dtype or the pair's numbering, or rank " +
              std::to_string(peers[k]) +
              " issued them outside a group); what the group received from rank " +
              std::to_string(peers[k]) + " is not valid");
    }
  }
  for (OpRecord* r : run) r->confirmed = !peers.empty();
  return Status();
}

// A one-rank op's copy and verdict were queued at issue, on the caller's
// thread and stream (queue_one_rank_copy): the op is done once the host
// sees the verdict fire, within the straggler timeout (the caller's stream
// may hold earlier work), as a staged op's copies are waited for.
Status CommunicatorImpl::await_one_rank_copy(const OpRecord& rec) {
  const Op& op = rec.op;
  Status s =
      rec.work == nullptr || rec.work->verdict_event == nullptr
          ? Status(ErrorCode::kInternal, "no work state with CUDA events to complete it by")
          : cuda::wait_event(rec.work->verdict_event,
                             Deadline::after(options_.straggler_timeout + options_.deadline_floor),
                             "waiting for the caller's CUDA stream to reach the op and copy "
                             "its input to its output",
                             std::chrono::microseconds(100));
  if (s.ok()) return Status();
  return Status(s.code(), ErrorContext{rank_, -1, op.seq, epoch_.load(), transport_name_.load()},
                op.describe() + " at one rank (a copy on the caller's stream): " + s.message());
}

// A collective completed on NCCL here (record_completion), however it ended
// (a recovery may resume it at its end): its fingerprint joins those before
// it, and every rank has done the collective before it (none could complete
// this one without issuing it), so only this one's input stays kept, if it
// settles later.
void CommunicatorImpl::settle(const OpRecord& rec) {
  const Op& op = rec.op;
  nccl_.completed_hash = fold(nccl_.completed_hash, fingerprint(op));
  const NcclPlane::KeptInput* keep =
      rec.settles_later ? nccl_.holding(op.seq, op.in.bytes()) : nullptr;
  nccl_.last_kept =
      keep != nullptr && keep != &nccl_.backup ? static_cast<int>(keep - nccl_.kept) : -1;
}

// The confirmation came back: did every rank run the same ops?
Status CommunicatorImpl::check_nccl_fingerprints(const Op& op, nccl::Comm& comm) const {
  if (comm.fingerprints_agree()) return Status();
  const bool range = op.kind != OpKind::kSendRecv && nccl_.agreed_through + 1 < op.match_seq;
  return Status(
      ErrorCode::kDesync, ErrorContext{rank_, -1, op.seq, epoch_.load(), "nccl"},
      op.describe() + " on nccl: the ranks did not all run the same " +
          (range ? "collectives at seqs " + std::to_string(nccl_.agreed_through + 1) + ".." +
                       std::to_string(op.match_seq) + " (confirmed together, this one last)"
                 : "op at collective seq " + std::to_string(op.match_seq)) +
          " (their fingerprints differ: kind, dtype, count, reduce op or root); " +
          (range ? "the results of those ops are not valid" : "the result is not valid"));
}

// The op's failure on NCCL, in its words: the communicator is aborted (every
// rank's calls stop), and an in-place op without a backup cannot run again.
Status CommunicatorImpl::nccl_op_failure(const Op& op, nccl::Comm& comm, const Status& why, bool unbacked) {
  comm.abort(why);
  ErrorContext c = why.context();
  c.rank = rank_;
  c.op_seq = op.seq;
  c.epoch = epoch_.load();
  c.transport = "nccl";
  Status s(why.code(), c, op.describe() + " on nccl: " + why.message());
  if (!unbacked) return s;
  return Status(ErrorCode::kUnsupported, s.context(),
                s.message() + "; this in-place all-reduce of " + std::to_string(op.in.bytes()) +
                    " bytes runs without a backup of its input (over Options::backup_bytes = " +
                    std::to_string(options_.backup_bytes) + ", or no device memory for one), so it cannot run again");
}

// Slices `first` on, back to back on the communicator's stream. An in-place
// all-reduce's slices each go behind their input's copy into `keep` (or, on
// a re-run, the copy putting it back). With `keep_in_group`, the first
// slice's group also copies the whole input there.
Status CommunicatorImpl::issue_nccl_slices(const OpRecord& rec, size_t first, nccl::Comm& comm,
                                           NcclPlane::KeptInput* keep, void* keep_in_group,
                                           NcclWatch& watch,
                                           std::vector<std::pair<uint64_t, size_t>>* tickets) {
  const Op& op = rec.op;
  const size_t es = op.element_size();
  const bool per_slice = keep != nullptr && backs_up(op);
  for (size_t k = first; k < rec.total; ++k) {
    if (per_slice) {
      const ElementRange r = slice_range(op, k, rec.total);
      char* user = static_cast<char*>(op.in.data) + r.begin * es;
      char* kept = static_cast<char*>(keep->buffer.data()) + r.begin * es;
      const size_t bytes = (r.end - r.begin) * es;
      const bool have = r.end * es <= keep->bytes;
      if (Status s = have ? comm.copy(user, kept, bytes) : comm.copy(kept, user, bytes); !s.ok())
        return s;
      if (!have) keep->bytes = r.end * es;
    }
    std::vector<Call> calls = slice_calls(op, size_, k, rec.total);
    if (keep_in_group != nullptr && k == first) {
      calls.push_back(Call{CallKind::kSend, op.in.data, nullptr, op.in.count, op.in.dtype,
                           ReduceOp::kSum, rank_});
      calls.push_back(Call{CallKind::kRecv, nullptr, keep_in_group, op.in.count, op.in.dtype,
                           ReduceOp::kSum, rank_});
    }
    auto t = comm.issue(calls, watch.waiter());
    if (!t.ok()) return t.status();
    tickets->push_back({t.value(), k});
  }
  return Status();
}

// Polls the slices in order (a completion is progress). A close-link fault
// planned for the op strikes after its first slice, or (at=done) once every
// slice is done but before this rank counts them: it runs them all again,
// and a peer that completed the op meanwhile replays it.
Status CommunicatorImpl::await_nccl_slices(OpRecord& rec, size_t first, nccl::Comm& comm,
                                           NcclWatch& watch,
                                           const std::vector<std::pair<uint64_t, size_t>>& tickets,
                                           NcclFault fault) {
  for (const auto& [ticket, slice] : tickets) {
    if (Status s = watch.wait_for(comm, ticket); !s.ok()) return s;
    if (fault != NcclFault::kAfterLastSlice) rec.done = slice + 1;
    watch.last_progress = Clock::now();
    ++in_flight_.moves;
    if (fault == NcclFault::kAfterFirstSlice && rec.done == first + 1) {
      ++tally_.injected;
      return Status(ErrorCode::kTransport, "the link failed (fault injection: close-link)");
    }
  }
  if (fault == NcclFault::kAfterLastSlice && !tickets.empty()) {
    ++tally_.injected;
    return Status(
        ErrorCode::kTransport,
        "the link failed once the op's slices were done, before this rank counted them (fault "
        "injection: close-link at=done)");
  }
  rec.done = rec.total;
  return Status();
}

// A collective this rank completed, run again for a peer that did not (its
// remaining slices, on this epoch's communicator) from the input kept on the
// device into scratch: the caller's buffers are the caller's again.
Status CommunicatorImpl::replay_nccl(OpRecord& rec, size_t first) {
  const Op& op = rec.op;
  if (first >= rec.total) return Status();
  const ErrorContext ctx{rank_, -1, op.seq, epoch_.load(), "nccl"};
  NcclPlane::KeptInput* keep = nccl_.holding(op.seq, op.in.bytes());
  if (keep == nullptr) {
    return Status(ErrorCode::kInternal, ctx,
                  op.describe() + " on nccl: a peer needs slices " + std::to_string(first) + ".." +
                      std::to_string(rec.total) +
                      " again, but this rank no longer holds its input (a defect in rcoll: please "
                      "report it with this log)");
  }
  kernels::cuda::ScopedDevice on;
  if (Status s = on.enter(op.device); !s.ok()) return s;
  if (!nccl_.off.empty()) return replay_nccl_staged(rec, *keep);
  if (Status s = ensure_nccl(op); !s.ok()) return s;
  nccl::Comm& comm = *nccl_.comm;
  auto fail = [&](const Status& why) {
    const Status s = nccl_op_failure(op, comm, why, false);
    return Status(s.code(), s.context(), "replaying it for a peer: " + s.message());
  };
  if (Status s = reserve_for_nccl(nccl_.replay_sink, std::max<size_t>(op.out.bytes(), 1), comm);
      !s.ok())
    return fail(s);
  Op again = op;
  again.in.data = keep->buffer.data();
  again.out.data = nccl_.replay_sink.data();
  NcclWatch watch(*this, op);
  std::vector<uint64_t> tickets;
  for (size_t k = first; k < rec.total; ++k) {
    auto t = comm.issue(slice_calls(again, size_, k, rec.total), watch.waiter());
    if (!t.ok()) return fail(t.status());
    tickets.push_back(t.value());
  }
  for (uint64_t t : tickets) {
    if (Status s = watch.wait_for(comm, t); !s.ok()) return fail(s);
    watch.last_progress = Clock::now();
    ++in_flight_.moves;
  }
  ++nccl_.replays;
  return Status();
}

// The same once every rank dropped NCCL (this recovery's vote): the peer
// runs the op again from the start, staged over the host transports
// (run_device_op), and this rank takes part from its kept input, staged as
// the peer's run is, writing the result nowhere the caller sees.
Status CommunicatorImpl::replay_nccl_staged(OpRecord& rec, const NcclPlane::KeptInput& keep) {
  const Op& op = rec.op;
  const char* in0 = static_cast<const char*>(op.in.data);
  const char* out0 = static_cast<const char*>(op.out.data);
  const bool inside =
      op.in.bytes() == 0 || (in0 >= out0 && in0 + op.in.bytes() <= out0 + op.out.bytes());
  std::vector<char> memory(op.out.bytes() + (inside ? 0 : op.in.bytes()) + 1);
  Op host = op;
  host.in.memory = host.out.memory = MemoryKind::kHost;
  host.out.data = memory.data();
  host.in.data =
      inside ? memory.data() + (op.in.bytes() ? in0 - out0 : 0) : memory.data() + op.out.bytes();
  Status s = nccl_.device_stream.create();
  if (s.ok()) s = nccl_.device_event.create();
  if (nccl::Comm* last = nccl_.comm ? nccl_.comm.get() : nccl_.retired.get(); s.ok() && last)
    s = last->order_after_me(nccl_.device_stream.get());
  if (s.ok())
    s = cuda::copy_async(host.in.data, keep.buffer.data(), op.in.bytes(),
                         nccl_.device_stream.get());
  if (s.ok()) s = cuda::event_record(nccl_.device_event.get(), nccl_.device_stream.get());
  if (s.ok()) {
    s = cuda::wait_event(nccl_.device_event.get(), Deadline::after(options_.deadline_floor),
                         "copying the kept input of " + op.describe() + " to host memory");
  }
  const ErrorContext ctx{rank_, -1, op.seq, epoch_.load(), transport_name_.load()};
  if (!s.ok()) {
    return Status(s.code(), ctx,
                  op.describe() +
                      ": replaying it staged for a peer: copying its kept input to host memory: " +
                      s.message());
  }
  // Cut as the peer cuts its run: with the tuning the op was issued under
  // (asking the tuner again could give a newer one), as a host op.
  OpRecord staged;
  staged.op = host;
  staged.op.work = nullptr;
  staged.pool = log_.pool();
  staged.tuning = rec.tuning;
  staged.total = plan_slices(host, rank_, size_, staged.tuning, 0, 0).slices;
  RCOLL_LOG(kInfo,
            "epoch %u: re-running %s staged over %s from its kept input (completed here on nccl; a "
            "peer runs it again from the start, staged, as NCCL was dropped)",
            epoch_.load(), op.describe().c_str(), transport_name_.load());
  if (Status r = run_slices(staged, 0, true); !r.ok()) {
    return Status(r.code(), r.context(),
                  op.describe() + ": replaying it staged for a peer: " + r.message());
  }
  ++nccl_.replays;
  return Status();
}

// The op's verdict for a caller's stream (Work::stream_wait), queued once
// its GPU work is: on the verdict stream, behind this attempt's calls, a
// wait at the gate for this op, then the verdict event. The gate opens
// when execute() has the op's final outcome, after whatever recoveries it
// takes: the stream never goes on with an attempt an abort cut short. It
// only ever waits on work already queued (the runtime sees it done and
// opens the gate); a recovery queues its new attempt on an NCCL stream
// (NcclPlane::streams) made before any verdict waited, and on the verdict
// stream nothing else runs.
Status CommunicatorImpl::queue_verdict(const Op& op, WorkState& w, nccl::Comm& comm) {
  kernels::cuda::StreamGate* gate = nccl_.gate.load();
  // From here until execute() opens the gate for this op (through any
  // recoveries), a stream waits on the GPU for it: no abort or free may
  // wait for the whole GPU (StreamGate::hold).
  gate->hold(op.seq);
  Status s = comm.order_after_me(nccl_.verdict_stream.get());
  if (s.ok()) s = gate->enqueue_wait(nccl_.verdict_stream.get(), op.seq);
  if (s.ok()) s = kernels::cuda::event_record(w.verdict_event, nccl_.verdict_stream.get());
  if (!s.ok()) return Status(s.code(), "queueing the op's verdict for the caller's stream: " + s.message());
  w.mark_issued();
  return Status();
}

Status CommunicatorImpl::restore_nccl_inputs(const Op& op) {
  // Everything the dropped communicator's stream still holds (draining
  // kernels, backup copies) finishes first, whatever the op: the staged run
  // writes the same buffers. Then an in-place op's input goes back.
  Status s = nccl_.device_stream.create();
  if (s.ok()) s = nccl_.device_event.create();
  if (nccl::Comm* last = nccl_.comm ? nccl_.comm.get() : nccl_.retired.get(); s.ok() && last)
    s = last->order_after_me(nccl_.device_stream.get());
  NcclPlane::KeptInput* keep = nccl_.holding(op.seq, 1);
  if (s.ok() && backs_up(op) && keep != nullptr) {
    s = cuda::copy_async(op.in.data, keep->buffer.data(), keep->bytes, nccl_.device_stream.get());
  }
  if (s.ok()) s = cuda::event_record(nccl_.device_event.get(), nccl_.device_stream.get());
  if (s.ok()) {
    s = cuda::wait_event(nccl_.device_event.get(), Deadline::after(options_.deadline_floor),
                         "putting back the input of " + op.describe());
  }
  if (keep != nullptr) keep->clear();
  return s;
}

}  // namespace rcoll
