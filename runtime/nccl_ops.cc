// Collectives on device buffers over NCCL, with the guarantees every other op
// has (DESIGN.md: NCCL is the primary path for GPU buffers):
//
//   - Each epoch's NCCL communicator is made at the epoch's first device
//     collective, from a unique id rank 0 puts in the store. Every rank says
//     whether it joined; if one could not (no GPU, init failed, a fail-connect
//     fault) or would not (NCCL failed too often lately), every rank stops
//     using NCCL, and device ops are staged through the host transports.
//   - An op is cut into slices (contiguous element ranges where one NCCL call
//     can take them), issued back to back on the communicator's stream, one
//     event each. The ledger counts the slices whose event fired before any
//     failure; an event that fires after an abort does not count.
//   - Nothing an op reads is lost: an in-place all-reduce copies each slice's
//     input aside (device memory, same stream) before the slice runs, and a
//     re-run puts it back first; other ops never write what they read. So any
//     slice can run again on any rank, whatever an aborted kernel left behind.
//   - Every op ends with a one-element confirmation all-reduce. Once it is
//     done here, every rank has the whole result: the op is never re-run for a
//     peer, and keeps nothing after it returns.
//   - No slice completing for the op's progress budget is a stall, judged as
//     for any op (straggler: wait; silent or hung: recover; dead: error). A
//     peer's abort notice or an NCCL error aborts the communicator at once.
//     Recovery rebuilds the epoch; the op's next run makes the new epoch's
//     communicator and resumes at the slice every rank agreed on.
#include <algorithm>
#include <csignal>
#include <string>
#include <thread>

#include "runtime/communicator_impl.h"
#include "runtime/log.h"

namespace rcoll {
namespace {

namespace cuda = kernels::cuda;
using nccl::Call;

constexpr Millis kNcclInitFloor{30000};
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

}  // namespace

bool CommunicatorImpl::runs_on_nccl(const Op& op) const {
  if (!nccl::built() || !chain_.nccl() || !nccl_off_.empty() || op.device < 0) return false;
  return op.kind == OpKind::kAllreduce || op.kind == OpKind::kAllgather || op.kind == OpKind::kReduceScatter ||
         op.kind == OpKind::kBroadcast || op.kind == OpKind::kAlltoall;
}

size_t CommunicatorImpl::nccl_slice_count(const Op& op) {
  if (op.kind != OpKind::kAllreduce && op.kind != OpKind::kBroadcast) return 1;
  return std::max<size_t>(1, (op.out.bytes() + kNcclSliceBytes - 1) / kNcclSliceBytes);
}

std::string CommunicatorImpl::nccl_drop_reason() {
  const auto now = Clock::now();
  while (!nccl_failures_.empty() && now - nccl_failures_.front() > options_.transport_failure_window) nccl_failures_.pop_front();
  if (static_cast<int>(nccl_failures_.size()) < std::max(1, options_.transport_failures_to_drop)) return "";
  return "rank " + std::to_string(rank_) + ": NCCL failed " + std::to_string(nccl_failures_.size()) + " times within " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options_.transport_failure_window).count()) + " s";
}

