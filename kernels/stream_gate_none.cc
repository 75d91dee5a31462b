// kernels/stream_gate.h in a build without the CUDA toolkit: there is no gate.
#include "kernels/stream_gate.h"

namespace rcoll::kernels::cuda {

Result<std::unique_ptr<StreamGate>> StreamGate::create(uint32_t) {
  return Status(ErrorCode::kUnsupported, "this build of rcoll has no CUDA (built without the CUDA toolkit)");
}
StreamGate::~StreamGate() = default;
void StreamGate::open_through(uint64_t) {}
uint32_t StreamGate::opened() const { return 0; }
void StreamGate::hold(uint64_t) {}
bool StreamGate::any_held() { return false; }
bool StreamGate::free_when_none_held(std::function<void()> free) {
  free();
  return true;
}
bool StreamGate::free_if_none_held(const std::function<void()>& free) {
  free();
  return true;
}
void StreamGate::free_deferred() {}
Status StreamGate::enqueue_wait(void*, uint64_t) const {
  return Status(ErrorCode::kUnsupported, "this build of rcoll has no CUDA (built without the CUDA toolkit)");
}

}  // namespace rcoll::kernels::cuda
