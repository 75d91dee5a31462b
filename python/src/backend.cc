#include "backend.h"

#include <c10/util/Exception.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "store_adapter.h"
#include "streams.h"

namespace rcoll::torch_backend {
namespace {

// PyTorch's timeout is the longest a caller waits for one op. rcoll's progress
// deadline (how long an op may move no bytes before the data plane counts as
// hung) is usually far shorter and stays derived; the timeout bounds an op's
// hangs across its recoveries (hang_timeout, which also caps the deadline),
// a recovery, and a silent rank.
Options options_for(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
  Options o;
  o.rank = rank;
  o.world_size = size;
  o.store = std::make_shared<C10dStore>(store);
  o.name = "torch";
  if (timeout.count() > 0) {
    // The process group's timeout bounds hangs: no slice of the op completing
    // while every rank is in it (across recoveries), a rank that went silent
    // (the recovery waits for it that long). A rank that is merely late (in
    // compute, heartbeating) is waited for up to the straggler timeout of its
    // own (RCOLL_STRAGGLER_TIMEOUT_S, 30 min unless set), not capped by it:
    // users raise the timeout because a rank is slow, and that rank should
    // not then cost the job. Creation waits for late ranks as long (join).
    if (std::getenv("RCOLL_HANG_TIMEOUT_MS") == nullptr) o.hang_timeout = timeout;
    o.recovery_timeout = std::min(o.recovery_timeout, timeout);
    o.store_timeout = std::min(o.store_timeout, timeout);
    o.join_timeout = timeout;
  }
  // A job whose ranks all share one host (torchrun: LOCAL_WORLD_SIZE equals
  // WORLD_SIZE, on every rank alike) runs TCP first. There UCX's busy polling
  // takes cores the ranks' own compute needs: DDP on a 25M-parameter MLP at 4
  // ranks on 2 cores, median step time over alternating rounds, UCX 1.22x
  // gloo's, TCP first 0.93-1.00x (bench/ddp_step_time.sh, bench/RESULTS.md
  // stop 41). RCOLL_TRANSPORT(S) still pick.
  // The world group only: a subgroup's ranks cannot tell from these whether
  // they share a host, and keep the default chain (alike on all of them).
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const char* world = std::getenv("WORLD_SIZE");
  if (std::getenv("RCOLL_TRANSPORT") == nullptr && std::getenv("RCOLL_TRANSPORTS") == nullptr &&
      local != nullptr && world != nullptr && std::atoi(world) == size &&
      std::atoi(local) == size && size > 1) {
    o.transports = {"nccl", "tcp", "ucx"};
    o.transports_reason =
        "TCP first: every rank on one host (LOCAL_WORLD_SIZE = WORLD_SIZE), where UCX's polling "
        "competes with "
        "the ranks' compute for the cores (RCOLL_TRANSPORT=ucx to pick it)";
  }
  // More ranks on this host than CPUs for them: a wait that polls before it
  // sleeps takes the core a computing rank needs. DDP as above, alternating
  // rounds: 4 ranks on 2 CPUs 0.97-0.99x gloo's step time polling 50 us,
  // 0.94x not polling (16 rounds); 2 ranks on 2 CPUs 0.95x either way
  // (bench/RESULTS.md, stop 42). The CPUs are this process's (its affinity):
  // ranks bound to CPUs of their own each see theirs, and do not poll
  // either. RCOLL_SPIN_US still sets it.
  if (std::getenv("RCOLL_SPIN_US") == nullptr && local != nullptr) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int here = std::atoi(local);
    if (::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && here > CPU_COUNT(&cpus)) {
      o.spin_us = 0;
      const std::string why = std::to_string(here) + " ranks on this host, " +
                              std::to_string(CPU_COUNT(&cpus)) +
                              " CPUs for this one: waits sleep at once, no polling (RCOLL_SPIN_US "
                              "to set it)";
      o.transports_reason += (o.transports_reason.empty() ? "" : "; ") + why;
    }
  }
  // A job on one host (torchrun --standalone, MASTER_ADDR=localhost) talks over loopback.
  const char* master = std::getenv("MASTER_ADDR");
  if (std::getenv("RCOLL_SOCKET_IFNAME") == nullptr && master != nullptr) {
    const std::string m = master;
    if (m == "127.0.0.1" || m == "localhost" || m == "::1") o.socket_ifname = "=lo";
  }
  return o;
}

}  // namespace

static bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == "1";
}

