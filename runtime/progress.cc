// The progress thread: runs ops in issue order, each as a range of slices,
// and turns a failed op into a recovery and a resume rather than an error.
#include <cxxabi.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <typeinfo>

#include "runtime/communicator_impl.h"
#include "base/log.h"
#include "runtime/stall_judge.h"

namespace rcoll {

namespace {

// "threw std::system_error (Resource temporarily unavailable)": what an
// exception other than std::bad_alloc says of itself, for the log. (Demangling
// and abi::__forced_unwind below are libstdc++'s, the only library built with.)
std::string exception_words(const std::exception& e) {
  const char* mangled = typeid(e).name();
  int failed = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &failed), std::free);
  return std::string("threw ") + (failed == 0 && name ? name.get() : mangled) + " (" + e.what() +
         ")";
}

}  // namespace

void CommunicatorImpl::progress_loop() {
  log::set_thread_rank(rank_, size_);
  bool closing_barrier_done = false;
  for (;;) {
    Op op;
    bool closing_barrier = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A caller running a blocking op itself owns the data plane until it is done.
      cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return !running_ && (!queue_.empty() || closing_); });
      if (running_) continue;
      if (queue_.empty()) {
        if (closing_) {
          // Before leaving, make sure no peer still needs this rank to re-run
          // a slice it already finished: a last barrier, which only completes
          // once every rank has finished every earlier op.
          if (closing_barrier_done || size_ == 1 || !options_.recovery || !fatal_.ok()) return;
          closing_barrier_done = closing_barrier = true;
          op.kind = OpKind::kBarrier;
          op.in = op.out = Buffer{nullptr, 0, DataType::kUint8};
          numbering_.take(op);
          numbering_.match(op);
          op.work = std::make_shared<WorkState>();
          op.options.timeout = options_.recovery_timeout;
          running_ = true;
        } else {
          running_ = true;
          lock.unlock();
          try {
            idle_checks();
          } catch (abi::__forced_unwind&) {
            throw;
          } catch (...) {
            (void)give_up_on_exception(nullptr);  // later ops fail with it (fatal_)
          }
          lock.lock();
          running_ = false;
          continue;
        }
      } else {
        op = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
      }
    }
    execute(op, closing_barrier);
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
}

void CommunicatorImpl::execute(Op& op, bool closing_barrier) {
  closing_barrier_running_ = closing_barrier;
  Status s;
  try {
    s = op.group ? run_group(op) : op.on_device() ? run_device_op(op) : run_op(op);
  } catch (abi::__forced_unwind&) {
    throw;  // the thread is being cancelled: let the unwinding go on
  } catch (...) {
    // Scratch or backup memory that could not be had (std::bad_alloc), or
    // anything else thrown mid-op: the op's state is not to be trusted, so the
    // communicator gives up, as after a failed recovery. Before, an exception
    // left the data plane marked busy (the caller's next op or close() waited
    // for ever), or on the progress thread ended the process in
    // std::terminate with no word of the op.
    s = give_up_on_exception(&op);
  }
  closing_barrier_running_ = false;
  last_op_end_ = Clock::now();
  idle_trimmed_ = false;
  tally_.held_bytes = scratch_.held() + log_.bytes() + log_.pool()->free_bytes() + staging_.held();
  if (!closing_barrier) ++tally_.ops_done;
  if (!s.ok() && closing_barrier) {
    RCOLL_LOG(kInfo, "closing barrier did not complete (%s); closing anyway", s.to_string().c_str());
  }
  // The op's verdict: streams waiting for it (Work::stream_wait) go on. Its
  // GPU work, if any, was seen done (or, after a failure for good, is let go).
  if (auto* gate = nccl_.gate.load()) gate->open_through(op.seq);
  // Only now, with no stream held at the gate, may a stopped NCCL
  // communicator's memory be freed (that waits for the whole GPU): after the
  // caller has its result, and put off while another gate of the process
  // holds a stream.
  op.work->finish(std::move(s));
  bury_nccl();
  kernels::cuda::StreamGate::free_deferred();
  if (nccl_.phases.on && op.on_device()) {
    nccl_.phases.mark(NcclPhases::kEnd);
    if (nccl_.phases.new_size(op.out.bytes())) log_nccl_phases();
    nccl_.phases.take_op(op.out.bytes());
  }
}