Status CommunicatorImpl::ensure_nccl(const Op& op) {
  const uint32_t epoch = epoch_.load();
  if (nccl_ && nccl_epoch_ == epoch && !nccl_->aborted()) return Status();
  // The old one is kept until a new one follows it (or the op's inputs are
  // put back behind it): its stream may still hold copies and draining kernels.
  if (nccl_) nccl_retired_ = std::move(nccl_);
  // NCCL's init (CUDA context, bootstrap, topology, connections) takes
  // seconds where a socket connect takes milliseconds: at least kNcclInitFloor.
  const Deadline deadline = Deadline::after(std::max<Millis>(options_.connect_timeout, kNcclInitFloor));
  const auto started = Clock::now();
  ErrorContext ctx{rank_, -1, op.seq, epoch, "nccl"};

  std::string refuse = nccl_drop_reason();
  for (Fault& f : faults_) {
    if (refuse.empty() && f.kind == FaultKind::kFailConnect && f.transport == "nccl" && f.count > 0 && epoch >= f.epoch &&
        (f.rank == -1 || f.rank == rank_)) {
      --f.count;
      ++injected_;
      refuse = "rank " + std::to_string(rank_) + ": NCCL init of epoch " + std::to_string(epoch) +
               " failed by fault injection (fail-connect)";
    }
  }
  // The unique id: rank 0 makes it (an empty one says it could not).
  const std::string id_key = "nccl/" + std::to_string(epoch) + "/id";
  std::string id;
  if (rank_ == 0) {
    auto made = nccl::new_unique_id();
    if (made.ok()) id = made.value();
    if (!made.ok() && refuse.empty()) refuse = "rank 0: " + made.status().message();
    if (size_ > 1) {
      if (Status s = store_->set(id_key, Bytes(id.begin(), id.end())); !s.ok()) {
        return Status(s.code(), ctx, "could not publish the NCCL unique id of epoch " + std::to_string(epoch) + ": " + s.message());
      }
    }
  } else {
    auto got = store_->get(id_key, std::max<Millis>(Millis(1), deadline.remaining_ms()));
    if (!got.ok()) {
      return Status(got.status().code(), ctx, "no NCCL unique id from rank 0 for epoch " + std::to_string(epoch) + ": " +
                                                  got.status().message());
    }
    id.assign(got.value().begin(), got.value().end());
    if (id.empty() && refuse.empty()) refuse = "rank 0 could not make an NCCL unique id";
  }
  Result<std::unique_ptr<nccl::Comm>> made = Status(ErrorCode::kUnsupported, ctx, refuse);
  if (refuse.empty()) {
    nccl::Comm::Config cfg;
    cfg.rank = rank_;
    cfg.size = size_;
    cfg.device = op.device;
    cfg.epoch = epoch;
    cfg.init_deadline = deadline;
    if (size_ > 1) {
      // Another rank that gave up says so under the agreement's key.
      std::shared_ptr<Store> store = store_;
      const std::string failed_key = "connect/" + std::to_string(epoch) + "/nccl/failed";
      cfg.cancelled = [store, failed_key] {
        auto failed = store->check(failed_key);
        return failed.ok() && failed.value();
      };
    }
    made = nccl::Comm::create(id, cfg);
  }
  Status outcome = made.ok() ? Status() : made.status();
  if (size_ > 1) outcome = agree_connect("nccl", epoch, outcome, deadline);
  if (outcome.ok()) {
    nccl_ = std::move(made).value();
    // Restoring an input queued on the new stream must come after what the
    // old epoch's stream still holds (backup copies behind aborted kernels).
    if (nccl_retired_) {
      if (Status s = nccl_->follow(*nccl_retired_); !s.ok()) {
        nccl_->abort(s);
        nccl_.reset();
        return Status(s.code(), ctx, "ordering epoch " + std::to_string(epoch) + "'s NCCL stream after the last: " + s.message());
      }
      nccl_retired_.reset();
    }
    nccl_epoch_ = epoch;
    RCOLL_LOG(kInfo, "NCCL %s communicator of epoch %u up in %.1f ms (%d ranks, CUDA device %d)", nccl::version().c_str(),
              epoch, std::chrono::duration<double, std::milli>(Clock::now() - started).count(), size_.load(), op.device);
    return Status();
  }
  if (made.ok()) made.value()->abort(outcome);
  // A rank that did not report in time may be frozen: a failed epoch, for the
  // recovery to sort out, not a reason to give NCCL up.
  if (outcome.code() == ErrorCode::kTimeout) return Status(outcome.code(), ctx, outcome.message());
  nccl_off_ = outcome.message();
  nccl_dropped_ = true;
  ++nccl_fallbacks_;
  nccl_restart_staged_ = true;
  RCOLL_LOG(kWarn, "NCCL is not used for device collectives from epoch %u on: %s; every rank stages them through pinned host "
            "memory over %s instead (fallback)", epoch, nccl_off_.c_str(), transport_name_.load());
  return Status(ErrorCode::kUnsupported, ctx, "NCCL dropped for device collectives: " + nccl_off_);
}

bool CommunicatorImpl::inject_nccl(const Op& op) {
  if (op.seq <= injected_through_seq_) return false;
  injected_through_seq_ = op.seq;
  bool abort_after_first = false;
  for (const Fault& f : faults_) {
    if ((f.rank != -1 && f.rank != rank_) || f.op != op.seq) continue;
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
        ++delays_injected_;
        std::this_thread::sleep_for(Millis(f.ms));
        break;
      default:
        break;  // stall is applied in run_op; the rest act on frames NCCL does not have
    }
  }
  return abort_after_first;
}

