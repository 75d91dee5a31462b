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

#include "runtime/communicator_impl.h"
#include "runtime/log.h"
#include "runtime/store/exchange.h"
#include "runtime/store/keys.h"

namespace rcoll {
namespace {

namespace cuda = kernels::cuda;
using nccl::Call;

constexpr Millis kNcclInitFloor{30000};
constexpr size_t kNcclInitFailuresToDrop = 2;
constexpr Millis kStoreWaitSlice{50};
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
  if (!nccl::built() || !chain_.nccl() || !nccl_off_.empty() || op.device < 0) return false;
  return op.kind == OpKind::kAllreduce || op.kind == OpKind::kAllgather || op.kind == OpKind::kReduceScatter ||
         op.kind == OpKind::kBroadcast || op.kind == OpKind::kAlltoall || op.kind == OpKind::kSendRecv;
}

size_t CommunicatorImpl::nccl_slice_count(const Op& op) {
  if (op.kind != OpKind::kAllreduce && op.kind != OpKind::kBroadcast && op.kind != OpKind::kSendRecv) return 1;
  return std::max<size_t>(1, (op.out.bytes() + kNcclSliceBytes - 1) / kNcclSliceBytes);
}

std::string CommunicatorImpl::nccl_vote() {
  if (!nccl_cannot_join_.empty()) return nccl_cannot_join_;
  // Inits that time out cost at least kNcclInitFloor each, so they would
  // never pile up within the failure window: two in a row are enough.
  if (nccl_init_failures_ >= kNcclInitFailuresToDrop) {
    return "rank " + std::to_string(rank_) + ": " + std::to_string(nccl_init_failures_) +
           " NCCL inits in a row did not complete (" + nccl_last_init_failure_ + ")";
  }
  const auto now = Clock::now();
  while (!nccl_failures_.empty() && now - nccl_failures_.front() > options_.transport_failure_window) nccl_failures_.pop_front();
  if (static_cast<int>(nccl_failures_.size()) < std::max(1, options_.transport_failures_to_drop)) return "";
  return "rank " + std::to_string(rank_) + ": NCCL failed " + std::to_string(nccl_failures_.size()) + " times within " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options_.transport_failure_window).count()) + " s";
}

void CommunicatorImpl::abort_nccl_on_device(const Status& why) {
  if (!nccl_) return;
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    device = device_;
  }
  kernels::cuda::ScopedDevice on;
  if (device >= 0) (void)on.enter(device);
  nccl_->abort(why);
}

void CommunicatorImpl::retire_nccl() {
  if (nccl_retired_) nccl_graveyard_.push_back(std::move(nccl_retired_));
  nccl_retired_ = std::move(nccl_);
}

void CommunicatorImpl::bury_nccl() {
  if (nccl_graveyard_.empty()) return;
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    device = device_;
  }
  kernels::cuda::ScopedDevice on;
  if (device >= 0) (void)on.enter(device);
  nccl_graveyard_.clear();
}

void CommunicatorImpl::drop_nccl(const std::string& why, uint32_t epoch) {
  if (!nccl_off_.empty()) return;
  nccl_off_ = why;
  nccl_dropped_ = true;
  ++nccl_fallbacks_;
  if (nccl_) nccl_->abort(Status(ErrorCode::kAborted, "NCCL dropped: " + why));
  if (nccl_) retire_nccl();
  RCOLL_LOG(kWarn, "every rank stops using NCCL for device collectives from epoch %u on (%s); they are staged through "
            "pinned host memory over %s instead (fallback #%llu)",
            epoch, why.c_str(), transport_name_.load(), static_cast<unsigned long long>(fallbacks_ + nccl_fallbacks_));
}