Status CommunicatorImpl::give_up_on_exception(const Op* op) {
  ErrorCode code = ErrorCode::kInternal;
  std::string what;
  try {
    try {
      throw;
    } catch (const std::bad_alloc&) {
      code = ErrorCode::kOutOfMemory;
      what = "host memory ran out (std::bad_alloc)";
    } catch (const std::exception& e) {
      what = exception_words(e);
    } catch (...) {
      what = "threw an exception that is not a std::exception";
    }
    what += op != nullptr ? " while it ran" : " while no op ran (an idle check or a recovery)";
    if (code == ErrorCode::kInternal)
      what += ", a defect in rcoll or in a Store it was given: please report it with this log";
  } catch (const std::bad_alloc&) {
  }
  return give_up_after_exception(op, code, what);
}

Status CommunicatorImpl::give_up_after_exception(const Op* op, ErrorCode code,
                                                 const std::string& what) {
  in_flight_ = OpInFlight{};  // its records (a group's too) died with the stack that threw
  Status s;
  try {
    s = Status(
        code,
        ErrorContext{rank_, -1, op != nullptr ? op->seq : 0, epoch_.load(), transport_name_.load()},
        (op != nullptr ? op->describe() + ": " : std::string()) + what);
    fatal_ = s;
  } catch (const std::bad_alloc&) {
    // Not even the message fits: a status short enough to need no allocation.
    fatal_ = Status(code, code == ErrorCode::kOutOfMemory ? "out of memory" : "rcoll defect");
    return fatal_;
  }
  // Best effort from here: a step that throws (memory, a user's Store) must
  // not take the others with it, nor leave the op unfinished.
  auto best_effort = [](auto&& step) {
    try {
      step();
    } catch (...) {
    }
  };
  best_effort([&] {
    if (transport_) transport_->abort(s);
  });
  // A slice already enqueued on NCCL waits for peers that are about to stop.
  best_effort([&] { abort_nccl_on_device(s); });
  best_effort([&] { publish_fatal(s); });
  best_effort([&] {
    RCOLL_LOG(kError, "%s; this rank aborts the epoch and later ops on this communicator will fail",
              s.to_string().c_str());
  });
  best_effort([&] { publish_state(false); });
  if (op != nullptr) best_effort([&] { recorder_.finished(op->seq, false); });
  return s;
}

bool CommunicatorImpl::recoverable(const Status& s) {
  switch (s.code()) {
    case ErrorCode::kTimeout:
    case ErrorCode::kPeerDead:
    case ErrorCode::kAborted:
    case ErrorCode::kTransport:
      return true;
    default:
      return false;
  }
}

// A failure of this rank's own GPU work: its peers wait for it at this op,
// so they are told (as for any failure for good) rather than left to time out.
Status CommunicatorImpl::device_local_failure(const Op& op, const Status& why, const char* what) {
  Status s(why.code(), ErrorContext{rank_, -1, op.seq, epoch_.load(), transport_name_.load()},
           op.describe() + ": " + what + ": " + why.message() +
               "; the communicator stops here (its peers are told)");
  fatal_ = s;
  publish_fatal(s);
  if (op.group) {
    for (const Op& m : *op.group) recorder_.finished(m.seq, false);
  } else {
    recorder_.finished(op.seq, false);
  }
  RCOLL_LOG(kError, "%s", s.to_string().c_str());
  return s;
}

