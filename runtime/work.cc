#include <chrono>

#include "kernels/cuda_memory.h"
#include "rcoll/communicator.h"
#include "base/deadline.h"
#include "runtime/op.h"

namespace rcoll {

Status Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return Status(ErrorCode::kInvalidArgument, "wait() on an empty Work handle");
  std::unique_lock<std::mutex> lock(state_->mu);
  auto ready = [this] { return state_->done; };
  const Deadline deadline = Deadline::after(timeout);
  if (deadline.is_never()) {
    state_->cv.wait(lock, ready);
  } else if (!state_->cv.wait_until(lock, deadline.time(), ready)) {
    return Status(ErrorCode::kWaitTimeout, ErrorContext{state_->rank, -1, state_->seq, -1, ""},
                  "op " + std::to_string(state_->seq) + " still running after waiting " +
                      std::to_string(timeout.count()) + " ms; it keeps running and can be waited for again");
  }
  return state_->status;
}

Status Work::stream_wait(void* cuda_stream, std::chrono::milliseconds timeout) const {
  if (!state_) return Status(ErrorCode::kInvalidArgument, "stream_wait() on an empty Work handle");
  void* verdict = nullptr;
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    // Bounded as wait() is: by the op's own deadlines and recovery budget,
    // and by the caller's timeout.
    auto ready = [this] { return state_->done || state_->issued; };
    const Deadline deadline = Deadline::after(timeout);
    if (deadline.is_never()) {
      state_->cv.wait(lock, ready);
    } else if (!state_->cv.wait_until(lock, deadline.time(), ready)) {
      return Status(ErrorCode::kWaitTimeout, ErrorContext{state_->rank, -1, state_->seq, -1, ""},
                    "op " + std::to_string(state_->seq) + " neither done nor queued on the GPU after waiting " +
                        std::to_string(timeout.count()) + " ms; nothing was queued on the stream, and the op keeps " +
                        "running and can be waited for again");
    }
    // Done: the runtime saw the op's GPU work finish, so anything queued on
    // the stream from now on sees the result without a wait.
    if (state_->done) return state_->status;
    verdict = state_->verdict_event;
  }
  if (Status s = kernels::cuda::stream_wait_event(cuda_stream, verdict); !s.ok()) {
    return Status(s.code(), ErrorContext{state_->rank, -1, state_->seq, -1, "nccl"},
                  "op " + std::to_string(state_->seq) + ": making the caller's stream wait for its verdict: " + s.message() +
                      "; nothing was queued on that stream (the op goes on: wait() or status() tell its outcome)");
  }
  return Status();
}

bool Work::done() const {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

Status Work::status() const {
  if (!state_) return Status(ErrorCode::kInvalidArgument, "status() of an empty Work handle");
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done ? state_->status : Status();
}

uint64_t Work::seq() const { return state_ ? state_->seq : 0; }

}  // namespace rcoll
