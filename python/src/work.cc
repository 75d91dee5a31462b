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
                     std::chrono::milliseconds timeout)
    : c10d::Work(rank, type), what_(std::move(what)), seq_(seq), outputs_(std::move(outputs)), timeout_(timeout),
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

bool RcollWork::wait(std::chrono::milliseconds timeout) {
  const auto limit = timeout == kNoTimeout ? timeout_ : timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, limit, [this] { return completed_; })) {
    C10_THROW_ERROR(DistBackendError, what_ + " (op " + std::to_string(seq_) + "): not complete after waiting " +
                                          std::to_string(limit.count()) +
                                          " ms; the op keeps running (rcoll's own progress deadline and recovery "
                                          "decide whether it fails) and can be waited for again");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void RcollWork::complete(std::exception_ptr error) {
  // The future first: whoever returns from wait() may read it at once.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(std::move(error));
}

}  // namespace rcoll::torch_backend