RcollBackend::RcollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout.count() > 0 ? timeout : kBackendDefaultTimeout),
      blocking_wait_(env_flag("RCOLL_BLOCKING_WAIT") || env_flag("TORCH_NCCL_BLOCKING_WAIT")) {
  try {
    comm_ = std::make_unique<Communicator>(Communicator::create(options_for(store, rank, size, timeout)));
  } catch (const Error& e) {
    C10_THROW_ERROR(DistBackendError, "rcoll: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                          " could not join the process group: " + e.status().to_string());
  }
  // A wait() that names no timeout outlasts a straggler rcoll still waits for
  // (rcoll's own deadlines bound every other case).
  wait_limit_ = timeout_ + std::chrono::duration_cast<std::chrono::milliseconds>(
                               comm_->options().straggler_timeout);
  completer_ = std::thread([this] { completion_loop(); });
}

RcollBackend::~RcollBackend() {
  try {
    shutdown();
  } catch (...) {
  }
}

c10::intrusive_ptr<c10d::Backend::Options> RcollBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("rcoll", timeout_);
}

Communicator& RcollBackend::comm(const OpName& w) {
  TORCH_CHECK(!aborted_, w.str(), ": the process group was aborted");
  TORCH_CHECK(!closed_ && comm_, w.str(), ": the process group was shut down");
  return *comm_;
}

c10::intrusive_ptr<RcollWork> RcollBackend::make_work(c10d::OpType type, const OpName& w, std::vector<at::Tensor> outputs,
                                                      c10::Device device) {
  return c10::make_intrusive<RcollWork>(getRank(), type, w.str(), ++issued_, std::move(outputs),
                                        wait_limit_, device, blocking_wait_);
}

std::exception_ptr RcollBackend::wait_core_ops(Pending& p) {
  // Every op to its end, even after one failed: the tensors (p.keep) must
  // outlive them all. The first failure is the work's.
  std::exception_ptr first;
  for (auto& op : p.ops) {
    Status s;
    // Core ops are bounded by rcoll's deadlines; the slices let an abort cut in.
    for (;;) {
      s = op.wait(std::chrono::milliseconds(100));
      if (s.code() != ErrorCode::kWaitTimeout) break;
      if (aborted_) {
        s = Status(ErrorCode::kAborted, "the process group was aborted while the op was in flight");
        break;
      }
    }
    if (!s.ok() && !first) first = backend_error(p.work->what() + " failed: " + s.to_string());
  }
  return first;
}

void RcollBackend::finish_pending(Pending& p) {
  RcollWork& work = *p.work;
  if (!work.stream_semantics()) {
    // The host waits for the result; device ops then finish on a side
    // stream, where the future's events are recorded.
    if (std::exception_ptr e = wait_core_ops(p)) {
      work.complete(e);
      return;
    }
    c10::OptionalStreamGuard side;
    if (work.device().is_cuda()) side.reset_stream(pool_stream(work.device()));
    try {
      // What the side stream reads or writes (a staged result copied back)
      // must not be handed out again before it is past it.
      if (auto on = side.current_stream()) {
        for (const auto& t : p.keep)
          if (t.defined() && t.is_cuda()) t.record_stream(*on);
      }
      if (p.finalize) p.finalize();
    } catch (...) {
      work.complete(std::current_exception());
      return;
    }
    work.complete(nullptr);
    return;
  }
  // Stream semantics: a side stream waits for each op's verdict (the host
  // only until the op is queued); what follows the op is queued there, and
  // the future's events are recorded behind it.
  const c10::Stream side = pool_stream(work.device());
  // On an error the core ops may still be running: the work completes once
  // the host saw them end, so neither their tensors (p.keep) nor the
  // caller's reuse of its buffers can race them.
  auto fail = [&](std::exception_ptr e) {
    (void)wait_core_ops(p);
    work.complete(e);
  };
  for (auto& op : p.ops) {
    // In slices, so that an abort cuts into a wait for an op not yet queued.
    Status s;
    for (;;) {
      s = op.stream_wait(native(side), std::chrono::milliseconds(100));
      if (s.code() != ErrorCode::kWaitTimeout) break;
      if (aborted_) {
        s = Status(ErrorCode::kAborted, "the process group was aborted while the op was in flight");
        break;
      }
    }
    if (!s.ok()) {
      fail(backend_error(work.what() + " failed: " + s.to_string()));
      return;
    }
  }
  {
    c10::StreamGuard guard(side);
    try {
      // The caching allocator must not hand this memory out again before the
      // side stream is past it (what finalize queues there included).
      for (const auto& t : p.keep)
        if (t.defined() && t.is_cuda()) t.record_stream(side);
      if (p.finalize) p.finalize();
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    work.complete_future();
  }
  // The tensors stay alive (p.keep) until the host saw the ops end.
  work.complete_status(wait_core_ops(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::launch(Pending p) {
  c10::intrusive_ptr<c10d::Work> work = p.work;
  if (coalescing_) coalesced_.push_back(Pending{p.ops, {}, nullptr, nullptr});
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(p));
  }
  cv_.notify_one();
  return work;
}

void RcollBackend::completion_loop() {
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      p = std::move(pending_.front());
      pending_.pop_front();
    }
    finish_pending(p);
    if (aborted_) {
      std::lock_guard<std::mutex> lock(mu_);
      graveyard_.push_back(std::move(p));
    }
  }
}

