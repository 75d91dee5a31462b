// The NCCL communicator of each epoch (the part of device ops on NCCL that
// runtime/nccl_ops.cc's header describes under "made at the epoch's first
// device collective"): every rank arrives, inits within a deadline, and all
// agree on the outcome; a rank that cannot or will not join votes in the next
// recovery to stop using NCCL. Stopped communicators wait in a graveyard until
// no stream waits at the stream gate (freeing them waits for the whole GPU).
#include <algorithm>
#include <string>

#include "base/log.h"
#include "base/store_exchange.h"
#include "runtime/communicator_impl.h"
#include "runtime/store/keys.h"

namespace rcoll {
namespace {

constexpr Millis kNcclInitFloor{30000};
constexpr size_t kNcclInitFailuresToDrop = 2;
constexpr Millis kStoreWaitSlice{50};

}  // namespace

std::string CommunicatorImpl::nccl_vote() {
  if (!nccl_.cannot_join.empty()) return nccl_.cannot_join;
  // Inits that time out cost at least kNcclInitFloor each, so they would
  // never pile up within the failure window: two in a row are enough.
  if (nccl_.init_failures >= kNcclInitFailuresToDrop) {
    return "rank " + std::to_string(rank_) + ": " + std::to_string(nccl_.init_failures) +
           " NCCL inits in a row did not complete (" + nccl_.last_init_failure + ")";
  }
  const auto now = Clock::now();
  while (!nccl_.failures.empty() &&
         now - nccl_.failures.front() > options_.transport_failure_window)
    nccl_.failures.pop_front();
  if (static_cast<int>(nccl_.failures.size()) < std::max(1, options_.transport_failures_to_drop))
    return "";
  return "rank " + std::to_string(rank_) + ": NCCL failed " +
         std::to_string(nccl_.failures.size()) + " times within " +
         std::to_string(
             std::chrono::duration_cast<std::chrono::seconds>(options_.transport_failure_window)
                 .count()) +
         " s";
}

void CommunicatorImpl::abort_nccl_on_device(const Status& why) {
  if (!nccl_.comm) return;
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    device = device_;
  }
  kernels::cuda::ScopedDevice on;
  if (device >= 0) (void)on.enter(device);
  nccl_.comm->abort(why);
}

void CommunicatorImpl::bury_nccl() {
  if (nccl_.graveyard.empty() && !nccl_.any_put_off()) return;
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    device = device_;
  }
  // Freeing waits for the whole GPU: put off while a gate of this process
  // holds a stream (NcclPlane::bury).
  nccl_.bury(device);
}

void CommunicatorImpl::drop_nccl(const std::string& why, uint32_t epoch) {
  if (!nccl_.off.empty()) return;
  nccl_.off = why;
  nccl_.dropped = true;
  ++nccl_.fallbacks;
  if (nccl_.comm) nccl_.comm->abort(Status(ErrorCode::kAborted, "NCCL dropped: " + why));
  if (nccl_.comm) nccl_.retire();
  RCOLL_LOG(kWarn,
            "every rank stops using NCCL for device collectives from epoch %u on (%s); they are "
            "staged through "
            "pinned host memory over %s instead (fallback #%llu)",
            epoch, why.c_str(), transport_name_.load(),
            static_cast<unsigned long long>(tally_.fallbacks + nccl_.fallbacks));
}

StoreExchange::Gathered CommunicatorImpl::wait_for_ranks(const StoreExchange& exchange, const Op& op, Deadline until,
                                                         const char* what, bool stall_rule) {
  const Clock::duration budget = progress_budget(op, std::max<size_t>(1, std::min(op.out.bytes(), kNcclSliceBytes)), 1);
  Clock::time_point since = Clock::now();
  auto judge = [&](const std::vector<int>& missing) -> Status {
    if (Status i = interrupted(); !i.ok()) return i;
    if (stall_rule && Clock::now() - since >= budget) {
      Status verdict = on_stall(op, missing.front(), Clock::now() - since);
      if (!verdict.ok()) return Status(verdict.code(), verdict.context(), std::string(what) + ": " + verdict.message());
      since = restart_stall_clock(Clock::now(), budget);
    }
    return Status();
  };
  StoreExchange::Gathered got = exchange.gather(until, judge, kStoreWaitSlice);
  const ErrorContext ctx{rank_, got.missing.empty() ? -1 : got.missing.front(), op.seq, epoch_.load(), "nccl"};
  if (got.ended == StoreExchange::Gathered::Ended::kTimedOut) {
    got.status = Status(ErrorCode::kTimeout, ctx, std::string(what) + ": rank " + std::to_string(ctx.peer) + " did not get there in time");
  } else if (got.ended == StoreExchange::Gathered::Ended::kStoreFailed) {
    // The store's own error, as the op's.
    got.status = Status(got.status.code(), ctx, std::string(what) + ": the store failed: " + got.status.message());
  }
  return got;
}

