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
//   - Every op ends with a confirmation all-reduce, queued on the stream
//     behind its slices, so each rank contributes only once its slices are
//     done. Once it is done here, every rank's are: the op is never re-run
//     for a peer, and keeps nothing after it returns. It carries the op's
//     fingerprint, so ranks that ran different ops learn it (a desync)
//     instead of returning garbage.
//   - No slice completing for the op's progress budget is a stall, judged as
//     for any op (straggler: wait; silent or hung: recover; dead: error). A
//     peer's abort notice or an NCCL error aborts the communicator at once.
//     Recovery rebuilds the epoch; the op's next run makes the new epoch's
//     communicator and resumes at the slice every rank agreed on.
#include <algorithm>
#include <csignal>
#include <new>
#include <string>
#include <thread>

#include "base/log.h"
#include "base/store_exchange.h"
#include "runtime/communicator_impl.h"
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

// What every rank must agree the op is (FNV-1a over the frame fingerprint's fields).
uint64_t fingerprint(const Op& op) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<uint64_t>(op.kind));
  mix(static_cast<uint64_t>(op.out.dtype));
  mix(op.out.count);
  mix(op.in.count);
  mix(static_cast<uint64_t>(op.kind == OpKind::kAllreduce || op.kind == OpKind::kReduceScatter ? op.reduce : ReduceOp::kSum));
  mix(static_cast<uint64_t>(static_cast<int64_t>(op.root)));
  mix(op.match_seq);
  return h;
}

}  // namespace

bool CommunicatorImpl::runs_on_nccl(const Op& op) const {
  if (!nccl::built() || !chain_.nccl() || !nccl_.off.empty() || op.device < 0) return false;
  return op.kind == OpKind::kAllreduce || op.kind == OpKind::kAllgather || op.kind == OpKind::kReduceScatter ||
         op.kind == OpKind::kBroadcast || op.kind == OpKind::kAlltoall || op.kind == OpKind::kSendRecv;
}

size_t CommunicatorImpl::nccl_slice_count(const Op& op) {
  if (op.kind != OpKind::kAllreduce && op.kind != OpKind::kBroadcast && op.kind != OpKind::kSendRecv) return 1;
  return std::max<size_t>(1, (op.out.bytes() + kNcclSliceBytes - 1) / kNcclSliceBytes);
}

