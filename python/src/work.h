// The Work PyTorch waits on for one rcoll op (or a group of them). It is
// completed by the backend once every core op behind it has finished and
// outputs have been copied back, and then its future holds the output tensors
// (what DDP's comm hooks chain on) or the error.
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
  // `timeout` bounds a wait() that names no timeout (the process group's).
  RcollWork(int rank, c10d::OpType type, std::string what, uint64_t seq, std::vector<at::Tensor> outputs,
            std::chrono::milliseconds timeout);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return seq_; }

  // Completes the work (and its future): success when `error` is null.
  void complete(std::exception_ptr error);
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  uint64_t seq_;
  std::vector<at::Tensor> outputs_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A c10::DistBackendError with `message`, as an exception_ptr.
std::exception_ptr backend_error(const std::string& message);

}  // namespace rcoll::torch_backend