Status CommunicatorImpl::run_nccl_slices(OpRecord& rec, size_t first) {
  const Op& op = rec.op;
  if (Status s = ensure_nccl(op); !s.ok()) return s;
  nccl::Comm& comm = *nccl_;
  const uint32_t epoch = epoch_.load();
  auto failed = [&](const Status& why) {
    comm.abort(why);
    ErrorContext c = why.context();
    c.rank = rank_;
    c.op_seq = op.seq;
    c.epoch = epoch;
    c.transport = "nccl";
    return Status(why.code(), c, op.describe() + " on nccl: " + why.message());
  };
  const bool abort_after_first = first == 0 && !faults_.empty() && inject_nccl(op);
  if (op.stream_ready) {
    if (Status s = comm.order_after_event(op.stream_ready.get()); !s.ok()) return failed(s);
  }
  const size_t slice_bytes = std::min(op.out.bytes(), kNcclSliceBytes);
  const Clock::duration budget = progress_budget(op, std::max<size_t>(slice_bytes, 1), 1);
  const Deadline enqueue = Deadline::after(budget);

  // In-place all-reduce: keep (or put back) each slice's input before it runs.
  const bool backup = backs_up(op) && size_ > 1 && options_.recovery;
  if (backup && nccl_backup_seq_ != op.seq) {
    nccl_backup_seq_ = op.seq;
    nccl_backed_up_ = 0;
    if (Status s = nccl_backup_.reserve(op.in.bytes()); !s.ok()) return failed(s);
  }
  // (ticket, slice) in issue order; slice == total for the confirmation.
  std::vector<std::pair<uint64_t, size_t>> tickets;
  const size_t es = op.element_size();
  for (size_t k = first; k < rec.total; ++k) {
    if (backup) {
      const ElementRange r = slice_range(op, k, rec.total);
      char* user = static_cast<char*>(op.in.data) + r.begin * es;
      char* kept = static_cast<char*>(nccl_backup_.data()) + r.begin * es;
      const size_t bytes = (r.end - r.begin) * es;
      const bool have = r.end * es <= nccl_backed_up_;
      auto copied = have ? comm.issue_copy(user, kept, bytes) : comm.issue_copy(kept, user, bytes);
      if (!copied.ok()) return failed(copied.status());
      if (!have) nccl_backed_up_ = r.end * es;
    }
    auto t = comm.issue(slice_calls(op, size_, k, rec.total), enqueue);
    if (!t.ok()) return failed(t.status());
    tickets.push_back({t.value(), k});
  }
  const bool confirm = size_ > 1 && options_.recovery;
  if (confirm) {
    auto t = comm.issue_confirmation(enqueue);
    if (!t.ok()) return failed(t.status());
    tickets.push_back({t.value(), rec.total});
  }

  // Poll in order; a completion is progress. Tight at first (small ops), then
  // sleeping between polls so a long op does not hold a core.
  Clock::time_point last_progress = Clock::now();
  const int awaited = (rank_ + 1) % size_;  // the ring neighbour NCCL waits on most
  for (size_t next = 0; next < tickets.size();) {
    auto done = comm.poll(tickets[next].first);
    if (!done.ok()) return failed(done.status());
    if (done.value()) {
      const size_t k = tickets[next].second;
      if (k < rec.total) rec.done = k + 1;
      ++next;
      last_progress = Clock::now();
      if (abort_after_first && next == 1) {
        ++injected_;
        return failed(Status(ErrorCode::kTransport, "the link failed (fault injection: close-link)"));
      }
      continue;
    }
    if (Status s = interrupted(); !s.ok()) return failed(s);
    const Clock::time_point now = Clock::now();
    if (now - last_progress >= budget) {
      Status verdict = on_stall(op, awaited, now - last_progress);
      if (!verdict.ok()) return failed(verdict);
      last_progress = now;  // a live straggler: wait another budget
    }
    if (now - last_progress < spin()) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  rec.done = rec.total;
  rec.confirmed = confirm;
  // Work queued on the caller's stream from here on sees the result.
  if (Status s = comm.order_after_me(op.options.cuda_stream); !s.ok()) return failed(s);
  return Status();
}

Status CommunicatorImpl::restore_nccl_inputs(const Op& op) {
  if (!backs_up(op) || nccl_backup_seq_ != op.seq || nccl_backed_up_ == 0) return Status();
  // The copies go behind whatever the last NCCL stream still holds.
  cuda::Stream stream;
  cuda::Event done;
  Status s = stream.create();
  if (s.ok()) s = done.create();
  if (nccl::Comm* last = nccl_ ? nccl_.get() : nccl_retired_.get(); s.ok() && last) s = last->order_after_me(stream.get());
  if (s.ok()) s = cuda::copy_async(op.in.data, nccl_backup_.data(), nccl_backed_up_, stream.get());
  if (s.ok()) s = cuda::event_record(done.get(), stream.get());
  if (s.ok()) {
    s = cuda::wait_event(done.get(), Deadline::after(options_.deadline_floor), "putting back the input of " + op.describe());
  }
  nccl_backed_up_ = 0;
  return s;
}

}  // namespace rcoll