// The op starts once the caller's stream reached it, waited for here: this
// rank is in compute meanwhile (a straggler to its peers), and joins a
// recovery another rank starts, as an idle rank does. Not behind NCCL's
// kernels, which would hold the communicator (and an abort of it) hostage
// to the caller's queue. (At one rank a collective is a copy queued right
// at issue behind the caller's work, with no stream_ready: queue_one_rank_copy.)
// kReached: go on; else `ended` is what the op returns.
CommunicatorImpl::CallerStream CommunicatorImpl::await_caller_stream(const Op& op, Status* ended) {
  if (!op.stream_ready) return CallerStream::kReached;
  const Deadline until = Deadline::after(options_.straggler_timeout);
  const int generation = shrink_generation_;
  waiting_device_op_ = &op;
  Status s;
  for (;;) {
    // Polled closely: the op (a data-parallel step's bucket, say) goes to
    // NCCL as soon as the caller's stream gets there.
    s = kernels::cuda::wait_event(
        op.stream_ready.get(), Deadline::after(std::chrono::milliseconds(20)),
        "waiting for the caller's CUDA stream to reach the op", std::chrono::microseconds(100));
    if (s.ok() || s.code() != ErrorCode::kTimeout || until.expired()) break;
    if (!shrink_if_peer_died()) recover_if_peer_failed();
    if (!fatal_.ok() || shrink_generation_ != generation) break;
  }
  waiting_device_op_ = nullptr;
  if (!fatal_.ok()) return CallerStream::kGaveUp;  // the op's run names the failure
  if (shrink_generation_ != generation) {
    // This op tells the caller of the shrink; the next one must not again.
    {
      std::lock_guard<std::mutex> lock(mu_);
      shrink_unreported_ = Status();
    }
    if (op.group) {
      for (const Op& m : *op.group) recorder_.finished(m.seq, false);
    } else {
      recorder_.finished(op.seq, false);
    }
    *ended = Status(
        ErrorCode::kPeerDead,
        ErrorContext{rank_, -1, op.seq, epoch_.load(), transport_name_.load()},
        op.describe() + " was issued for the group before a rank died and it shrank; not run");
    return CallerStream::kEnded;
  }
  if (s.ok()) return CallerStream::kReached;
  *ended = device_local_failure(op, s, "the caller's stream");
  return CallerStream::kEnded;
}

// Device buffers on the host transports. A failure before the op reaches the
// wire is this rank's alone, but its peers are waiting for it at this op:
// they are told (as for any failure for good) instead of waiting out their
// straggler timeout. A failure after it leaves the peers done and this op failed.
Status CommunicatorImpl::run_device_op(const Op& op) {
  nccl_.phases.start();
  if (!fatal_.ok()) return run_op(op);  // names the earlier failure
  kernels::cuda::ScopedDevice on;
  if (op.device >= 0) {
    if (Status s = on.enter(op.device); !s.ok())
      return device_local_failure(op, s, "making its CUDA device current");
  }
  Status ended;
  switch (await_caller_stream(op, &ended)) {
    case CallerStream::kReached:
      break;
    case CallerStream::kGaveUp:
      return run_op(op);  // names the failure
    case CallerStream::kEnded:
      return ended;
  }
  nccl_.phases.mark(NcclPhases::kCallerStream);
  if (op.one_rank || runs_on_nccl(op)) {
    Status s = run_op(op);
    if (!nccl_.restart_staged) return s;
    // NCCL was dropped before or while the op ran, on every rank alike. Ops on
    // NCCL never lose their inputs (in-place ones are backed up), so every
    // rank can run it again from the start, staged.
    nccl_.restart_staged = false;
    if (Status r = restore_nccl_inputs(op); !r.ok())
      return device_local_failure(op, r, "putting back its input to run it again");
    RCOLL_LOG(kWarn,
              "%s runs again from the start, staged through pinned host memory over %s (NCCL "
              "dropped: %s)",
              op.describe().c_str(), transport_name_.load(), nccl_.off.c_str());
  }
  DeviceStaging::Limits limits;
  limits.caller_stream = options_.straggler_timeout;
  limits.copy_floor = options_.deadline_floor;
  auto host = staging_.stage_in(op, rank_, limits);
  if (!host.ok()) return device_local_failure(op, host.status(), "staging its input");
  if (Status s = run_op(host.value()); !s.ok()) return s;
  // The op completed on every rank; only this rank's copy of the result can
  // fail here. Its staging memory may still be in a copy's hands, so the
  // communicator cannot go on either.
  if (Status s = staging_.stage_out(op, host.value(), rank_, limits); !s.ok()) {
    return device_local_failure(
        op, s, "the op completed on every rank, but copying the result to the device failed");
  }
  return Status();
}

