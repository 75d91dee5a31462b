#include "backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include <c10/util/Exception.h>

#include "store_adapter.h"

namespace rcoll::torch_backend {
namespace {

// PyTorch's timeout is the longest a caller waits for one op. rcoll's progress
// deadline (how long an op may move no bytes before the data plane counts as
// hung) is usually far shorter and stays derived; the timeout caps it, and
// caps how long a straggler and a recovery may take.
Options options_for(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
  Options o;
  o.rank = rank;
  o.world_size = size;
  o.store = std::make_shared<C10dStore>(store);
  o.name = "torch";
  if (timeout.count() > 0) {
    if (timeout < o.deadline_floor) o.op_timeout = timeout;
    o.straggler_timeout = std::min(o.straggler_timeout, timeout);
    o.recovery_timeout = std::min(o.recovery_timeout, timeout);
    o.store_timeout = std::min(o.store_timeout, timeout);
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

RcollBackend::RcollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout.count() > 0 ? timeout : kBackendDefaultTimeout) {
  try {
    comm_ = std::make_unique<Communicator>(Communicator::create(options_for(store, rank, size, timeout)));
  } catch (const Error& e) {
    C10_THROW_ERROR(DistBackendError, "rcoll: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                          " could not join the process group: " + e.status().to_string());
  }
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

c10::intrusive_ptr<RcollWork> RcollBackend::make_work(c10d::OpType type, const OpName& w, std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<RcollWork>(getRank(), type, w.str(), ++issued_, std::move(outputs), timeout_);
}

void RcollBackend::finish_pending(Pending& p) {
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
    if (!s.ok()) {
      p.work->complete(backend_error(p.work->what() + " failed: " + s.to_string()));
      return;
    }
  }
  try {
    if (p.finalize) p.finalize();
  } catch (...) {
    p.work->complete(std::current_exception());
    return;
  }
  p.work->complete(nullptr);
}

c10::intrusive_ptr<c10d::Work> RcollBackend::launch(Pending p, bool on_device) {
  c10::intrusive_ptr<c10d::Work> work = p.work;
  if (coalescing_) coalesced_.push_back(Pending{p.ops, {}, nullptr, nullptr});
  if (on_device) {
    finish_pending(p);  // staged through host: complete before returning
    return work;
  }
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
  auto work = make_work(c10d::OpType::SEND, w, tensors);
  if (coalescing_) {
    deferred_.push_back(Deferred{true, dst, s, work});
    return work;
  }
  Pending p{{comm(w).send_async(byte_buffer(s.host), dst)}, {s.host}, nullptr, work};
  return launch(std::move(p), any_on_device(tensors));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) {
  const OpName w = who("recv");
  check_single(tensors, w);
  TORCH_CHECK_VALUE(src >= 0 && src < getSize() && src != getRank(), w.str(), ": peer ", src, " is not another rank");
  Staged s = stage(tensors[0], false);
  auto work = make_work(c10d::OpType::RECV, w, tensors);
  if (coalescing_) {
    deferred_.push_back(Deferred{false, src, s, work});
    return work;
  }
  Pending p{{comm(w).recv_async(byte_buffer(s.host), src)}, {s.host}, [s] { s.copy_back(); }, work};
  return launch(std::move(p), any_on_device(tensors));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, who("recv").str(),
                              ": receiving from any source is not supported (rcoll matches every message to a named peer)");
}

c10::intrusive_ptr<c10d::Work> RcollBackend::barrier(const c10d::BarrierOptions&) {
  const OpName w = who("barrier");
  Pending p{{comm(w).barrier_async()}, {}, nullptr, make_work(c10d::OpType::BARRIER, w, {})};
  return launch(std::move(p), false);
}

// ------------------------------------------------------------------ coalescing

void RcollBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, who("startCoalescing").str(), ": a coalescing group is already open");
  coalescing_ = true;
  deferred_.clear();
  coalesced_.clear();
}

// rcoll runs ops one at a time in issue order, and a large send completes only
// once its receiver takes the bytes, so a batch issued as written (every rank
// sends first, say) could wait in a cycle. The batch's sends and receives are
// issued sorted by the pair of ranks they connect, (min, max), the lower rank
// sending first and the higher receiving first. Every rank sorts the same way,
// so the smallest pair still pending is at the front of both its ranks'
// queues: the batch always makes progress. Order per peer and direction is kept.
c10::intrusive_ptr<c10d::Work> RcollBackend::endCoalescing() {
  const OpName w = who("endCoalescing");
  TORCH_CHECK(coalescing_, w.str(), ": no coalescing group is open");
  coalescing_ = false;
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
  bool device = false;
  for (auto& c : coalesced_) batch.ops.insert(batch.ops.end(), c.ops.begin(), c.ops.end());
  std::vector<Pending> parts;
  for (auto& d : deferred_) {
    Staged s = d.tensor;
    Pending p{{}, {s.host}, nullptr, d.work};
    if (d.is_send) {
      p.ops.push_back(comm(w).send_async(byte_buffer(s.host), d.peer));
    } else {
      p.ops.push_back(comm(w).recv_async(byte_buffer(s.host), d.peer));
      p.finalize = [s] { s.copy_back(); };
    }
    batch.ops.push_back(p.ops.back());
    outputs.push_back(s.user);
    device = device || any_on_device({&s.user});
    parts.push_back(std::move(p));
  }
  deferred_.clear();
  coalesced_.clear();
  batch.work = make_work(c10d::OpType::COALESCED, w, outputs);
  // With device tensors everything is issued before anything is waited for
  // (in the sorted order, which cannot wait in a cycle).
  for (auto& p : parts) launch(std::move(p), device);
  return launch(std::move(batch), device);
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

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 std::chrono::milliseconds timeout) {
  return c10::make_intrusive<RcollBackend>(store, rank, size, timeout);
}

}  // namespace rcoll::torch_backend