// ------------------------------------------------------------------ point to point

c10::intrusive_ptr<c10d::Work> RcollBackend::send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) {
  const OpName w = who("send");
  check_single(tensors, w);
  TORCH_CHECK_VALUE(dst >= 0 && dst < getSize() && dst != getRank(), w.str(), ": peer ", dst, " is not another rank");
  Staged s = stage(tensors[0], true);
  auto work = make_work(c10d::OpType::SEND, w, tensors, work_device(tensors[0]));
  if (coalescing_) {
    deferred_.push_back(Deferred{true, dst, s, work});
    return work;
  }
  Pending p{{comm(w).send_async(byte_buffer(s.work), dst, op_options(s.work))}, {s.user, s.work}, nullptr, work};
  return launch(std::move(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) {
  const OpName w = who("recv");
  check_single(tensors, w);
  TORCH_CHECK_VALUE(src >= 0 && src < getSize() && src != getRank(), w.str(), ": peer ", src, " is not another rank");
  Staged s = stage(tensors[0], false);
  auto work = make_work(c10d::OpType::RECV, w, tensors, work_device(tensors[0]));
  if (coalescing_) {
    deferred_.push_back(Deferred{false, src, s, work});
    return work;
  }
  Pending p{{comm(w).recv_async(byte_buffer(s.work), src, op_options(s.work))}, {s.user, s.work}, [s] { s.copy_back(); },
            work};
  return launch(std::move(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, who("recv").str(),
                              ": receiving from any source is not supported (rcoll matches every message to a named peer)");
}

c10::intrusive_ptr<c10d::Work> RcollBackend::barrier(const c10d::BarrierOptions&) {
  const OpName w = who("barrier");
  Pending p{{comm(w).barrier_async()}, {}, nullptr, make_work(c10d::OpType::BARRIER, w, {})};
  return launch(std::move(p));
}

// ------------------------------------------------------------------ coalescing

void RcollBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, who("startCoalescing").str(), ": a coalescing group is already open");
  coalescing_ = true;
  deferred_.clear();
  coalesced_.clear();
}

// A batch (batch_isend_irecv) on the host or on one GPU is one core group
// (Communicator::group_async): its sends and receives progress together, as
// NCCL's group does (on a GPU it is one NCCL group).
//
// A batch whose tensors are on different devices cannot be one group: its
// ops run one by one, and rcoll runs ops one at a time in issue order,
// where a large send completes only once its receiver takes the bytes: a
// batch issued as written (every rank sends first, say) could wait in a
// cycle. Those are issued sorted by the pair of ranks they connect, (min,
// max), the lower rank sending first and the higher receiving first. Every
// rank sorts the same way, so the smallest pair still pending is at the
// front of both its ranks' queues: the batch always makes progress, one
// pair at a time. Order per peer and direction is kept.
c10::intrusive_ptr<c10d::Work> RcollBackend::endCoalescing() {
  const OpName w = who("endCoalescing");
  TORCH_CHECK(coalescing_, w.str(), ": no coalescing group is open");
  coalescing_ = false;
  if (!deferred_.empty()) {
    const c10::Device device = deferred_.front().tensor.work.device();
    const bool one_device = std::all_of(deferred_.begin(), deferred_.end(), [&](const Deferred& d) {
      return d.tensor.work.device() == device;
    });
    if (one_device) return end_group_batch(w, device);
  }
  const int me = getRank();
  std::stable_sort(deferred_.begin(), deferred_.end(), [me](const Deferred& a, const Deferred& b) {
    auto key = [me](const Deferred& d) {
      const bool lower = me < d.peer;
      const int first = (lower == d.is_send) ? 0 : 1;  // lower: sends first; higher: receives first
      return std::tuple<int, int, int>(std::min(me, d.peer), std::max(me, d.peer), first);
    };
    return key(a) < key(b);
  });
  Pending batch{{}, {}, nullptr, nullptr};
  std::vector<at::Tensor> outputs;
  c10::Device device(at::kCPU);
  for (auto& c : coalesced_) batch.ops.insert(batch.ops.end(), c.ops.begin(), c.ops.end());
  std::vector<Pending> parts;
  for (auto& d : deferred_) {
    Staged s = d.tensor;
    Pending p{{}, {s.user, s.work}, nullptr, d.work};
    if (d.is_send) {
      p.ops.push_back(comm(w).send_async(byte_buffer(s.work), d.peer, op_options(s.work)));
    } else {
      p.ops.push_back(comm(w).recv_async(byte_buffer(s.work), d.peer, op_options(s.work)));
      p.finalize = [s] { s.copy_back(); };
    }
    batch.ops.push_back(p.ops.back());
    outputs.push_back(s.user);
    if (s.work.is_cuda()) device = s.work.device();
    parts.push_back(std::move(p));
  }
  deferred_.clear();
  coalesced_.clear();
  batch.work = make_work(c10d::OpType::COALESCED, w, outputs, device);
  // Everything is issued before anything is waited for (in the sorted
  // order, which cannot wait in a cycle).
  for (auto& p : parts) launch(std::move(p));
  return launch(std::move(batch));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::end_group_batch(const OpName& w, c10::Device device) {
  std::vector<rcoll::PeerOp> members;
  members.reserve(deferred_.size());
  for (const Deferred& d : deferred_) {
    const Buffer b = byte_buffer(d.tensor.work);
    members.push_back(d.is_send ? rcoll::PeerOp::send(b, d.peer) : rcoll::PeerOp::recv(b, d.peer));
  }
  // On a GPU: ordered after the current stream's work, as each op is (op_options).
  const rcoll::Work group = comm(w).group_async(members, op_options(deferred_.front().tensor.work));
  Pending batch{{}, {}, nullptr, nullptr};
  for (auto& c : coalesced_) batch.ops.insert(batch.ops.end(), c.ops.begin(), c.ops.end());
  batch.ops.push_back(group);
  std::vector<at::Tensor> outputs;
  std::vector<Pending> parts;
  for (auto& d : deferred_) {
    Staged s = d.tensor;
    Pending p{{group}, {s.user, s.work}, nullptr, d.work};
    if (!d.is_send) p.finalize = [s] { s.copy_back(); };
    outputs.push_back(s.user);
    parts.push_back(std::move(p));
  }
  deferred_.clear();
  coalesced_.clear();
  batch.work = make_work(c10d::OpType::COALESCED, w, outputs, device);
  for (auto& p : parts) launch(std::move(p));
  return launch(std::move(batch));
}

// ------------------------------------------------------------------ lifecycle

void RcollBackend::abort() {
  aborted_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& p : pending_) {
      p.work->complete(backend_error(p.work->what() + ": the process group was aborted"));
      graveyard_.push_back(std::move(p));  // the core op may still touch its memory until close
    }
    pending_.clear();
  }
  shutdown();
}

