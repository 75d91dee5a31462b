// kernels/cuda_memory.h in a build without the CUDA toolkit: every call says so.
#include "kernels/cuda_memory.h"

namespace rcoll::kernels::cuda {
namespace {

Status none() { return Status(ErrorCode::kUnsupported, "this build of rcoll has no CUDA (built without the CUDA toolkit)"); }

}  // namespace

bool built() { return false; }
Result<int> device_of(const void*) { return none(); }
Status set_device(int) { return none(); }
Result<int> current_device() { return none(); }
Result<void*> stream_create() { return none(); }
void stream_destroy(void*) {}
Result<void*> event_create() { return none(); }
void event_destroy(void*) {}
Status event_record(void*, void*) { return none(); }
Status stream_wait_event(void*, void*) { return none(); }
Result<bool> event_done(void*) { return none(); }
Status wait_event(void*, Deadline, const std::string&, Clock::duration) { return none(); }
Status copy_async(void*, const void*, size_t, void*) { return none(); }
Status PinnedBuffer::reserve(size_t) { return none(); }
size_t PinnedBuffer::release() { return 0; }
Status DeviceBuffer::reserve(size_t, void*) { return none(); }
void DeviceBuffer::reset() {}
ErrorCode error_code(int) { return ErrorCode::kUnsupported; }
bool thread_has_context() { return false; }

}  // namespace rcoll::kernels::cuda
