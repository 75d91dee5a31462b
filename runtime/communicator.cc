#include "rcoll/communicator.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "base/log.h"
#include "rcoll/version.h"
#include "runtime/communicator_impl.h"
#include "transports/factory.h"
#include "transports/tcp/interfaces.h"

namespace rcoll {

const char* version_string() {
#if RCOLL_HAVE_NCCL && RCOLL_HAVE_UCX
  return "0.1.0 (transports: nccl, ucx, tcp)";
#elif RCOLL_HAVE_NCCL
  return "0.1.0 (transports: nccl, tcp)";
#elif RCOLL_HAVE_UCX
  return "0.1.0 (transports: ucx, tcp)";
#else
  return "0.1.0 (transports: tcp)";
#endif
}

std::vector<std::string> available_transports() { return built_transports(); }

// ---------------------------------------------------------------- the runtime

Result<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::create(Options options) {
  if (Status s = apply_env_overrides(&options); !s.ok()) return s;
  std::vector<Fault> faults;
  if (auto spec = env_string("RCOLL_INJECT")) {
    auto parsed = parse_fault_spec(*spec);
    if (!parsed.ok()) return parsed.status();
    faults = std::move(parsed).value();
  }
  std::vector<std::string> notes;
  auto chain = TransportChain::make(options, &notes);
  if (!chain.ok()) return chain.status();
  auto boot = bootstrap(options);
  if (!boot.ok()) return boot.status();
  std::unique_ptr<CommunicatorImpl> impl(
      new CommunicatorImpl(std::move(options), std::move(boot).value(), std::move(chain).value()));
  for (const auto& n : notes) RCOLL_LOG(kDebug, "transport chain: %s", n.c_str());
  impl->faults_ = std::move(faults);
  if (!impl->faults_.empty()) {
    RCOLL_LOG(kWarn, "fault injection is on (RCOLL_INJECT=%s): %zu fault(s) planned", env_string("RCOLL_INJECT")->c_str(),
              impl->faults_.size());
  }
  if (impl->options_.socket_ifname.empty() && !impl->prefer_loopback() && !impl->boot_.store_host.empty()) {
    impl->route_address_ = route_source_address(impl->boot_.store_host);
    RCOLL_LOG(kInfo, "no RCOLL_SOCKET_IFNAME: using the interface with address %s, the route toward the store at %s",
              impl->route_address_.empty() ? "(none found; first non-loopback interface instead)" : impl->route_address_.c_str(),
              impl->boot_.store_host.c_str());
  }
  // Every rank arrives first (up to the join timeout: a late starter is
  // waited for); the connect phases' deadline starts after that.
  const Millis join_timeout = impl->options_.join_timeout.count() > 0
                                  ? impl->options_.join_timeout
                                  : impl->options_.connect_timeout;
  if (Status s = impl->join(Deadline::after(join_timeout)); !s.ok()) return s;
  const Deadline connect_deadline = Deadline::after(impl->options_.connect_timeout);
  if (Status s = impl->connect_epoch(0, connect_deadline); !s.ok()) return s;
  // The link timing in connect_epoch may end past connect_deadline: without a
  // budget of its own the liveness channel would get none, and a slow link
  // would fail creation as "peer unreachable".
  if (Status s = impl->start_liveness(impl->own_budget(connect_deadline)); !s.ok()) return s;
  impl->progress_ = std::thread([p = impl.get()] { p->progress_loop(); });
  return impl;
}

// The heartbeat side channel of the current group (none for a single rank).
Status CommunicatorImpl::start_liveness(Deadline deadline) {
  if (size_ > 1) {
    LivenessParams lp;
    lp.rank = rank_;
    lp.size = size_;
    lp.store = store_;
    lp.ifname_spec = options_.socket_ifname;
    lp.prefer_loopback = prefer_loopback();
    lp.route_address = route_address_;
    lp.job_token = boot_.job_token;
    lp.interval = std::max<Millis>(Millis(10), options_.liveness_budget / 15);
    lp.budget = options_.liveness_budget;
    lp.to_all = options_.heartbeats_to_all;
    lp.connect_deadline = deadline;
    if (liveness_listener_.valid()) {
      lp.listen_fd = liveness_listener_.release();
      lp.addresses = std::move(liveness_addresses_);
      liveness_addresses_ = AddressBook();
    }
    auto live = Liveness::start(lp);
    if (!live.ok()) return live.status();
    liveness_ = std::move(live).value();
    dead_.reset(new std::atomic<bool>[static_cast<size_t>(size_)]);
    for (int q = 0; q < size_; ++q) dead_[static_cast<size_t>(q)] = false;
    CommunicatorImpl* self = this;
    // Every rank that failed an epoch itself tells every peer: the first
    // notice of an epoch is worth a line, the others (up to P-1) are not.
    auto noted = std::make_shared<std::atomic<int64_t>>(-1);
    liveness_->set_listener([self, noted](const LivenessEvent& e) {
      switch (e.kind) {
        case LivenessEvent::Kind::kPeerDead:
          self->dead_[static_cast<size_t>(e.peer)] = true;
          // Seen here (its liveness connection closed without a goodbye), or
          // told by the overlay partner that saw it (the reason says which).
          RCOLL_LOG(kError, "rank %d is dead (the process is gone): %s", e.peer, e.reason.c_str());
          break;
        case LivenessEvent::Kind::kPeerSilent:
          RCOLL_LOG(
              kWarn,
              "rank %d is silent: no heartbeat for %lld ms (frozen, stopped or partitioned); "
              "suspect: an op that stalls on it recovers and waits for it up to the recovery "
              "timeout (%lld ms); an op on NCCL while a CUDA stream waits at a stream gate waits "
              "for it on the same NCCL communicator instead, up to that timeout",
              e.peer, static_cast<long long>(self->options_.liveness_budget.count()),
              static_cast<long long>(self->options_.recovery_timeout.count()));
          break;
        case LivenessEvent::Kind::kPeerBack:
          RCOLL_LOG(kWarn, "rank %d heartbeats again (%s); no longer suspect, ops with it go on", e.peer, e.reason.c_str());
          break;
        case LivenessEvent::Kind::kPeerAborted: {
          // (Events come on the liveness thread only.)
          if (static_cast<int64_t>(e.epoch) > noted->load()) {
            noted->store(e.epoch);
            RCOLL_LOG(kInfo,
                      "rank %d announced that epoch %u failed: %s; this rank aborts that epoch and "
                      "joins the recovery",
                      e.peer, e.epoch, e.reason.c_str());
          } else {
            RCOLL_LOG(kDebug, "rank %d announced that epoch %u failed too: %s", e.peer, e.epoch,
                      e.reason.c_str());
          }
          break;
        }
      }
    });
    // A death reported before the listener was in place is only in the views.
    for (int q = 0; q < size_; ++q) {
      if (q != rank_ && liveness_->peer(q).health == PeerHealth::kDead) dead_[static_cast<size_t>(q)] = true;
    }
  }
  return Status();
}

CommunicatorImpl::CommunicatorImpl(Options options, Bootstrap boot, TransportChain chain)
    : options_(std::move(options)),
      boot_(std::move(boot)),
      rank_(boot_.rank),
      size_(boot_.size),
      chain_(std::move(chain)),
      log_(options_.backup_bytes, sends_kept_bytes(options_)),
      numbering_(size_) {
  log_.send_through.assign(static_cast<size_t>(size_), 0);
  log_.recv_through.assign(static_cast<size_t>(size_), 0);
  credits_.reset(rank_, size_);
  const auto phases = nccl_phases_requested();  // a malformed value failed creation already
  nccl_.phases.on = phases.ok() && phases.value();
  const auto in_group = nccl_keep_in_group_requested();  // likewise
  nccl_.keep_in_group = !in_group.ok() || in_group.value();
  log::set_identity("rank " + std::to_string(rank_) + "/" + std::to_string(size_));
}

CommunicatorImpl::~CommunicatorImpl() { close(); }

// A finished op's work state again, once no handle holds it (its events are
// made once and reused), or a new one.
std::shared_ptr<WorkState> CommunicatorImpl::reuse_work() {
  for (auto& w : spare_work_) {
    if (w && w.use_count() == 1) {
      std::atomic_thread_fence(std::memory_order_acquire);
      std::lock_guard<std::mutex> lock(w->mu);
      w->done = false;
      w->issued = false;
      w->status = Status();
      w->seq = 0;
      return w;
    }
  }
  auto fresh = std::make_shared<WorkState>();
  for (auto& w : spare_work_) {
    if (!w) {
      w = fresh;
      break;
    }
  }
  return fresh;
}

Work CommunicatorImpl::submit(Op op, Issue how) {
  std::unique_lock<std::mutex> lock(mu_);
  std::shared_ptr<WorkState> work = reuse_work();
  op.work = work;
  work->seq = numbering_.take(op);
  work->rank = rank_;
  if (!shrink_unreported_.ok()) {
    // The group shrank while this rank was idle: tell the caller with this op,
    // before it is numbered (it was meant for the old group).
    Status why = shrink_unreported_;
    shrink_unreported_ = Status();
    numbering_.give_back(op);
    ErrorContext at = why.context();  // the death's, about this op (not the one before)
    at.op_seq = op.seq;
    work->finish(Status(ErrorCode::kPeerDead, at,
                        op.describe() + " not run: " + why.message() +
                            "; shrink mode: the communicator went on without it as " +
                            std::to_string(size_.load()) + " ranks (this rank is now rank " +
                            std::to_string(rank_.load()) + ")"));
    return Work(work);
  }
  if (closing_ || closed_) {
    work->finish(Status(ErrorCode::kClosed, ErrorContext{rank_, -1, op.seq, epoch_.load(), ""},
                        op.describe() + ": the communicator is closed"));
    return Work(work);
  }
  Status valid = op.group ? validate_group(op, rank_, size_) : validate(op, rank_, size_);
  // An async device op may be waited for on a stream (Work::stream_wait); a
  // blocking one never is, and skips queueing a verdict for it.
  op.gated = how == Issue::kQueue && op.device >= 0;
  if (valid.ok()) valid = prepare_device_op(op);
  if (Status s = std::move(valid); !s.ok()) {
    // Bad input never consumes a sequence number peers would wait for.
    numbering_.give_back(op);
    work->finish(std::move(s));
    return Work(work);
  }
  numbering_.match(op);
  if (op.group) {
    for (const Op& m : *op.group) recorder_.issued(m);
  } else {
    recorder_.issued(op);
  }
  if (how == Issue::kHereIfIdle && queue_.empty() && !running_) {
    running_ = true;
    lock.unlock();
    // Handed back however execute() ends: an exception it lets through goes
    // to the caller, but must not leave the progress thread and close()
    // waiting for a data plane marked busy for ever.
    struct HandBack {
      CommunicatorImpl* self;
      std::unique_lock<std::mutex>& lock;
      ~HandBack() {
        lock.lock();
        self->running_ = false;
        const bool more = !self->queue_.empty() || self->closing_;
        lock.unlock();
        if (more) self->cv_.notify_all();
      }
    } hand_back{this, lock};
    log::set_thread_rank(rank_, size_);
    execute(op, false);
    return Work(work);
  }
  queue_.push_back(std::move(op));
  lock.unlock();
  cv_.notify_one();
  return Work(work);
}

namespace {

// Why this process cannot hold streams at a stream gate, or "". CUDA puts
// streams into a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 unless
// set), and a wait at a closed gate holds its whole queue: with few queues
// a recovery's new NCCL kernels would likely land behind the wait for their
// own verdict and never run. Megatron-style jobs set it to 1.
std::string gate_refusal() {
  const auto connections = env_string("CUDA_DEVICE_MAX_CONNECTIONS");
  if (!connections) return "";
  char* end = nullptr;
  const long n = std::strtol(connections->c_str(), &end, 10);
  if (end != connections->c_str() && *end == '\0' && n >= 4) return "";
  return "CUDA_DEVICE_MAX_CONNECTIONS=" + *connections +
         " puts streams into too few hardware queues (a wait at the gate would hold a recovery's NCCL kernels; 4 or more "
         "needed)";
}

}  // namespace

Status CommunicatorImpl::prepare_device_op(Op& op) {
  if (op.device < 0) return Status();
  if (device_ >= 0 && op.device != device_) {
    return Status(ErrorCode::kInvalidArgument, ErrorContext{rank_, -1, op.seq, -1, ""},
                  op.describe() + ": its buffers are on CUDA device " + std::to_string(op.device) +
                      ", but this communicator's device ops are on device " + std::to_string(device_) +
                      " (one device per communicator, as with NCCL); nothing was sent");
  }
  namespace cuda = kernels::cuda;
  auto failed = [&](const Status& s) {
    return Status(s.code(), ErrorContext{rank_, -1, op.seq, -1, ""},
                  op.describe() + ": marking the caller's CUDA stream: " + s.message() + "; nothing was sent");
  };
  cuda::ScopedDevice on;
  if (Status s = on.enter(op.device); !s.ok()) return failed(s);
  // The work state's events are made once and reused with it: creating and
  // destroying an event per op cost about a microsecond each.
  WorkState& w = *op.work;
  for (void** e : {&w.ready_event, &w.verdict_event}) {
    if (*e != nullptr) continue;
    auto event = cuda::event_create();
    if (!event.ok()) return failed(event.status());
    *e = event.value();
  }
  device_ = op.device;
  // One rank: the op is a copy, queued here on the caller's stream (no mark
  // needed). The size only ever shrinks: an op marked at more ranks that
  // runs after a shrink to one takes the general path.
  op.one_rank = size_ == 1 && !op.group &&
                (op.kind == OpKind::kAllreduce || op.kind == OpKind::kAllgather ||
                 op.kind == OpKind::kReduceScatter || op.kind == OpKind::kBroadcast ||
                 op.kind == OpKind::kAlltoall);
  if (op.one_rank) {
    if (Status s = queue_one_rank_copy(op); !s.ok()) return s;
  } else {
    // Shares the work state's ownership: the event lives as long as the op.
    op.stream_ready = std::shared_ptr<void>(op.work, w.ready_event);
    if (Status s = cuda::event_record(w.ready_event, op.options.cuda_stream); !s.ok())
      return failed(s);
  }
  if (op.gated && !op.one_rank && !nccl_.gate_tried) {
    // The gate and the stream the verdicts queue on, once per communicator.
    // Without stream memory operations Work::stream_wait waits on the host.
    nccl_.gate_tried = true;
    const std::string refusal = gate_refusal();
    Result<std::unique_ptr<cuda::StreamGate>> gate =
        !nccl::revocable()
            ? Result<std::unique_ptr<cuda::StreamGate>>(Status(ErrorCode::kUnsupported,
                  "NCCL " + nccl::version() + " has no ncclCommRevoke, and a recovery's abort would wait for a stream "
                  "held at the gate"))
        : !refusal.empty() ? Result<std::unique_ptr<cuda::StreamGate>>(Status(ErrorCode::kUnsupported, refusal))
                           : cuda::StreamGate::create(static_cast<uint32_t>(op.seq - 1));
    Status s = gate.ok() ? nccl_.verdict_stream.create() : gate.status();
    if (s.ok()) {
      nccl_.gate_owner = std::move(gate).value();
      nccl_.gate.store(nccl_.gate_owner.get());
    } else {
      RCOLL_LOG(kInfo, "no stream gate on CUDA device %d (%s): Work::stream_wait on device ops waits on the host",
                op.device, s.message().c_str());
    }
  }
  // (A one-rank op's verdict is an event on the caller's stream: no gate.)
  if (!op.one_rank && !nccl_.gate.load()) op.gated = false;
  return Status();
}

// At one rank every collective leaves its input in its output (all-reduce:
// any reduction of one contribution is that contribution; all-gather,
// reduce-scatter, all-to-all, broadcast): the op is a copy (none in place),
// queued at issue on the caller's thread and stream, as NCCL queues its own
// one-rank copy: behind exactly the work the caller queued before it (a
// per-thread default stream is the caller's), with no communicator, no
// stream of rcoll's and no host wait for the stream first (with no peer,
// nothing can need aborting meanwhile). The work state's verdict event
// marks the result there: Work::stream_wait waits for it, and the op, run
// in turn, waits for it on the host (await_one_rank_copy).
Status CommunicatorImpl::queue_one_rank_copy(Op& op) {
  namespace cuda = kernels::cuda;
  WorkState& w = *op.work;
  void* stream = op.options.cuda_stream;
  Status s;
  if (op.in.data != op.out.data)
    s = cuda::copy_async(op.out.data, op.in.data, op.out.bytes(), stream);
  if (s.ok()) s = cuda::event_record(w.verdict_event, stream);
  if (!s.ok()) {
    return Status(s.code(), ErrorContext{rank_, -1, op.seq, -1, ""},
                  op.describe() + " at one rank: queueing its copy on the caller's CUDA stream: " +
                      s.message() + "; nothing was run");
  }
  if (op.gated) w.mark_issued();
  return Status();
}

void CommunicatorImpl::close() {
  std::lock_guard<std::mutex> closing(close_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closing_ = true;
  }
  cv_.notify_all();
  if (progress_.joinable()) progress_.join();
  epoch_watch_.stop();
  transport_.reset();
  liveness_.reset();  // says goodbye, so peers do not take this exit for a death
  {
    // No stream may wait for an op that will never run.
    std::lock_guard<std::mutex> lock(mu_);
    if (auto* g = nccl_.gate.load()) g->open_through(numbering_.last());
  }
  release_device_resources();
  log_nccl_phases();
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

// RCOLL_NCCL_PHASES=1: where the device ops' host time went, per op.
void CommunicatorImpl::log_nccl_phases() const {
  const NcclPhases& p = nccl_.phases;
  if (!p.on || p.ops == 0) return;
  std::string line;
  for (size_t i = 0; i < NcclPhases::kCount; ++i) {
    const double us =
        std::chrono::duration<double, std::micro>(p.sum[i]).count() / static_cast<double>(p.ops);
    char part[64];
    std::snprintf(part, sizeof part, "%s%s %.2f", i ? ", " : "", NcclPhases::kNames[i], us);
    line += part;
  }
  RCOLL_LOG(kInfo, "device ops' host time per op over %llu ops of %zu bytes (us): %s",
            static_cast<unsigned long long>(p.ops), p.bytes, line.c_str());
}

// With the communicator's device current (else CUDA would make a context on
// GPU 0 for this thread), in order: the NCCL communicators (after rcoll's
// device stream has waited for their streams), then the memory they used.
void CommunicatorImpl::release_device_resources() {
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    device = device_;
  }
  if (device < 0) return;
  kernels::cuda::ScopedDevice on;
  (void)on.enter(device);  // if this fails CUDA is gone anyway: free what can be freed
  for (nccl::Comm* c : {nccl_.comm.get(), nccl_.retired.get()}) {
    if (c && nccl_.device_stream.get()) (void)c->order_after_me(nccl_.device_stream.get());
  }
  // While a gate of another communicator holds a stream, NCCL's frees are
  // put off (nccl::release); the stream those communicators were made on
  // must then outlive them, and is left to the process. Else every stop put
  // off is made first: freeing one waits for the whole GPU, the others'
  // calls included.
  if (!kernels::cuda::StreamGate::any_held()) {
    for (nccl::Comm* c : {nccl_.comm.get(), nccl_.retired.get()})
      if (c) c->finish_stop();
    for (auto& c : nccl_.graveyard) c->finish_stop();
  }
  bool freed = true;
  for (auto& c : nccl_.graveyard) freed = nccl::release(std::move(c), device) && freed;
  nccl_.graveyard.clear();
  freed = nccl::release(std::move(nccl_.comm), device) && freed;
  freed = nccl::release(std::move(nccl_.retired), device) && freed;
  if (!freed) {
    RCOLL_LOG(kInfo, "closing: a stream gate of another communicator holds a stream, so this one's NCCL communicators "
              "are destroyed once it opens");
    for (auto& s : nccl_.streams) s.leak();
  }
  nccl_.backup.buffer.reset();
  for (auto& k : nccl_.kept) k.buffer.reset();
  nccl_.replay_sink.reset();
  staging_.reset();
  nccl_.confirm_host.release();
  nccl_.device_event.reset();
  nccl_.device_stream.reset();
  // Destroying a stream with work queued returns at once; the work still runs.
  nccl_.verdict_stream.reset();
  for (auto& s : nccl_.streams) s.reset();
}

std::string CommunicatorImpl::diagnostics() const {
  const Counters c = counters();
  char head[512];
  std::snprintf(
      head, sizeof(head),
      "rcoll communicator '%s': rank %d of %d, epoch %lld, transport %s, %llu ops, %llu recoveries "
      "(%.3f s), "
      "%llu B sent, %llu B received, progress deadline %.1f s\nlast ops (oldest first):\n",
      options_.name.c_str(), rank_.load(), size_.load(), static_cast<long long>(c.epoch),
      c.transport.c_str(), static_cast<unsigned long long>(c.ops),
      static_cast<unsigned long long>(c.recoveries), c.recovery_seconds,
      static_cast<unsigned long long>(c.bytes_sent),
      static_cast<unsigned long long>(c.bytes_received),
      std::chrono::duration<double>(derived_budget(Op{}, tuner_.piece_bytes(), tuner_.window()))
          .count());
  return head + recorder_.dump(16);
}

Counters CommunicatorImpl::counters() const {
  Counters c;
  tally_.fill(c);
  c.epoch = epoch_;
  c.transport = transport_name_.load();
  c.fallbacks += nccl_.fallbacks;
  c.device_transport = !chain_.nccl() || nccl_.dropped ? "staged" : "nccl";
  c.nccl_ops = nccl_.ops;
  c.nccl_replays = nccl_.replays;
  c.nccl_stops_put_off = nccl_.stops_put_off;
  tuner_.fill(c);
  return c;
}

// ---------------------------------------------------------------- the facade

namespace {

Op make_op(OpKind kind, Buffer in, Buffer out, OpOptions options) {
  Op op;
  op.kind = kind;
  op.in = in;
  op.out = out;
  op.options = options;
  return op;
}

void wait_or_throw(const Work& w) { throw_if_error(w.wait()); }

}  // namespace

Communicator Communicator::create(Options options) {
  auto impl = CommunicatorImpl::create(std::move(options));
  return Communicator(std::move(impl).take());
}

Communicator::Communicator(std::unique_ptr<CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
const Options& Communicator::options() const { return impl_->options(); }

namespace {

Op send_op(Buffer data, int peer, OpOptions o) {
  Op op = make_op(OpKind::kSendRecv, data, data, o);
  op.is_send = true;
  op.peer = peer;
  return op;
}
Op recv_op(Buffer data, int peer, OpOptions o) {
  Op op = make_op(OpKind::kSendRecv, data, data, o);
  op.peer = peer;
  return op;
}
Op reducing_op(OpKind kind, Buffer in, Buffer out, ReduceOp reduce, OpOptions o) {
  Op op = make_op(kind, in, out, o);
  op.reduce = reduce;
  return op;
}
Op broadcast_op(Buffer data, int root, OpOptions o) {
  Op op = make_op(OpKind::kBroadcast, data, data, o);
  op.root = root;
  return op;
}
Op barrier_op(OpOptions o) {
  return make_op(OpKind::kBarrier, Buffer{nullptr, 0, DataType::kUint8}, Buffer{nullptr, 0, DataType::kUint8}, o);
}

constexpr auto kHere = CommunicatorImpl::Issue::kHereIfIdle;

}  // namespace

Work Communicator::send_async(Buffer data, int peer, OpOptions o) { return impl_->submit(send_op(data, peer, o)); }
Work Communicator::recv_async(Buffer data, int peer, OpOptions o) { return impl_->submit(recv_op(data, peer, o)); }
Work Communicator::group_async(std::span<const PeerOp> ops, OpOptions o) {
  if (ops.empty()) {
    auto done = std::make_shared<WorkState>();
    done->rank = rank();
    done->finish(Status());
    return Work(done);
  }
  Op carrier = make_op(OpKind::kNone, Buffer{nullptr, 0, DataType::kUint8},
                       Buffer{nullptr, 0, DataType::kUint8}, o);
  carrier.group = std::make_shared<std::vector<Op>>();
  carrier.group->reserve(ops.size());
  for (const PeerOp& p : ops)
    carrier.group->push_back(p.is_send ? send_op(p.data, p.peer, o) : recv_op(p.data, p.peer, o));
  return impl_->submit(std::move(carrier));
}
Work Communicator::allreduce_async(Buffer in, Buffer out, ReduceOp reduce, OpOptions o) {
  return impl_->submit(reducing_op(OpKind::kAllreduce, in, out, reduce, o));
}
Work Communicator::allgather_async(Buffer in, Buffer out, OpOptions o) {
  return impl_->submit(make_op(OpKind::kAllgather, in, out, o));
}
Work Communicator::reduce_scatter_async(Buffer in, Buffer out, ReduceOp reduce, OpOptions o) {
  return impl_->submit(reducing_op(OpKind::kReduceScatter, in, out, reduce, o));
}
Work Communicator::broadcast_async(Buffer data, int root, OpOptions o) { return impl_->submit(broadcast_op(data, root, o)); }
Work Communicator::barrier_async(OpOptions o) { return impl_->submit(barrier_op(o)); }

// Blocking ops run on the calling thread when the communicator is idle.
void Communicator::send(Buffer data, int peer, OpOptions o) { wait_or_throw(impl_->submit(send_op(data, peer, o), kHere)); }
void Communicator::recv(Buffer data, int peer, OpOptions o) { wait_or_throw(impl_->submit(recv_op(data, peer, o), kHere)); }
void Communicator::group(std::span<const PeerOp> ops, OpOptions o) {
  wait_or_throw(group_async(ops, o));
}
void Communicator::allreduce(Buffer data, ReduceOp reduce, OpOptions o) { allreduce(data, data, reduce, o); }
void Communicator::allreduce(Buffer in, Buffer out, ReduceOp reduce, OpOptions o) {
  wait_or_throw(impl_->submit(reducing_op(OpKind::kAllreduce, in, out, reduce, o), kHere));
}
void Communicator::allgather(Buffer in, Buffer out, OpOptions o) {
  wait_or_throw(impl_->submit(make_op(OpKind::kAllgather, in, out, o), kHere));
}
void Communicator::reduce_scatter(Buffer in, Buffer out, ReduceOp reduce, OpOptions o) {
  wait_or_throw(impl_->submit(reducing_op(OpKind::kReduceScatter, in, out, reduce, o), kHere));
}
void Communicator::broadcast(Buffer data, int root, OpOptions o) { wait_or_throw(impl_->submit(broadcast_op(data, root, o), kHere)); }
void Communicator::barrier(OpOptions o) { wait_or_throw(impl_->submit(barrier_op(o), kHere)); }

void Communicator::close() { impl_->close(); }
Counters Communicator::counters() const { return impl_->counters(); }
std::string Communicator::diagnostics() const { return impl_->diagnostics(); }

}  // namespace rcoll