void RcollBackend::shutdown() {
  if (closed_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (completer_.joinable()) completer_.join();
  if (comm_) comm_->close();
  graveyard_.clear();
}

Counters RcollBackend::counters() const { return comm_ ? comm_->counters() : Counters{}; }
std::string RcollBackend::diagnostics() const { return comm_ ? comm_->diagnostics() : std::string("rcoll: no communicator"); }

namespace {

// Every backend this process made, for shutdown_all() at exit.
std::mutex registry_mu;
std::vector<c10::weak_intrusive_ptr<RcollBackend>> registry;

}  // namespace

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 std::chrono::milliseconds timeout) {
  auto backend = c10::make_intrusive<RcollBackend>(store, rank, size, timeout);
  std::lock_guard<std::mutex> lock(registry_mu);
  std::erase_if(registry, [](const auto& w) { return w.expired(); });
  registry.emplace_back(backend);
  return backend;
}

void shutdown_all() {
  std::vector<c10::intrusive_ptr<RcollBackend>> alive;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    for (auto& w : registry)
      if (auto b = w.lock()) alive.push_back(std::move(b));
    registry.clear();
  }
  for (auto& b : alive) {
    try {
      b->shutdown();
    } catch (...) {
      // At exit: a backend that cannot close cleanly must not stop the others.
    }
  }
}

}  // namespace rcoll::torch_backend