Status CommunicatorImpl::run_op(const Op& op) {
  if (!fatal_.ok()) {
    recorder_.finished(op.seq, false);
    return Status(fatal_.code(), ErrorContext{rank_, fatal_.context().peer, op.seq, epoch_.load(), transport_name_.load()},
                  op.describe() + " not run: the communicator gave up after an earlier failure: " + fatal_.message());
  }
  OpRecord rec = new_record(op);
  inject_late_start(op);
  in_flight_ = OpInFlight{};  // nothing of the last op's stall judging carries over
  in_flight_.record = &rec;
  in_flight_.started = Clock::now();
  recorder_.started(op.seq, epoch_.load(), rec.total, in_flight_.started);
  publish_state(true);
  size_t first = 0;
  for (;;) {
    Status s = first < rec.total ? run_slices(rec, first, false) : Status();
    // A clean op's trace goes from started to finished (which marks every
    // slice done); only a failed or recovered one has a position to show.
    if (!s.ok() || in_flight_.recoveries > 0) recorder_.progressed(op.seq, rec.done, epoch_.load());
    if (s.ok()) break;
    if (nccl_.restart_staged) {
      // Every rank stopped using NCCL: run_device_op runs the op again, staged.
      in_flight_.record = nullptr;
      return s;
    }
    if (rec.nccl) nccl_.failures.push_back(Clock::now());
    s = recover_after(std::move(s), {&rec, 1}, {&first, 1});
    if (s.ok()) continue;
    return end_failed_op(rec, std::move(s));
  }
  end_completed_op(std::move(rec));
  return Status();
}

Status CommunicatorImpl::recover_after(Status s, std::span<OpRecord> current,
                                       std::span<size_t> resume) {
  if (in_flight_.straggler_expired)
    return s;  // a live rank merely late: a new data plane cannot help
  if (in_flight_.recoveries >= options_.max_recoveries_per_op) {
    return Status(s.code(), s.context(),
                  s.message() + " (gave up after " + std::to_string(in_flight_.recoveries) +
                      " recoveries of " + (in_flight_.group.empty() ? "this op" : "this group") +
                      ")");
  }
  if (!recoverable(s) || !options_.recovery || size_ == 1) return s;
  if (Status expired = hang_timeout_expired(s); !expired.ok()) return expired;
  return recover_and_replay(std::move(s), current, resume);
}

OpRecord CommunicatorImpl::new_record(const Op& op) {
  OpRecord rec;
  rec.op = op;
  rec.op.work = nullptr;  // the caller's handle: not the log's to keep (WorkStates are reused)
  rec.work = op.work.get();
  rec.op.stream_ready.reset();  // used before the op runs; it would keep the work state alive in the log
  rec.pool = log_.pool();
  // The tuning this op keeps, replays included (link_model.h).
  rec.tuning = tuner_.for_op(op);
  // Device buffers reach run_op only to run on NCCL (else they are staged).
  rec.nccl = op.on_device();
  rec.settles_later = rec.nccl && settles_later(op);
  rec.total = rec.nccl ? nccl_slice_count(op) : plan_slices(op, rank_, size_, rec.tuning, 0, 0).slices;  // the count alone
  return rec;
}

