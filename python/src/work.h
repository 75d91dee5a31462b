// The Work PyTorch waits on for one rcoll op (or a group of them), and its
// future (what DDP's comm hooks chain on), completed by the backend's
// completion thread.
//
// Host tensors: the op completes once every core op behind it finished and
// outputs were copied back; then its future holds the output tensors, or the
// error.
//
// CUDA tensors, ProcessGroupNCCL's semantics: the future is completed as
// soon as the op's GPU work is queued, with its events recorded on a side
// stream that waits for rcoll's verdict on the op (Work::stream_wait), so
// anything chained on it, or queued on a stream after wait(), runs once the
// result is there: wait() blocks the host only until the op is queued. The
// Work's status (isCompleted, isSuccess, exception) follows once the host
// saw the op end. With blocking waits (RCOLL_BLOCKING_WAIT=1 or
// TORCH_NCCL_BLOCKING_WAIT=1) wait() and the future wait for that on the host.
#pragma once

#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace rcoll::torch_backend {

class RcollWork : public c10d::Work {
 public:
  // `what` names the op for messages ("rcoll allreduce on rank 1 of 4");
  // `timeout` bounds a wait() that names no timeout (the process group's plus
  // the straggler timeout: rcoll's own deadlines end every op before that).
  // `device`: where the op runs (a CUDA device: stream semantics, unless
  // `blocking_wait`).
  RcollWork(int rank, c10d::OpType type, std::string what, uint64_t seq, std::vector<at::Tensor> outputs,
            std::chrono::milliseconds timeout, c10::Device device, bool blocking_wait);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // The current stream waits for the result (device ops; host ops: nothing).
  void synchronize() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return seq_; }

  // Completes the work and its future at once: success when `error` is null.
  void complete(std::exception_ptr error);
  // Device ops with stream semantics: the future now (with the current
  // stream of the calling thread waiting for the op's verdict), the status
  // once the host saw the op end.
  void complete_future();
  void complete_status(std::exception_ptr error);
  const std::string& what() const { return what_; }
  c10::Device device() const { return device_; }
  bool stream_semantics() const { return device_.is_cuda() && !blocking_wait_; }

 private:
  // Host wait, up to `limit`, for the future (stream semantics) or the status.
  void wait_on_host(std::chrono::milliseconds limit);

  std::string what_;
  uint64_t seq_;
  std::vector<at::Tensor> outputs_;
  std::chrono::milliseconds timeout_;
  c10::Device device_;
  bool blocking_wait_;
  bool future_done_ = false;  // under mutex_
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A c10::DistBackendError with `message`, as an exception_ptr.
std::exception_ptr backend_error(const std::string& message);

}  // namespace rcoll::torch_backend