Status CommunicatorImpl::ensure_nccl(const Op& op) {
  const uint32_t epoch = epoch_.load();
  if (nccl_.comm && nccl_.epoch == epoch && !nccl_.comm->aborted()) return Status();
  // The old one is aborted (finalising could wait on peers that moved on) and
  // kept until a new one follows it: its stream may still hold copies and
  // draining kernels.
  if (nccl_.comm) {
    nccl_.comm->abort(Status(ErrorCode::kAborted,
                             "replaced by epoch " + std::to_string(epoch) + "'s communicator"));
    if (nccl_.comm->stop_put_off()) {
      ++nccl_.stops_put_off;
      RCOLL_LOG(kInfo,
                "%s on nccl: epoch %u's NCCL communicator is stopped only once the op ends (a CUDA "
                "stream waits at the stream gate, and stopping NCCL would wait for it); its calls "
                "run on, and epoch %u's go on another stream, after them but not after their "
                "confirmation",
                op.describe().c_str(), nccl_.epoch, epoch);
    }
    nccl_.retire();
  }
  const auto started = Clock::now();
  const ErrorContext ctx{rank_, -1, op.seq, epoch, "nccl"};

  // 1. Arrive: every rank, rank 0 with the unique id ("" when it could not
  // make one). A rank that will not join says why.
  std::string refuse = nccl_refusal(epoch);
  auto id = nccl_arrive(op, epoch, &refuse);
  if (!id.ok()) return id.status();

  // 2. Init, bounded now that every rank is there (and within a recovery's
  // time, so a rank that left for one never outwaits it).
  const Deadline init_deadline =
      Deadline::after(std::min<Millis>(std::max<Millis>(options_.connect_timeout, kNcclInitFloor), options_.recovery_timeout));
  Result<std::unique_ptr<nccl::Comm>> made =
      refuse.empty() ? nccl_init(op, epoch, id.value(), init_deadline) : Status(ErrorCode::kUnsupported, ctx, refuse);
  // A rank that cannot or will not join (no usable GPU, bad device, refused)
  // asks in the next recovery for NCCL to be dropped; anything else (a
  // timeout, a cancelled init, a network error) just fails this epoch, and
  // counts towards dropping it if it keeps happening.
  const ErrorCode code = made.ok() ? ErrorCode::kOk : made.status().code();
  const bool cannot_join = code == ErrorCode::kUnsupported || code == ErrorCode::kInvalidArgument || code == ErrorCode::kDevice;
  const std::string mine = made.ok() ? "ok" : "rank " + std::to_string(rank_) + ": " + made.status().message();
  if (cannot_join) nccl_.cannot_join = mine;
  if (!made.ok()) {
    ++nccl_.init_failures;
    nccl_.last_init_failure = mine;
  }
  if (size_ == 1 && !made.ok()) {
    // Nobody to agree with.
    if (cannot_join) {
      drop_nccl(mine, epoch);
      nccl_.restart_staged = true;
    }
    return Status(code, ctx, "NCCL communicator of epoch " + std::to_string(epoch) + ": " + mine);
  }

  // 3. Every rank's outcome, read by every rank: the same decision everywhere.
  if (size_ > 1) {
    if (Status s = nccl_agree(op, epoch, made, mine, Deadline::at(init_deadline.time() + std::chrono::seconds(5))); !s.ok()) {
      return s;
    }
  }
  // 4. In use from here.
  nccl_.comm = std::move(made).value();
  nccl_.cannot_join.clear();
  nccl_.init_failures = 0;
  if (nccl_.retired) {
    // Restoring an input on the new stream must come after what the old one
    // still holds (backup copies behind aborted kernels).
    if (Status s = nccl_.comm->follow(*nccl_.retired); !s.ok()) {
      nccl_.comm->abort(s);
      nccl_.graveyard.push_back(std::move(nccl_.comm));
      return Status(s.code(), ctx, "ordering epoch " + std::to_string(epoch) + "'s NCCL stream after the last: " + s.message());
    }
    nccl_.graveyard.push_back(std::move(nccl_.retired));
  }
  nccl_.epoch = epoch;
  RCOLL_LOG(kInfo, "NCCL %s communicator of epoch %u up in %.1f ms (%d ranks, CUDA device %d)", nccl::version().c_str(), epoch,
            std::chrono::duration<double, std::milli>(Clock::now() - started).count(), size_.load(), op.device);
  return Status();
}

std::string CommunicatorImpl::nccl_refusal(uint32_t epoch) {
  std::string refuse = nccl_vote();
  // Fault injection can make a rank fail its init (fail-connect:transport=nccl).
  for (Fault& f : faults_) {
    if (refuse.empty() && f.kind == FaultKind::kFailConnect && f.transport == "nccl" && f.count > 0 && epoch >= f.epoch &&
        (f.rank == -1 || f.rank == rank_)) {
      --f.count;
      ++tally_.injected;
      refuse = "rank " + std::to_string(rank_) + ": NCCL init of epoch " + std::to_string(epoch) +
               " failed by fault injection (fail-connect)";
    }
  }
  return refuse;
}