Result<std::vector<Bytes>> CommunicatorImpl::wait_for_ranks(const StoreExchange& exchange, const Op& op, Deadline until,
                                                            const char* what, bool stall_rule) {
  const Clock::duration budget = progress_budget(op, std::max<size_t>(1, std::min(op.out.bytes(), kNcclSliceBytes)), 1);
  Clock::time_point since = Clock::now();
  auto judge = [&](const std::vector<int>& missing) -> Status {
    if (Status i = interrupted(); !i.ok()) return i;
    if (stall_rule && Clock::now() - since >= budget) {
      Status verdict = on_stall(op, missing.front(), Clock::now() - since);
      if (!verdict.ok()) return Status(verdict.code(), verdict.context(), std::string(what) + ": " + verdict.message());
      since = Clock::now();  // a live straggler: wait another budget
    }
    return Status();
  };
  auto got = exchange.gather(until, judge, kStoreWaitSlice);
  if (!got.ok() && got.status().code() == ErrorCode::kTimeout && until.expired()) {
    const int missing = got.status().context().peer;
    return Status(ErrorCode::kTimeout, ErrorContext{rank_, missing, op.seq, epoch_.load(), "nccl"},
                  std::string(what) + ": rank " + std::to_string(missing) + " did not get there in time");
  }
  return got;
}

