#include "rcoll/communicator.h"

#include <algorithm>
#include <csignal>
#include <string>
#include <thread>

#include "rcoll/version.h"
#include "runtime/communicator_impl.h"
#include "runtime/log.h"
#include "transports/tcp/tcp_transport.h"

namespace rcoll {

const char* version_string() { return "0.1.0 (transports: tcp)"; }

// ---------------------------------------------------------------- the runtime

Result<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::create(Options options) {
  if (Status s = apply_env_overrides(&options); !s.ok()) return s;
  std::vector<Fault> faults;
  if (auto spec = env_string("RCOLL_INJECT")) {
    auto parsed = parse_fault_spec(*spec);
    if (!parsed.ok()) return parsed.status();
    faults = std::move(parsed).value();
  }
  auto boot = bootstrap(options);
  if (!boot.ok()) return boot.status();
  std::unique_ptr<CommunicatorImpl> impl(new CommunicatorImpl(std::move(options), std::move(boot).value()));
  impl->faults_ = std::move(faults);
  for (const Fault& f : impl->faults_) {
    if (f.kind == FaultKind::kRandom) impl->random_state_ = f.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(impl->rank_) + 1;
  }
  if (!impl->faults_.empty()) {
    RCOLL_LOG(kWarn, "fault injection is on (RCOLL_INJECT=%s): %zu fault(s) planned", env_string("RCOLL_INJECT")->c_str(),
              impl->faults_.size());
  }
  if (Status s = impl->connect_epoch(0); !s.ok()) return s;
  impl->progress_ = std::thread([p = impl.get()] { p->progress_loop(); });
  return impl;
}

CommunicatorImpl::CommunicatorImpl(Options options, Bootstrap boot)
    : options_(std::move(options)), boot_(std::move(boot)), rank_(boot_.rank), size_(boot_.size),
      send_seq_(static_cast<size_t>(size_), 0), recv_seq_(static_cast<size_t>(size_), 0) {
  log::set_identity("rank " + std::to_string(rank_) + "/" + std::to_string(size_));
  if (options_.chunk_bytes > 0) tuning_.piece_bytes = options_.chunk_bytes;
  if (options_.pipeline_depth > 0) tuning_.window = options_.pipeline_depth;
  tuning_.allreduce = options_.allreduce_algorithm;
  tuning_.small_allreduce_bytes = options_.small_allreduce_bytes;
}

CommunicatorImpl::~CommunicatorImpl() { close(); }

// Every rank takes the next instance number of this communicator name, so a
// store shared by several communicators (or by successive ones with one name)
// keeps their keys apart.
Status CommunicatorImpl::connect_epoch(uint32_t epoch) {
  const std::string& t = options_.transport;
  if (t != "auto" && t != "tcp") {
    return Status(ErrorCode::kUnsupported, ErrorContext{rank_, -1, 0, epoch, t},
                  "transport '" + t + "' is not available in this build (available: tcp)");
  }
  if (!store_) {
    auto base = make_prefix_store(boot_.store, "rcoll/" + options_.name);
    auto ticket = base->add("instances", 1);
    if (!ticket.ok()) {
      return Status(ticket.status().code(), ErrorContext{rank_, -1, 0, epoch, ""},
                    "rank " + std::to_string(rank_) + " could not register with the " + boot_.store_description + ": " +
                        ticket.status().message());
    }
    const int64_t instance = (ticket.value() - 1) / size_;
    store_ = make_prefix_store(base, std::to_string(instance));
  }
  TcpConnectParams p;
  p.rank = rank_;
  p.size = size_;
  p.epoch = epoch;
  p.store = store_;
  p.ifname_spec = options_.socket_ifname;
  p.prefer_loopback = boot_.store_description.find("127.0.0.1") != std::string::npos ||
                      boot_.store_description.find("localhost") != std::string::npos ||
                      boot_.store_description.find("file store") != std::string::npos;
  p.job_token = boot_.job_token;
  p.socket_buffer_bytes = options_.socket_buffer_bytes > 0 ? options_.socket_buffer_bytes : 4u << 20;
  p.deadline = Deadline::after(options_.connect_timeout);
  for (Fault& f : faults_) {
    if (f.kind == FaultKind::kFailConnect && f.transport == "tcp" && f.count > 0) {
      --f.count;
      ++injected_;
      return Status(ErrorCode::kPeerUnreachable, ErrorContext{rank_, -1, 0, epoch, "tcp"},
                    "connect of epoch " + std::to_string(epoch) + " failed by fault injection (fail-connect)");
    }
  }
  auto t_or = connect_tcp_transport(p);
  if (!t_or.ok()) return t_or.status();
  transport_ = std::move(t_or).value();
  epoch_ = epoch;
  RCOLL_LOG(kInfo, "communicator '%s' ready: %d ranks, epoch %u, transport tcp, store: %s, identity from %s",
            options_.name.c_str(), size_, epoch, boot_.store_description.c_str(), boot_.identity_source.c_str());
  return Status();
}

Work CommunicatorImpl::submit(Op op) {
  auto work = std::make_shared<WorkState>();
  op.work = work;
  std::unique_lock<std::mutex> lock(mu_);
  op.seq = ++next_seq_;
  work->seq = op.seq;
  if (closing_ || closed_) {
    work->finish(Status(ErrorCode::kClosed, ErrorContext{rank_, -1, op.seq, epoch_, ""},
                        op.describe() + ": the communicator is closed"));
    return Work(work);
  }
  if (Status s = validate(op, rank_, size_); !s.ok()) {
    // Bad input never consumes a sequence number peers would wait for.
    --next_seq_;
    work->finish(std::move(s));
    return Work(work);
  }
  if (op.kind == OpKind::kSendRecv) {
    op.match_seq = op.is_send ? ++send_seq_[static_cast<size_t>(op.peer)] : ++recv_seq_[static_cast<size_t>(op.peer)];
  } else {
    op.match_seq = ++collective_seq_;
  }
  queue_.push_back(std::move(op));
  lock.unlock();
  cv_.notify_one();
  return Work(work);
}

Clock::duration CommunicatorImpl::progress_budget(const Op& op) const {
  Millis timeout = op.options.timeout.count() > 0 ? op.options.timeout : options_.op_timeout;
  if (timeout.count() > 0) return timeout >= Millis(std::chrono::hours(24 * 365)) ? Clock::duration(std::chrono::hours(24 * 365)) : Clock::duration(timeout);
  // Until link speed is measured: a floor that outlasts scheduling hiccups.
  return std::chrono::seconds(30);
}

Status CommunicatorImpl::on_stall(const Op& op, int peer, Clock::duration stalled_for) {
  const auto ms = std::chrono::duration_cast<Millis>(stalled_for).count();
  return Status(ErrorCode::kTimeout, ErrorContext{rank_, peer, op.seq, epoch_, transport_->name()},
                op.describe() + ": no bytes moved for " + std::to_string(ms) + " ms (the op's progress deadline)");
}

Status CommunicatorImpl::interrupted() { return Status(); }

Status CommunicatorImpl::execute(const Op& op) {
  if (!fatal_.ok()) {
    return Status(ErrorCode::kAborted, ErrorContext{rank_, fatal_.context().peer, op.seq, epoch_, transport_->name()},
                  op.describe() + " not run: the data plane of epoch " + std::to_string(epoch_) +
                      " was aborted by an earlier failure (" + fatal_.to_string() + ")");
  }
  AlgoContext ctx(*transport_, op, tuning_, scratch_);
  ctx.set_guard(this, progress_budget(op));
  if (!faults_.empty()) inject_before(op, ctx);
  Status s;
  switch (op.kind) {
    case OpKind::kSendRecv: s = op.is_send ? run_send(ctx) : run_recv(ctx); break;
    case OpKind::kAllreduce: s = run_allreduce(ctx); break;
    case OpKind::kAllgather: s = run_allgather(ctx); break;
    case OpKind::kReduceScatter: s = run_reduce_scatter(ctx); break;
    case OpKind::kBroadcast: s = run_broadcast(ctx); break;
    case OpKind::kBarrier: s = run_barrier(ctx); break;
    case OpKind::kNone: s = Status(ErrorCode::kInternal, "op of kind none"); break;
  }
  bytes_sent_ = transport_->bytes_sent();
  bytes_received_ = transport_->bytes_received();
  if (!s.ok()) {
    fatal_ = s;
    RCOLL_LOG(kError, "%s; the data plane of epoch %u is aborted and later ops on this communicator will fail",
              s.to_string().c_str(), epoch_);
  }
  return s;
}

namespace {

// The first peer an op talks to: the link a close-link fault without a peer breaks.
int first_peer(const Op& op, int rank, int size) {
  if (op.kind == OpKind::kSendRecv) return op.peer;
  return (rank + 1) % size;
}

uint64_t next_random(uint64_t* state) {  // splitmix64
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void CommunicatorImpl::inject_before(const Op& op, AlgoContext& ctx) {
  for (const Fault& planned : faults_) {
    Fault f = planned;
    if (f.kind == FaultKind::kRandom) {
      const double draw = static_cast<double>(next_random(&random_state_) >> 11) / 9007199254740992.0;
      if (draw >= f.rate || size_ < 2) continue;
      f.kind = f.random_kinds[next_random(&random_state_) % f.random_kinds.size()];
      f.rank = rank_;
      f.op = op.seq;
      f.ms = 50;
    }
    if (f.kind == FaultKind::kFailConnect || (f.rank != -1 && f.rank != rank_) || f.op != op.seq) continue;
    ++injected_;
    const int peer = f.peer >= 0 ? f.peer : first_peer(op, rank_, size_);
    switch (f.kind) {
      case FaultKind::kStall:
        RCOLL_LOG(kWarn, "fault injection: stalling %lld ms before %s", static_cast<long long>(f.ms), op.describe().c_str());
        std::this_thread::sleep_for(Millis(f.ms));
        break;
      case FaultKind::kKill:
        RCOLL_LOG(kWarn, "fault injection: killing this process (SIGKILL) at %s", op.describe().c_str());
        std::raise(SIGKILL);
        break;
      case FaultKind::kCloseLink:
        RCOLL_LOG(kWarn, "fault injection: closing the link to rank %d at %s", peer, op.describe().c_str());
        transport_->break_link(peer);
        break;
      case FaultKind::kDelayChunk: ctx.inject_first_send(f.ms, false); break;
      case FaultKind::kDropChunk: ctx.inject_first_send(0, true); break;
      case FaultKind::kFailConnect:
      case FaultKind::kRandom: break;
    }
  }
}

void CommunicatorImpl::progress_loop() {
  log::set_thread_identity("rank " + std::to_string(rank_) + "/" + std::to_string(size_));
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty() || closing_; });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    Status s = execute(op);
    ++ops_done_;
    op.work->finish(std::move(s));
  }
}