bool CommunicatorImpl::inject_nccl(const Op& op) {
  if (op.seq <= injected_through_seq_) return false;
  injected_through_seq_ = op.seq;
  bool abort_after_first = false;
  for (const Fault& f : faults_) {
    if ((f.rank != -1 && f.rank != rank_) || f.op != op.seq || !f.at.empty()) continue;
    switch (f.kind) {
      case FaultKind::kKill:
        RCOLL_LOG(kWarn, "fault injection: killing this process (SIGKILL) at %s on nccl", op.describe().c_str());
        std::raise(SIGKILL);
        break;
      case FaultKind::kCloseLink:
        RCOLL_LOG(kWarn, "fault injection: aborting this rank's NCCL communicator during %s, as a failed link would",
                  op.describe().c_str());
        abort_after_first = true;
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
  return abort_after_first;
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

  NcclWatch(CommunicatorImpl& impl, const Op& o)
      : c(impl), op(o),
        budget(impl.progress_budget(o, std::max<size_t>(std::min(o.out.bytes(), kNcclSliceBytes), 1), 1)),
        awaited(o.kind == OpKind::kSendRecv ? o.peer : (impl.rank_ + 1) % impl.size_) {}

  // A rank that went silent (frozen, partitioned) holds NCCL's kernels on
  // every rank: judged at once rather than after the whole progress budget
  // (DESIGN.md: a silent peer is suspect after the liveness budget).
  bool silent_participant() const {
    if (!c.liveness_) return false;
    for (int q = 0; q < c.size_; ++q) {
      if (q == c.rank_ || (op.kind == OpKind::kSendRecv && q != op.peer)) continue;
      if (c.liveness_->peer(q).health == PeerHealth::kSilent) return true;
    }
    return false;
  }
  Status keep_waiting() {
    if (Status s = c.interrupted(); !s.ok()) return s;
    const Clock::time_point now = Clock::now();
    if (now - last_progress < budget && !(now - last_progress >= c.options_.liveness_budget && silent_participant())) {
      return Status();
    }
    Status verdict = c.on_stall(op, awaited, now - last_progress);
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

// In-place all-reduce: each slice's input is kept (or put back) before it
// runs, within the backup budget. Whether this op has a backup; an error
// only when the GPU failed.
Result<bool> CommunicatorImpl::prepare_nccl_backup(const Op& op, nccl::Comm& comm) {
  if (op.in.bytes() > options_.backup_bytes) return false;
  if (nccl_.backup_seq == op.seq) return true;
  nccl_.backup_seq = op.seq;
  nccl_.backed_up = 0;
  if (nccl_.backup.capacity() >= op.in.bytes()) return true;
  // Allocated in order on rcoll's device stream: behind every use of the
  // old block, before any use of the new one.
  Status s = nccl_.device_stream.create();
  if (s.ok()) s = nccl_.device_event.create();
  if (s.ok()) s = comm.order_after_me(nccl_.device_stream.get());
  if (s.ok()) s = nccl_.backup.reserve(op.in.bytes(), nccl_.device_stream.get());
  if (s.ok()) s = kernels::cuda::event_record(nccl_.device_event.get(), nccl_.device_stream.get());
  if (s.ok()) s = comm.order_after_event(nccl_.device_event.get());
  if (s.ok()) return true;
  if (s.code() == ErrorCode::kDevice) return s;
  // The backup is a safety net, not the op: run without it (a failure in
  // the middle then cannot be recovered, as beyond the budget).
  RCOLL_LOG(kWarn, "%s on nccl: no device memory for the backup of its input (%s); running it without one",
            op.describe().c_str(), s.message().c_str());
  nccl_.backup_seq = 0;
  return false;
}

Status CommunicatorImpl::run_nccl_slices(OpRecord& rec, size_t first) {
  const Op& op = rec.op;
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
  const bool abort_after_first = first == 0 && !faults_.empty() && inject_nccl(op);
  NcclWatch watch(*this, op);

  // The ledger counts what this run has seen done: slices from `first` may
  // be half-written by the failed run until they complete again. Without a
  // backup, an in-place op that fails after its first slice was issued
  // cannot run again: every failure from here on is for good.
  rec.done = first;
  const bool in_place_backup = backs_up(op) && size_ > 1 && options_.recovery;
  bool backup = false;
  if (in_place_backup) {
    auto prepared = prepare_nccl_backup(op, comm);
    if (!prepared.ok()) return nccl_op_failure(op, comm, prepared.status(), false);
    backup = prepared.value();
  }
  const bool unbacked = in_place_backup && !backup;
  auto fail = [&](const Status& why) { return nccl_op_failure(op, comm, why, unbacked); };

  // (ticket, slice) in issue order.
  std::vector<std::pair<uint64_t, size_t>> tickets;
  if (Status s = issue_nccl_slices(rec, first, comm, backup, watch, &tickets); !s.ok()) return fail(s);
  nccl_.phases.mark(NcclPhases::kIssue);

  // The confirmation goes right behind the slices on the stream: it runs,
  // and contributes this rank's fingerprint, only once this rank's slices are
  // done, so when it is done here every rank's are (no host round trip
  // between the op and its confirmation: one NCCL launch after the other).
  // A send or receive confirms between its pair only: one send and one
  // receive each way. NCCL matches a pair's messages in order per direction,
  // so two ranks that send to each other at once (each send issued before
  // its receive, ungrouped) would see one's data matched against the other's
  // confirmation. Raw NCCL hangs on that pattern for messages larger than
  // its buffers; grouped send/recv (issue 35) is the way to write it.
  const bool confirms = size_ > 1 && options_.recovery;
  // (With a close-link fault planned the op fails after its first slice:
  // no confirmation then.)
  uint64_t confirmation = 0;  // its ticket
  if (confirms && !(abort_after_first && !tickets.empty())) {
    auto t = comm.issue_confirmation(fingerprint(op), watch.waiter(), op.kind == OpKind::kSendRecv ? op.peer : -1);
    if (!t.ok()) return fail(t.status());
    confirmation = t.value();
  }
  // The caller's stream waits for the op's verdict (queue_verdict).
  if (op.gated && rec.work != nullptr && !rec.work->issued) {
    if (Status s = queue_verdict(op, *rec.work, comm); !s.ok()) return fail(s);
  }
  nccl_.phases.mark(NcclPhases::kQueueVerdict);
  if (Status s = await_nccl_slices(rec, first, comm, watch, tickets, abort_after_first); !s.ok())
    return fail(s);
  nccl_.phases.mark(NcclPhases::kSlices);
  if (confirms) {
    if (Status s = watch.wait_for(comm, confirmation); !s.ok()) return fail(s);
    nccl_.phases.mark(NcclPhases::kConfirmation);
    if (Status s = check_nccl_fingerprints(op, comm); !s.ok()) return s;
    rec.confirmed = true;
  }
  ++nccl_.ops;
  // The host saw every call of the op finish: work the caller queues from
  // here on sees the result without waiting on the GPU for it.
  return Status();
}

// The confirmation came back: did every rank run this op?
Status CommunicatorImpl::check_nccl_fingerprints(const Op& op, nccl::Comm& comm) const {
  if (comm.fingerprints_agree()) return Status();
  return Status(ErrorCode::kDesync, ErrorContext{rank_, -1, op.seq, epoch_.load(), "nccl"},
                op.describe() + " on nccl: the ranks did not all run this op at collective seq " +
                    std::to_string(op.match_seq) +
                    " (their fingerprints differ: kind, dtype, count, reduce op or root); the "
                    "result is not valid");
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

// Slices `first` on, back to back on the communicator's stream, each behind
// its input's backup copy (or, on a re-run, the copy putting it back).
Status CommunicatorImpl::issue_nccl_slices(const OpRecord& rec, size_t first, nccl::Comm& comm, bool backup,
                                           NcclWatch& watch, std::vector<std::pair<uint64_t, size_t>>* tickets) {
  const Op& op = rec.op;
  const size_t es = op.element_size();
  for (size_t k = first; k < rec.total; ++k) {
    if (backup) {
      const ElementRange r = slice_range(op, k, rec.total);
      char* user = static_cast<char*>(op.in.data) + r.begin * es;
      char* kept = static_cast<char*>(nccl_.backup.data()) + r.begin * es;
      const size_t bytes = (r.end - r.begin) * es;
      const bool have = r.end * es <= nccl_.backed_up;
      auto copied = have ? comm.issue_copy(user, kept, bytes) : comm.issue_copy(kept, user, bytes);
      if (!copied.ok()) return copied.status();
      if (!have) nccl_.backed_up = r.end * es;
    }
    auto t = comm.issue(slice_calls(op, size_, k, rec.total), watch.waiter());
    if (!t.ok()) return t.status();
    tickets->push_back({t.value(), k});
  }
  return Status();
}

// Polls the slices in order (a completion is progress). A close-link fault
// planned for the op strikes after its first slice.
Status CommunicatorImpl::await_nccl_slices(OpRecord& rec, size_t first, nccl::Comm& comm, NcclWatch& watch,
                                           const std::vector<std::pair<uint64_t, size_t>>& tickets,
                                           bool abort_after_first) {
  for (const auto& [ticket, slice] : tickets) {
    if (Status s = watch.wait_for(comm, ticket); !s.ok()) return s;
    rec.done = slice + 1;
    watch.last_progress = Clock::now();
    ++in_flight_.moves;
    if (abort_after_first && rec.done == first + 1) {
      ++tally_.injected;
      return Status(ErrorCode::kTransport, "the link failed (fault injection: close-link)");
    }
  }
  rec.done = rec.total;
  return Status();
}

// The op's verdict for a caller's stream (Work::stream_wait), queued once
// its GPU work is: on the verdict stream, behind this attempt's calls, a
// wait at the gate for this op, then the verdict event. The gate opens
// when execute() has the op's final outcome, after whatever recoveries it
// takes: the stream never goes on with an attempt an abort cut short. It
// only ever waits on work already queued (the runtime sees it done and
// opens the gate); a recovery queues its new attempt on nccl_.stream, made
// before any verdict waited, and on the verdict stream nothing else runs.
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
  if (s.ok() && backs_up(op) && nccl_.backup_seq == op.seq && nccl_.backed_up > 0) {
    s = cuda::copy_async(op.in.data, nccl_.backup.data(), nccl_.backed_up,
                         nccl_.device_stream.get());
  }
  if (s.ok()) s = cuda::event_record(nccl_.device_event.get(), nccl_.device_stream.get());
  if (s.ok()) {
    s = cuda::wait_event(nccl_.device_event.get(), Deadline::after(options_.deadline_floor),
                         "putting back the input of " + op.describe());
  }
  nccl_.backed_up = 0;
  nccl_.backup_seq = 0;
  return s;
}

}  // namespace rcoll