// The op failed for good (no recovery helps, or none is allowed): shrink
// around a dead peer if asked, else the communicator gives up.
Status CommunicatorImpl::end_failed_op(const OpRecord& rec, Status s) {
  const Op& op = rec.op;
  in_flight_.record = nullptr;
  if (options_.shrink_on_death && s.code() == ErrorCode::kPeerDead && first_dead_peer() >= 0) {
    const int was = rank_, of = size_;
    // The shrink aborts the data plane first: nothing writes into the op's
    // buffers after it, so its input can go back in.
    bool complete = false;
    (void)shrink(s, &rec, &complete);
    recorder_.finished(op.seq, complete && fatal_.ok());
    if (complete && fatal_.ok()) {
      // Every survivor held the whole result (shrink()): the op is done here
      // as on the survivors that completed it; the caller learns of the
      // shrink from its next op, as they do (leave_old_group set that).
      return Status();
    }
    const std::string restored = give_input_back(rec);
    if (fatal_.ok()) {
      return Status(ErrorCode::kPeerDead, s.context(),
                    s.message() + "; shrink mode: the communicator went on without it, rank " +
                        std::to_string(was) + " of " + std::to_string(of) + " is now rank " +
                        std::to_string(rank_.load()) + " of " + std::to_string(size_.load()) +
                        restored);
    }
    return fatal_;
  }
  fatal_ = s;
  publish_fatal(s);
  RCOLL_LOG(kError, "%s; %s", s.to_string().c_str(),
            in_flight_.straggler_expired
                ? "a rank was too late for this op: later ops on this communicator will fail"
            : recoverable(s) && options_.recovery
                ? "recovery failed: later ops on this communicator will fail"
                : "not recoverable: later ops on this communicator will fail");
  publish_state(false);
  recorder_.finished(op.seq, false);
  report_positions(s);
  return s;
}

// The op completed on this rank: credits, the bandwidth estimate, the log.
void CommunicatorImpl::end_completed_op(OpRecord&& rec) {
  const Op& op = rec.op;
  if (in_flight_.straggler >= 0) {
    RCOLL_LOG(kWarn, "%s completed; rank %d arrived %.1f s late (straggler, no recovery needed)",
              op.describe().c_str(), in_flight_.straggler,
              std::chrono::duration<double>(Clock::now() - in_flight_.started).count());
  }
  in_flight_.record = nullptr;
  const Clock::time_point ended = Clock::now();
  recorder_.finished(op.seq, true, ended);
  if (credits_.carries(rec, options_.recovery)) credits_.completed(rec, *transport_);
  // Measure the data plane for the progress deadline (ops of 1 MiB or more).
  const size_t bytes = std::max(op.in.bytes(), op.out.bytes());
  const double secs = std::chrono::duration<double>(ended - in_flight_.started).count();
  if (bytes >= (1u << 20) && secs > 0) {
    const double bw = static_cast<double>(bytes) / secs;
    const double old = bandwidth_.load();
    bandwidth_ = old == 0 ? bw : 0.8 * old + 0.2 * bw;
  }
  record_completion(std::move(rec));
  publish_state(false);
}

void CommunicatorImpl::publish_state(bool in_comm) {
  if (!liveness_) return;
  RankState st;
  st.op_seq = in_flight_.record && in_flight_.record->op.kind != OpKind::kSendRecv
                  ? in_flight_.record->op.match_seq
                  : log_.collective_through;
  st.in_comm = in_comm;
  // Whom a send or receive waits on: peers follow the chain of waits to the
  // rank that holds it up (on_stall). A group waits on its first receive's
  // peer, what a pipeline stage waits for upstream (a stall names the member
  // it is stuck on: note_awaited).
  const OpRecord* awaited = nullptr;
  if (in_comm && in_flight_.record && in_flight_.record->op.kind == OpKind::kSendRecv) {
    awaited = in_flight_.record;
    for (const OpRecord& r : in_flight_.group) {
      if (!r.op.is_send) {
        awaited = &r;
        break;
      }
    }
  }
  if (awaited != nullptr) {
    st.waiting_on = awaited->op.peer;
    st.waiting_send = awaited->op.is_send;
    st.p2p_seq = static_cast<uint32_t>(awaited->op.match_seq);
    st.grouped = !in_flight_.group.empty();
  }
  st.epoch = epoch_.load();
  liveness_->set_local(st);
}