Result<std::string> CommunicatorImpl::nccl_arrive(const Op& op, uint32_t epoch, std::string* refuse) {
  const ErrorContext ctx{rank_, -1, op.seq, epoch, "nccl"};
  std::string id;
  if (rank_ == 0) {
    auto made = nccl::new_unique_id();
    if (made.ok()) id = made.value();
    if (!made.ok() && refuse->empty()) *refuse = "rank 0: " + made.status().message();
  }
  if (size_ == 1) return id;
  if (rank_ == 0) {
    if (Status s = store_->set(keys::nccl_id(epoch), Bytes(id.begin(), id.end())); !s.ok()) return Status(s.code(), ctx, s.message());
    janitor_.note_key(keys::nccl_id(epoch));
  }
  // Arrivals are waited for as an op waits for its peers: a straggler is
  // waited for, a frozen rank recovered from.
  const StoreExchange arrivals(*store_, keys::nccl_arrived(epoch), size_);
  janitor_.note_exchange(keys::nccl_arrived(epoch));
  if (Status s = arrivals.publish(rank_, Bytes{1}); !s.ok()) return Status(s.code(), ctx, s.message());
  if (auto s = wait_for_ranks(arrivals, op, Deadline::never(), "waiting for every rank at NCCL init", true); !s.ok()) {
    (void)store_->set(keys::nccl_gave_up(epoch), Bytes{0});  // peers already in init stop waiting for this rank
    janitor_.note_key(keys::nccl_gave_up(epoch));
    return s.status;
  }
  if (rank_ != 0) {
    auto got = store_->get(keys::nccl_id(epoch), kStoreWaitSlice * 20);
    if (!got.ok()) {
      (void)store_->set(keys::nccl_gave_up(epoch), Bytes{0});
      return Status(got.status().code(), ctx, "reading the NCCL unique id: " + got.status().message());
    }
    id.assign(got.value().begin(), got.value().end());
    if (id.empty() && refuse->empty()) *refuse = "rank 0 could not make an NCCL unique id";
  }
  return id;
}

Result<std::unique_ptr<nccl::Comm>> CommunicatorImpl::nccl_init(const Op& op, uint32_t epoch, const std::string& id,
                                                                Deadline init_deadline) {
  nccl::Comm::Config cfg;
  cfg.rank = rank_;
  cfg.size = size_;
  cfg.device = op.device;
  cfg.epoch = epoch;
  cfg.init_deadline = init_deadline;
  cfg.blocking = options_.nccl_blocking == 1;
  // One stream for every epoch (made on the first): the new communicator's
  // calls queue behind whatever the aborted one left on it (ensure_nccl
  // orders them after it too). Another while a stopped communicator whose
  // stop was put off still runs on that one (NcclPlane::stream_for_next).
  // All made with the first, before any stream waits at the gate: a stream
  // made later may share a hardware queue with one held there.
  for (auto& s : nccl_.streams) (void)s.create();
  if (void* s = nccl_.streams[nccl_.stream_for_next()].get(); s != nullptr) cfg.stream = s;
  if (Status s = nccl_.confirm_host.reserve(64); s.ok()) {
    // Four quarters, by epoch: an older communicator's stream may still copy
    // its confirmation back into its quarter (a stop put off lets it run to
    // the op's end).
    cfg.confirm_host = static_cast<char*>(nccl_.confirm_host.data()) + 16 * (epoch % 4);
  }
  if (size_ > 1) {
    // A rank that gives up, fails the epoch or sees a peer die says so at
    // once, and the others stop waiting for it.
    std::shared_ptr<Store> store = store_;
    const std::string gave_up = keys::nccl_gave_up(epoch);
    cfg.cancelled = [this, store, gave_up] {
      if (epoch_failed_elsewhere() || first_dead_peer() >= 0) return true;
      auto there = store->check(gave_up);
      return there.ok() && there.value();
    };
  }
  return nccl::Comm::create(id, cfg);
}

// A rank whose init failed says so at once, and whatever way this rank
// leaves before the decision, its peers must not be left waiting in NCCL's
// init for it: it says it gave up, and aborts its own.
Status CommunicatorImpl::nccl_agree(const Op& op, uint32_t epoch, Result<std::unique_ptr<nccl::Comm>>& made,
                                    const std::string& mine, Deadline until) {
  const ErrorContext ctx{rank_, -1, op.seq, epoch, "nccl"};
  const std::string gave_up = keys::nccl_gave_up(epoch);
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
      nccl_.graveyard.push_back(std::move(made).value());
    }
  }};
  const StoreExchange outcomes(*store_, keys::nccl_outcomes(epoch), size_);
  janitor_.note_exchange(keys::nccl_outcomes(epoch));
  if (Status s = outcomes.publish(rank_, Bytes(mine.begin(), mine.end())); !s.ok()) return Status(s.code(), ctx, s.message());
  // Peers still inside NCCL's init are at this op, not hung: no stall rule
  // here, only the init's own bound (and dead peers, abort notices).
  auto all = wait_for_ranks(outcomes, op, until, "waiting for every rank's NCCL init", false);
  if (!all.ok()) return all.status;
  std::string failure;
  for (const Bytes& v : all.values) {
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
  return Status();
}

}  // namespace rcoll