Status CommunicatorImpl::ensure_nccl(const Op& op) {
  const uint32_t epoch = epoch_.load();
  if (nccl_ && nccl_epoch_ == epoch && !nccl_->aborted()) return Status();
  // The old one is aborted (finalising could wait on peers that moved on) and
  // kept until a new one follows it: its stream may still hold copies and
  // draining kernels.
  if (nccl_) {
    nccl_->abort(Status(ErrorCode::kAborted, "replaced by epoch " + std::to_string(epoch) + "'s communicator"));
    retire_nccl();
  }
  const auto started = Clock::now();
  const ErrorContext ctx{rank_, -1, op.seq, epoch, "nccl"};
  const StoreExchange arrivals(*store_, keys::nccl_arrived(epoch), size_);
  const StoreExchange outcomes(*store_, keys::nccl_outcomes(epoch), size_);

  // A rank that will not join says why; fault injection can make it fail.
  std::string refuse = nccl_vote();
  for (Fault& f : faults_) {
    if (refuse.empty() && f.kind == FaultKind::kFailConnect && f.transport == "nccl" && f.count > 0 && epoch >= f.epoch &&
        (f.rank == -1 || f.rank == rank_)) {
      --f.count;
      ++injected_;
      refuse = "rank " + std::to_string(rank_) + ": NCCL init of epoch " + std::to_string(epoch) +
               " failed by fault injection (fail-connect)";
    }
  }

  // 1. Arrive. Rank 0 brings the unique id ("" when it could not make one).
  std::string id;
  if (rank_ == 0) {
    auto made = nccl::new_unique_id();
    if (made.ok()) id = made.value();
    if (!made.ok() && refuse.empty()) refuse = "rank 0: " + made.status().message();
  }
  if (size_ > 1) {
    if (rank_ == 0) {
      if (Status s = store_->set(keys::nccl_id(epoch), Bytes(id.begin(), id.end())); !s.ok()) return Status(s.code(), ctx, s.message());
    }
    if (Status s = arrivals.publish(rank_, Bytes{1}); !s.ok()) return Status(s.code(), ctx, s.message());
    if (auto s = wait_for_ranks(arrivals, op, Deadline::never(), "waiting for every rank at NCCL init", true); !s.ok()) {
      (void)store_->set(keys::nccl_gave_up(epoch), Bytes{0});  // peers already in init stop waiting for this rank
      return s.status();
    }
    if (rank_ != 0) {
      auto got = store_->get(keys::nccl_id(epoch), kStoreWaitSlice * 20);
      if (!got.ok()) {
        (void)store_->set(keys::nccl_gave_up(epoch), Bytes{0});
        return Status(got.status().code(), ctx, "reading the NCCL unique id: " + got.status().message());
      }
      id.assign(got.value().begin(), got.value().end());
      if (id.empty() && refuse.empty()) refuse = "rank 0 could not make an NCCL unique id";
    }
  }

  // 2. Init, bounded now that every rank is there (and within a recovery's
  // time, so a rank that left for one never outwaits it). A rank that gives
  // up, fails the epoch or sees a peer die says so at once, and the others
  // stop waiting for it.
  const Deadline init_deadline =
      Deadline::after(std::min<Millis>(std::max<Millis>(options_.connect_timeout, kNcclInitFloor), options_.recovery_timeout));
  const std::string gave_up = keys::nccl_gave_up(epoch);
  Result<std::unique_ptr<nccl::Comm>> made = Status(ErrorCode::kUnsupported, ctx, refuse);
  if (refuse.empty()) {
    nccl::Comm::Config cfg;
    cfg.rank = rank_;
    cfg.size = size_;
    cfg.device = op.device;
    cfg.epoch = epoch;
    cfg.init_deadline = init_deadline;
    cfg.blocking = options_.nccl_blocking == 1;
    // One stream for every epoch (made on the first): the new communicator's
    // calls queue behind whatever the aborted one left on it.
    if (Status s = nccl_stream_.create(); s.ok()) cfg.stream = nccl_stream_.get();
    if (Status s = nccl_confirm_host_.reserve(32); s.ok()) {
      // Two halves, by epoch: a retired stream may still copy the last
      // epoch's confirmation back into its half.
      cfg.confirm_host = static_cast<char*>(nccl_confirm_host_.data()) + 16 * (epoch % 2);
    }
    if (size_ > 1) {
      std::shared_ptr<Store> store = store_;
      cfg.cancelled = [this, store, gave_up] {
        if (epoch_failed_elsewhere() || first_dead_peer() >= 0) return true;
        auto there = store->check(gave_up);
        return there.ok() && there.value();
      };
    }
    made = nccl::Comm::create(id, cfg);
  }
  // A rank that cannot or will not join (no usable GPU, bad device, refused)
  // asks in the next recovery for NCCL to be dropped; anything else (a
  // timeout, a cancelled init, a network error) just fails this epoch, and
  // counts towards dropping it if it keeps happening.
  const ErrorCode code = made.ok() ? ErrorCode::kOk : made.status().code();
  const bool cannot_join = code == ErrorCode::kUnsupported || code == ErrorCode::kInvalidArgument || code == ErrorCode::kDevice;
  const std::string mine = made.ok() ? "ok" : "rank " + std::to_string(rank_) + ": " + made.status().message();
  if (cannot_join) nccl_cannot_join_ = mine;
  if (!made.ok()) {
    ++nccl_init_failures_;
    nccl_last_init_failure_ = mine;
  }
  if (size_ == 1 && !made.ok()) {
    // Nobody to agree with.
    if (cannot_join) {
      drop_nccl(mine, epoch);
      nccl_restart_staged_ = true;
    }
    return Status(code, ctx, "NCCL communicator of epoch " + std::to_string(epoch) + ": " + mine);
  }

  // 3. Every rank's outcome, read by every rank: the same decision everywhere.
  // A rank whose init failed says so at once, and whatever way this rank
  // leaves before the decision, its peers must not be left waiting in NCCL's
  // init for it: it says it gave up, and aborts its own.
  if (size_ > 1) {
    if (!made.ok()) (void)store_->set(gave_up, Bytes(mine.begin(), mine.end()));
    bool decided = false;
    struct GiveUp {
      std::function<void()> run;
      ~GiveUp() { run(); }
    } give_up{[&] {
      if (decided) return;
      (void)store_->set(gave_up, Bytes(mine.begin(), mine.end()));
      if (made.ok()) {
        made.value()->abort(Status(ErrorCode::kAborted, "this rank left NCCL's init of epoch " + std::to_string(epoch)));
        nccl_graveyard_.push_back(std::move(made).value());
      }
    }};
    if (Status s = outcomes.publish(rank_, Bytes(mine.begin(), mine.end())); !s.ok()) {
      return Status(s.code(), ctx, s.message());
    }
    const Deadline until = Deadline::at(init_deadline.time() + std::chrono::seconds(5));
    // Peers still inside NCCL's init are at this op, not hung: no stall rule
    // here, only the init's own bound (and dead peers, abort notices).
    auto all = wait_for_ranks(outcomes, op, until, "waiting for every rank's NCCL init", false);
    if (!all.ok()) return all.status();
    std::string failure;
    for (const Bytes& v : all.value()) {
      const std::string text(v.begin(), v.end());
      if (text != "ok" && failure.empty()) failure = text;
    }
    if (!failure.empty()) {
      return Status(ErrorCode::kTransport, ctx,
                    "the NCCL communicator of epoch " + std::to_string(epoch) + " was not made (" + failure + "); " +
                        (nccl_vote().empty() ? "recovering, then trying again"
                                             : "recovering; this rank votes to stage device collectives instead"));
    }
    decided = true;
  }
  nccl_ = std::move(made).value();
  nccl_cannot_join_.clear();
  nccl_init_failures_ = 0;
  if (nccl_retired_) {
    // Restoring an input on the new stream must come after what the old one
    // still holds (backup copies behind aborted kernels).
    if (Status s = nccl_->follow(*nccl_retired_); !s.ok()) {
      nccl_->abort(s);
      nccl_graveyard_.push_back(std::move(nccl_));
      return Status(s.code(), ctx, "ordering epoch " + std::to_string(epoch) + "'s NCCL stream after the last: " + s.message());
    }
    nccl_graveyard_.push_back(std::move(nccl_retired_));
  }
  nccl_epoch_ = epoch;
  RCOLL_LOG(kInfo, "NCCL %s communicator of epoch %u up in %.1f ms (%d ranks, CUDA device %d)", nccl::version().c_str(), epoch,
            std::chrono::duration<double, std::milli>(Clock::now() - started).count(), size_.load(), op.device);
  return Status();
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
      case FaultKind::kBadAlloc:
      case FaultKind::kThrow:
        throw_injected(f.kind, rank_, op.seq, op.describe() + " on nccl");
      default:
        break;  // stall is applied in run_op; the rest act on frames NCCL does not have
    }
  }
  return abort_after_first;
}