int CommunicatorImpl::first_dead_peer() const {
  if (!dead_) return -1;
  for (int q = 0; q < size_; ++q)
    if (dead_[static_cast<size_t>(q)]) return q;
  return -1;
}

// A completed op stays re-runnable for a while: peers may not have finished
// its last slices. Its tail inputs are copied now, because the caller owns its
// buffers from here on. In a ring every slice needs every rank, so no rank is
// more than a window ahead of the slowest: two windows of tail suffice. A send
// can be ahead of its receiver by what the socket buffers hold, an eager
// broadcast's root by what the completion credits allow (collect_credits).
// Receives and acknowledged broadcasts (which complete only when everyone
// downstream acknowledged) are never re-run for a peer.
void CommunicatorImpl::record_completion(OpRecord&& rec) {
  rec.work = nullptr;
  const Op& op = rec.op;
  if (op.kind == OpKind::kSendRecv) {
    auto& through = op.is_send ? log_.send_through : log_.recv_through;
    through[static_cast<size_t>(op.peer)] = std::max(through[static_cast<size_t>(op.peer)], op.match_seq);
    // On NCCL the pair confirmed it (or it moved nothing): never re-run.
    if (!op.is_send || rec.nccl) return;
  } else {
    log_.collective_through = std::max(log_.collective_through, op.match_seq);
    if (rec.nccl) settle(rec);
    // An op that talked to every rank shows that all of them started it (an
    // empty op talks to no one; an eager broadcast only down its chain or
    // tree, finishing without hearing back).
    const bool eager = !rec.nccl && broadcast_is_eager(op, rec.tuning);
    const bool talked = size_ > 1 && (op.kind == OpKind::kBarrier || op.out.count > 0);
    if (!eager && talked) log_.synchronized(op.match_seq);
    // Ops on NCCL complete everywhere once one rank has them (ledger.cc),
    // even those whose confirmation this rank did not see; one that settles
    // later is logged, its input kept on the device, until the next one
    // completes (a peer may still be inside it: replay_nccl).
    if (rec.nccl && rec.settles_later && size_ > 1 && options_.recovery &&
        nccl_.holding(op.seq, op.in.bytes()) != nullptr) {
      rec.complete = true;
      rec.done = rec.total;
      log_.push(std::move(rec));
      return;
    }
    if ((op.kind == OpKind::kBroadcast && !eager) || rec.confirmed || rec.nccl) return;
    // An empty collective moves nothing on any rank: nothing to re-run.
    if (op.kind != OpKind::kBarrier && op.out.count == 0) return;
  }
  if (size_ == 1 || !options_.recovery) return;  // nothing will ever be re-run
  rec.complete = true;
  rec.done = rec.total;
  // A peer resumes no earlier than the start of this rank's last window (it
  // finished the window before), so that window's inputs are all a peer can
  // need. A send can be further ahead: by what the sockets hold.
  size_t tail_first = rec.last_window_first;
  if (op.kind == OpKind::kSendRecv) {
    const size_t window = static_cast<size_t>(std::max(1, rec.tuning.window));
    const size_t slices = window * 2 + in_flight_capacity() / std::max<size_t>(1, rec.tuning.piece_bytes);
    tail_first = rec.total > slices ? rec.total - slices : 0;
  }
  if (broadcast_is_eager(op, rec.tuning)) tail_first = 0;  // at most kEagerBroadcastBytesTcp: all of it
  // An in-place allreduce has overwritten its inputs: the backups its window
  // hook took before each window are all there is (and all a peer can need).
  if (!overwrites_input(op)) rec.back_up(rank_, size_, tail_first, rec.total);
  rec.release_before(tail_first);
  log_.push(std::move(rec));
}

