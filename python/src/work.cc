#include "work.h"

#include <algorithm>

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

namespace rcoll::torch_backend {
namespace {

std::vector<c10::Device> devices_of(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Device> seen;
  for (const auto& t : tensors)
    if (t.defined() && !t.device().is_cpu() && std::find(seen.begin(), seen.end(), t.device()) == seen.end())
      seen.push_back(t.device());
  return seen;
}

}  // namespace

std::exception_ptr backend_error(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

RcollWork::RcollWork(int rank, c10d::OpType type, std::string what, uint64_t seq, std::vector<at::Tensor> outputs,
                     std::chrono::milliseconds timeout, c10::Device device, bool blocking_wait)
    : c10d::Work(rank, type), what_(std::move(what)), seq_(seq), outputs_(std::move(outputs)), timeout_(timeout),
      device_(device), blocking_wait_(blocking_wait),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices_of(outputs_))) {}

bool RcollWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool RcollWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr RcollWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

void RcollWork::wait_on_host(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool streams = stream_semantics();
  if (!cv_.wait_for(lock, limit, [&] { return completed_ || (streams && future_done_); })) {
    C10_THROW_ERROR(DistBackendError, what_ + " (op " + std::to_string(seq_) + "): not " +
                                          (streams ? "queued on the GPU" : "complete") + " after waiting " +
                                          std::to_string(limit.count()) +
                                          " ms; the op keeps running (rcoll's own progress deadline and recovery "
                                          "decide whether it fails) and can be waited for again");
  }
  if (exception_) std::rethrow_exception(exception_);
}

bool RcollWork::wait(std::chrono::milliseconds timeout) {
  wait_on_host(timeout == kNoTimeout ? timeout_ : timeout);
  // Device ops: the current stream waits for the future's events (queued on
  // a stream behind the op's verdict); the host does not wait for the result.
  if (device_.is_cuda()) {
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    future_->wait();
  }
  return true;
}

void RcollWork::synchronize() {
  if (!device_.is_cuda()) return;
  wait_on_host(timeout_);
  future_->wait();
}

void RcollWork::complete(std::exception_ptr error) {
  // The future first, then the flag: whoever sees the flag may read the
  // future at once.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    future_done_ = true;
  }
  finish(std::move(error));
}

void RcollWork::complete_future() {
  future_->markCompleted(c10::IValue(outputs_));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    future_done_ = true;
  }
  cv_.notify_all();
}

void RcollWork::complete_status(std::exception_ptr error) { finish(std::move(error)); }

}  // namespace rcoll::torch_backend