Status CommunicatorImpl::run_nccl_slices(OpRecord& rec, size_t first) {
  const Op& op = rec.op;
  if (!nccl_off_.empty()) {
    // Every rank agreed (in the recovery just done) to stop using NCCL.
    nccl_restart_staged_ = true;
    return Status(ErrorCode::kUnsupported, ErrorContext{rank_, -1, op.seq, epoch_.load(), "nccl"}, "NCCL dropped: " + nccl_off_);
  }
  if (op.kind == OpKind::kSendRecv && op.out.count == 0) {
    // Moves nothing, so NCCL is not asked (both sides skip it alike).
    rec.done = rec.total;
    return Status();
  }
  if (Status s = ensure_nccl(op); !s.ok()) return s;
  nccl::Comm& comm = *nccl_;
  // A run after a recovery: a stream still waits at the gate for this op.
  if (rec.work != nullptr && rec.work->issued) comm.keep_memory_on_abort(true);
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
  const size_t slice_bytes = std::min(op.out.bytes(), kNcclSliceBytes);
  const Clock::duration budget = progress_budget(op, std::max<size_t>(slice_bytes, 1), 1);
  // The peer NCCL waits on: the other side of a send or receive, else the
  // ring neighbour (what a collective waits on most).
  const int awaited = op.kind == OpKind::kSendRecv ? op.peer : (rank_ + 1) % size_;
  // How a wait for NCCL (enqueuing or completing) goes on: a peer's abort
  // notice ends it, and no completion for the budget is a stall, judged as
  // for any op.
  Clock::time_point last_progress = Clock::now();
  // A rank that went silent (frozen, partitioned) holds NCCL's kernels on
  // every rank: judged at once rather than after the whole progress budget
  // (DESIGN.md: a silent peer is suspect after the liveness budget).
  auto silent_participant = [&] {
    if (!liveness_) return false;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_ || (op.kind == OpKind::kSendRecv && q != op.peer)) continue;
      if (liveness_->peer(q).health == PeerHealth::kSilent) return true;
    }
    return false;
  };
  auto keep_waiting = [&]() -> Status {
    if (Status s = interrupted(); !s.ok()) return s;
    const Clock::time_point now = Clock::now();
    if (now - last_progress < budget && !(now - last_progress >= options_.liveness_budget && silent_participant())) {
      return Status();
    }
    Status verdict = on_stall(op, awaited, now - last_progress);
    if (verdict.ok()) last_progress = now;  // a live straggler: wait another budget
    return verdict;
  };

  // In-place all-reduce: keep (or put back) each slice's input before it
  // runs, within the backup budget. Without a backup a failure after the
  // first slice began cannot be recovered: said so below.
  // The ledger counts what this run has seen done: slices from `first` may
  // be half-written by the failed run until they complete again.
  rec.done = first;
  const bool in_place_backup = backs_up(op) && size_ > 1 && options_.recovery;
  bool backup = in_place_backup && op.in.bytes() <= options_.backup_bytes;
  if (backup && nccl_backup_seq_ != op.seq) {
    nccl_backup_seq_ = op.seq;
    nccl_backed_up_ = 0;
    if (nccl_backup_.capacity() < op.in.bytes()) {
      // Allocated in order on rcoll's device stream: behind every use of the
      // old block, before any use of the new one.
      Status s = device_stream_.create();
      if (s.ok()) s = device_event_.create();
      if (s.ok()) s = comm.order_after_me(device_stream_.get());
      if (s.ok()) s = nccl_backup_.reserve(op.in.bytes(), device_stream_.get());
      if (s.ok()) s = kernels::cuda::event_record(device_event_.get(), device_stream_.get());
      if (s.ok()) s = comm.order_after_event(device_event_.get());
      if (!s.ok()) {
        if (s.code() == ErrorCode::kDevice) return failed(s);
        // The backup is a safety net, not the op: run without it (a failure
        // in the middle then cannot be recovered, as beyond the budget).
        RCOLL_LOG(kWarn, "%s on nccl: no device memory for the backup of its input (%s); running it without one",
                  op.describe().c_str(), s.message().c_str());
        nccl_backup_seq_ = 0;
        backup = false;
      }
    }
  }
  // Without a backup, an in-place op that fails after its first slice was
  // issued cannot run again: every failure from here on is for good.
  const bool unbacked = in_place_backup && !backup;
  auto fail = [&](const Status& why) {
    Status s = failed(why);
    if (!unbacked) return s;
    return Status(ErrorCode::kUnsupported, s.context(),
                  s.message() + "; this in-place all-reduce of " + std::to_string(op.in.bytes()) +
                      " bytes runs without a backup of its input (over Options::backup_bytes = " +
                      std::to_string(options_.backup_bytes) + ", or no device memory for one), so it cannot run again");
  };

  // (ticket, slice) in issue order.
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
      if (!copied.ok()) return fail(copied.status());
      if (!have) nccl_backed_up_ = r.end * es;
    }
    auto t = comm.issue(slice_calls(op, size_, k, rec.total), keep_waiting);
    if (!t.ok()) return fail(t.status());
    tickets.push_back({t.value(), k});
  }

  // The confirmation goes right behind the slices on the stream: it runs,
  // and contributes this rank's fingerprint, only once this rank's slices are
  // done, so when it is done here every rank's are (no host round trip
  // between the op and its confirmation: one NCCL launch after the other).
  // A close-link fault planned for this op strikes after its first slice and
  // before its confirmation, as it always did: there the confirmation waits.
  // A send or receive confirms between its pair only.
  const bool confirms = size_ > 1 && options_.recovery;
  const int confirm_peer = op.kind == OpKind::kSendRecv ? op.peer : -1;
  uint64_t confirmation = 0;  // its ticket; 0 = not issued yet (tickets start at 1)
  auto confirm = [&]() -> Status {
    auto t = comm.issue_confirmation(fingerprint(op), keep_waiting, confirm_peer);
    if (t.ok()) confirmation = t.value();
    return t.status();
  };
  if (confirms && !abort_after_first) {
    if (Status s = confirm(); !s.ok()) return fail(s);
  }
  // The op's verdict for a caller's stream (Work::stream_wait), queued once
  // its GPU work is: on the verdict stream, behind this attempt's calls, a
  // wait at the gate for this op, then the verdict event. The gate opens
  // when execute() has the op's final outcome, after whatever recoveries it
  // takes: the stream never goes on with an attempt an abort cut short. It
  // only ever waits on work already queued (the runtime sees it done and
  // opens the gate); a recovery queues its new attempt on nccl_stream_, made
  // before any verdict waited, and on the verdict stream nothing else runs.
  if (op.gated && rec.work != nullptr && !rec.work->issued) {
    if (Status s = queue_verdict(op, *rec.work, comm); !s.ok()) return fail(s);
  }

  // Poll in order; a completion is progress. Yielding for the first
  // kNcclSpin of each wait (as cudaStreamSynchronize spins: an op on NCCL is
  // worth a core), then sleeping a little more the longer it takes.
  auto wait_for = [&](uint64_t ticket) -> Status {
    PollPause pause(std::max<Clock::duration>(spin(), kNcclSpin), kNcclMaxSleep);
    for (;;) {
      auto done = comm.poll(ticket);
      if (!done.ok()) return done.status();
      if (done.value()) return Status();
      if (Status s = keep_waiting(); !s.ok()) return s;
      pause();
    }
  };
  for (const auto& [ticket, slice] : tickets) {
    if (Status s = wait_for(ticket); !s.ok()) return fail(s);
    rec.done = slice + 1;
    last_progress = Clock::now();
    if (abort_after_first && rec.done == first + 1) {
      ++injected_;
      return fail(Status(ErrorCode::kTransport, "the link failed (fault injection: close-link)"));
    }
  }
  rec.done = rec.total;

  if (confirms) {
    if (confirmation == 0) {
      if (Status s = confirm(); !s.ok()) return fail(s);
    }
    if (Status s = wait_for(confirmation); !s.ok()) return fail(s);
    if (!comm.fingerprints_agree()) {
      return Status(ErrorCode::kDesync, ErrorContext{rank_, -1, op.seq, epoch, "nccl"},
                    op.describe() + " on nccl: the ranks did not all run this op at collective seq " +
                        std::to_string(op.match_seq) + " (their fingerprints differ: kind, dtype, count, reduce op or root); "
                        "the result is not valid");
    }
    rec.confirmed = true;
  }
  ++nccl_ops_;
  // The host saw every call of the op finish: work the caller queues from
  // here on sees the result without waiting on the GPU for it.
  return Status();
}