Status CommunicatorImpl::run_slices(OpRecord& rec, size_t first, bool replay) {
  if (rec.nccl) return replay ? replay_nccl(rec, first) : run_nccl_slices(rec, first);
  const Op& op = rec.op;
  in_flight_.straggler_expired = false;
  AlgoContext ctx(*transport_, op, rec.tuning, scratch_);
  ctx.set_guard(this, progress_budget(op, rec.tuning.piece_bytes, rec.tuning.window));
  ctx.set_slice_range(first, rec.total);
  std::vector<char> sink;
  if (replay) {
    // The caller has this op's result already: read inputs from the backups
    // and write outputs nowhere it can see.
    rec.map_inputs(&ctx.in_map());
    SlicePlan plan = plan_slices(op, rank_, size_, rec.tuning, first, rec.total);
    size_t bytes = 0;
    for (const auto& r : plan.outputs) bytes += (r.end - r.begin) * op.element_size();
    sink.resize(bytes + 1);
    size_t at = 0;
    for (const auto& r : plan.outputs) {
      ctx.out_map().redirect(r.begin, r.end, sink.data() + at);
      at += (r.end - r.begin) * op.element_size();
    }
  } else {
    // Slices before `first` may already hold results: their inputs come from
    // the backups. Each window's first slice is recorded (the completed op's
    // tail), and an in-place op backs the window up before touching it.
    if (overwrites_input(op) && keeps_inputs()) rec.map_inputs(&ctx.in_map());
    // Two pointers captured: std::function keeps them inline (no allocation per op).
    ctx.set_window_hook([&rec, this](size_t begin, size_t end) {
      rec.last_window_first = begin;
      if (!overwrites_input(rec.op) || !keeps_inputs()) return;
      rec.back_up(rank_, size_, begin, end);
      // A recovery resumes at most a window back; a death in shrink mode
      // gives the caller the whole input back (restore_inputs), so there
      // every window's backup stays until the op ends.
      const size_t window = static_cast<size_t>(std::max(1, rec.tuning.window));
      if (begin >= window && !options_.shrink_on_death) rec.release_before(begin - window);
    });
    // Before the faults: a link broken here must fail the op, not the wait
    // for an earlier op's credits (which would skip counting the fault).
    if (Status s = credits_.collect(op, ctx, log_, closing_barrier_running_); !s.ok()) return s;
    if (first == 0 && !faults_.empty()) inject_before(op, ctx, rec.total);
  }
  if (!faults_.empty() && !replay) {
    if (Status hung = inject_hang(op); !hung.ok()) return ctx.fail(std::move(hung));
  }
  Status s;
  switch (op.kind) {
    case OpKind::kSendRecv: s = op.is_send ? run_send(ctx) : run_recv(ctx); break;
    case OpKind::kAllreduce: s = run_allreduce(ctx); break;
    case OpKind::kAllgather: s = run_allgather(ctx); break;
    case OpKind::kReduceScatter: s = run_reduce_scatter(ctx); break;
    case OpKind::kBroadcast: s = run_broadcast(ctx); break;
    case OpKind::kBarrier: s = run_barrier(ctx); break;
    case OpKind::kAlltoall: s = run_alltoall(ctx); break;
    case OpKind::kNone: s = Status(ErrorCode::kInternal, "op of kind none"); break;
  }
  if (!replay) rec.done = std::max(rec.done, ctx.done());
  if (s.ok() && !replay && confirms_completion(op) && rec.done >= rec.total) {
    if (!faults_.empty()) inject_in_confirmation(op, ctx);
    s = ctx.confirm_completion(static_cast<uint32_t>(rec.total));
    rec.confirmed = s.ok();
  }
  tally_.injected += ctx.faults_fired();
  tally_.transport_moved(transport_->bytes_sent(), transport_->bytes_received());
  return s;
}

}  // namespace rcoll