void CommunicatorImpl::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closing_ = true;
  }
  cv_.notify_all();
  if (progress_.joinable()) progress_.join();
  transport_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

Counters CommunicatorImpl::counters() const {
  Counters c;
  c.ops = ops_done_;
  c.bytes_sent = bytes_sent_;
  c.bytes_received = bytes_received_;
  c.epoch = epoch_;
  c.faults_injected = injected_;
  c.transport = "tcp";
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

Work Communicator::send_async(Buffer data, int peer, OpOptions o) {
  Op op = make_op(OpKind::kSendRecv, data, data, o);
  op.is_send = true;
  op.peer = peer;
  return impl_->submit(std::move(op));
}
Work Communicator::recv_async(Buffer data, int peer, OpOptions o) {
  Op op = make_op(OpKind::kSendRecv, data, data, o);
  op.peer = peer;
  return impl_->submit(std::move(op));
}
Work Communicator::allreduce_async(Buffer in, Buffer out, ReduceOp reduce, OpOptions o) {
  Op op = make_op(OpKind::kAllreduce, in, out, o);
  op.reduce = reduce;
  return impl_->submit(std::move(op));
}
Work Communicator::allgather_async(Buffer in, Buffer out, OpOptions o) {
  return impl_->submit(make_op(OpKind::kAllgather, in, out, o));
}
Work Communicator::reduce_scatter_async(Buffer in, Buffer out, ReduceOp reduce, OpOptions o) {
  Op op = make_op(OpKind::kReduceScatter, in, out, o);
  op.reduce = reduce;
  return impl_->submit(std::move(op));
}
Work Communicator::broadcast_async(Buffer data, int root, OpOptions o) {
  Op op = make_op(OpKind::kBroadcast, data, data, o);
  op.root = root;
  return impl_->submit(std::move(op));
}
Work Communicator::barrier_async(OpOptions o) {
  return impl_->submit(make_op(OpKind::kBarrier, Buffer{nullptr, 0, DataType::kUint8}, Buffer{nullptr, 0, DataType::kUint8}, o));
}

void Communicator::send(Buffer data, int peer, OpOptions o) { wait_or_throw(send_async(data, peer, o)); }
void Communicator::recv(Buffer data, int peer, OpOptions o) { wait_or_throw(recv_async(data, peer, o)); }
void Communicator::allreduce(Buffer data, ReduceOp reduce, OpOptions o) { wait_or_throw(allreduce_async(data, data, reduce, o)); }
void Communicator::allreduce(Buffer in, Buffer out, ReduceOp reduce, OpOptions o) { wait_or_throw(allreduce_async(in, out, reduce, o)); }
void Communicator::allgather(Buffer in, Buffer out, OpOptions o) { wait_or_throw(allgather_async(in, out, o)); }
void Communicator::reduce_scatter(Buffer in, Buffer out, ReduceOp reduce, OpOptions o) {
  wait_or_throw(reduce_scatter_async(in, out, reduce, o));
}
void Communicator::broadcast(Buffer data, int root, OpOptions o) { wait_or_throw(broadcast_async(data, root, o)); }
void Communicator::barrier(OpOptions o) { wait_or_throw(barrier_async(o)); }

void Communicator::close() { impl_->close(); }
Counters Communicator::counters() const { return impl_->counters(); }

}  // namespace rcoll