Status CommunicatorImpl::queue_verdict(const Op& op, WorkState& w, nccl::Comm& comm) {
  kernels::cuda::StreamGate* gate = gate_.load();
  // From here until execute() opens the gate for this op, a stream waits on
  // the GPU for it: an abort must not wait for the whole GPU.
  comm.keep_memory_on_abort(true);
  Status s = comm.order_after_me(verdict_stream_.get());
  if (s.ok()) s = gate->enqueue_wait(verdict_stream_.get(), op.seq);
  if (s.ok()) s = kernels::cuda::event_record(w.verdict_event, verdict_stream_.get());
  if (!s.ok()) return Status(s.code(), "queueing the op's verdict for the caller's stream: " + s.message());
  w.mark_issued();
  return Status();
}

Status CommunicatorImpl::restore_nccl_inputs(const Op& op) {
  // Everything the dropped communicator's stream still holds (draining
  // kernels, backup copies) finishes first, whatever the op: the staged run
  // writes the same buffers. Then an in-place op's input goes back.
  Status s = device_stream_.create();
  if (s.ok()) s = device_event_.create();
  if (nccl::Comm* last = nccl_ ? nccl_.get() : nccl_retired_.get(); s.ok() && last) s = last->order_after_me(device_stream_.get());
  if (s.ok() && backs_up(op) && nccl_backup_seq_ == op.seq && nccl_backed_up_ > 0) {
    s = cuda::copy_async(op.in.data, nccl_backup_.data(), nccl_backed_up_, device_stream_.get());
  }
  if (s.ok()) s = cuda::event_record(device_event_.get(), device_stream_.get());
  if (s.ok()) {
    s = cuda::wait_event(device_event_.get(), Deadline::after(options_.deadline_floor), "putting back the input of " + op.describe());
  }
  nccl_backed_up_ = 0;
  nccl_backup_seq_ = 0;
  return s;
}

}  // namespace rcoll
