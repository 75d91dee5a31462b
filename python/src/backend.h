// rcoll as a PyTorch (c10d) process-group backend. One rcoll::Communicator per
// process group; every c10d op becomes one or more rcoll ops issued in call
// order, so rcoll's deadlines, liveness and in-process recovery apply to DDP,
// FSDP and plain torch.distributed calls without any change to them.
//
// Every op is asynchronous: a completion thread finishes each Work (copies
// staged outputs back, completes the future) as its core ops finish, in issue
// order. Ops on CUDA tensors run on the GPU (on NCCL when rcoll has it),
// ordered after the current stream, with ProcessGroupNCCL's stream semantics
// (work.h); the backend never copies them to the host.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "rcoll/rcoll.h"
#include "tensors.h"
#include "work.h"

namespace rcoll::torch_backend {

class RcollBackend : public c10d::Backend {
 public:
  RcollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  ~RcollBackend() override;

  const std::string getBackendName() const override { return "rcoll"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return issued_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Fails every op not yet complete at once (kAborted), then closes.
  void abort() override;
  // Waits for issued ops, then closes. Later ops raise.
  void shutdown() override;

  Counters counters() const;
  std::string diagnostics() const;

 private:
  // One c10d op in flight: the core ops behind it, what keeps their memory
  // alive, and what to do once they all succeeded (copy staged outputs back).
  struct Pending {
    std::vector<rcoll::Work> ops;
    std::vector<at::Tensor> keep;
    // Runs once the core ops succeeded; for device ops, queued on a side
    // stream that waits for their verdict (so it may run before they end).
    std::function<void()> finalize;
    c10::intrusive_ptr<RcollWork> work;
  };
  // A send or recv held back inside a coalescing group (batch_isend_irecv).
  struct Deferred {
    bool is_send;
    int peer;
    Staged tensor;
    c10::intrusive_ptr<RcollWork> work;
  };

  OpName who(const char* op) const { return OpName{op, getRank(), getSize()}; }
  Communicator& comm(const OpName& who);
  // `device`: where the op runs (work_device of its tensors).
  c10::intrusive_ptr<RcollWork> make_work(c10d::OpType type, const OpName& who, std::vector<at::Tensor> outputs,
                                          c10::Device device = c10::Device(at::kCPU));
  // A coalesced group of ops already launched, as one Work over `outputs`.
  Pending group_of(const OpName& w, std::vector<c10::intrusive_ptr<c10d::Work>> parts, const std::vector<at::Tensor>& outputs);
  // endCoalescing for a batch on one device (the host, or one GPU): one core
  // group (on a GPU, one NCCL group).
  c10::intrusive_ptr<c10d::Work> end_group_batch(const OpName& w, c10::Device device);
  // Hands an issued op to the completion thread.
  c10::intrusive_ptr<c10d::Work> launch(Pending p);
  void finish_pending(Pending& p);
  // Waits on the host for every core op of `p`; the first failure, or null.
  std::exception_ptr wait_core_ops(Pending& p);
  void completion_loop();
  // Uneven alltoall over byte blocks: agrees on the block sizes (a small
  // allgather), pads every block to the largest, and runs one core alltoall.
  c10::intrusive_ptr<c10d::Work> alltoallv(const OpName& who, c10d::OpType type, std::vector<at::Tensor> outputs,
                                           std::vector<Staged> sends, std::vector<Staged> recvs,
                                           std::function<void()> after);

  std::unique_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds wait_limit_;  // what a wait() with no timeout of its own waits at most
  // RCOLL_BLOCKING_WAIT=1 (or TORCH_NCCL_BLOCKING_WAIT=1): device ops' wait()
  // and futures wait on the host for the result, as host ops do.
  bool blocking_wait_ = false;
  std::atomic<uint64_t> issued_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> aborted_{false};

  bool coalescing_ = false;
  std::vector<Deferred> deferred_;
  std::vector<Pending> coalesced_;  // collectives issued inside the group

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<Pending> graveyard_;  // aborted ops: their memory lives until the communicator is closed
  bool stopping_ = false;
  std::thread completer_;
};

// The creator PyTorch calls (store, rank, world size, timeout).
c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 std::chrono::milliseconds timeout);
// Shuts down every backend this process made that is still alive: what
// rcoll.torch runs at interpreter exit (atexit), so that no backend thread is
// left to take the GIL while the interpreter finalizes, and every
// communicator says goodbye (its peers log no death). Call without the GIL.
void shutdown_all();

}  // namespace rcoll::torch_backend
