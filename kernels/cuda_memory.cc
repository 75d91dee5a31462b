// CUDA runtime calls behind kernels/cuda_memory.h.
#include "kernels/cuda_memory.h"

#include <cuda_runtime.h>

#include "kernels/stream_gate.h"

namespace rcoll::kernels::cuda {
namespace {

Status failed(cudaError_t e, const std::string& what) {
  return Status(error_code(static_cast<int>(e)), what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

}  // namespace

bool built() { return true; }

ErrorCode error_code(int error) {
  switch (static_cast<cudaError_t>(error)) {
    // No driver, no device, or a driver too old: this host cannot run device
    // work at all, which is a capability of the host, not a bug or bad input.
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInitializationError:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemDriverMismatch:
      return ErrorCode::kUnsupported;
    // Sticky: the context is gone for good.
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
      return ErrorCode::kDevice;
    case cudaErrorMemoryAllocation:
      return ErrorCode::kUnsupported;  // out of device memory: retrying will not make room
    default:
      return ErrorCode::kTransport;
  }
}

bool thread_has_context() {
  // cuCtxGetCurrent through the runtime's driver entry point: no link to libcuda.
  using GetCurrent = int (*)(void**);
  static GetCurrent get = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<GetCurrent>(nullptr);
    }
    return reinterpret_cast<GetCurrent>(fn);
  }();
  void* ctx = nullptr;
  // Without the entry point, assume a context: putting a device back is the
  // conservative choice for a caller's thread.
  return get == nullptr || (get(&ctx) == 0 && ctx != nullptr);
}

Result<int> device_of(const void* p) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it for the next call
    return failed(e, "cudaPointerGetAttributes");
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string("the buffer is marked as CUDA memory but is ") +
                      (a.type == cudaMemoryTypeHost ? "pinned host memory" : "not known to CUDA (plain host memory?)"));
  }
  return a.device;
}

Status set_device(int device) {
  const cudaError_t e = cudaSetDevice(device);
  return e == cudaSuccess ? Status() : failed(e, "cudaSetDevice(" + std::to_string(device) + ")");
}

Result<int> current_device() {
  int d = -1;
  const cudaError_t e = cudaGetDevice(&d);
  if (e != cudaSuccess) return failed(e, "cudaGetDevice");
  return d;
}

Result<void*> stream_create() {
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return failed(e, "cudaStreamCreateWithFlags");
  return static_cast<void*>(s);
}

void stream_destroy(void* stream) {
  if (stream) (void)cudaStreamDestroy(as_stream(stream));
}

Result<void*> event_create() {
  cudaEvent_t ev = nullptr;
  const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return failed(e, "cudaEventCreateWithFlags");
  return static_cast<void*>(ev);
}

void event_destroy(void* event) {
  if (event) (void)cudaEventDestroy(as_event(event));
}

Status event_record(void* event, void* stream) {
  const cudaError_t e = cudaEventRecord(as_event(event), as_stream(stream));
  return e == cudaSuccess ? Status() : failed(e, "cudaEventRecord");
}

Status stream_wait_event(void* stream, void* event) {
  const cudaError_t e = cudaStreamWaitEvent(as_stream(stream), as_event(event), 0);
  return e == cudaSuccess ? Status() : failed(e, "cudaStreamWaitEvent");
}

Result<bool> event_done(void* event) {
  const cudaError_t e = cudaEventQuery(as_event(event));
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) return false;
  return failed(e, "cudaEventQuery");
}

Status wait_event(void* event, Deadline deadline, const std::string& what, Clock::duration max_sleep) {
  // Poll, yielding for 1 ms; then sleeping between polls, a little more the
  // longer it takes, so a long wait (the caller's own kernels still running)
  // does not hold a core.
  const auto started = Clock::now();
  PollPause pause(Millis(1), max_sleep);
  for (;;) {
    auto done = event_done(event);
    if (!done.ok()) return Status(done.status().code(), what + ": " + done.status().message());
    if (done.value()) return Status();
    if (deadline.expired()) {
      return Status(ErrorCode::kTimeout,
                    what + ": not done after " +
                        std::to_string(std::chrono::duration_cast<Millis>(Clock::now() - started).count()) + " ms");
    }
    pause();
  }
}

Status copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return Status();
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream));
  return e == cudaSuccess ? Status() : failed(e, "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes");
}

Status PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= capacity_) return Status();
  release();
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) return failed(e, "cudaHostAlloc of " + std::to_string(bytes) + " bytes");
  data_ = p;
  capacity_ = bytes;
  return Status();
}

size_t PinnedBuffer::release() {
  const size_t freed = capacity_;
  // cudaFreeHost waits for the whole GPU: not while a stream waits at a gate.
  if (void* p = data_) (void)StreamGate::free_when_none_held([p] { (void)cudaFreeHost(p); });
  data_ = nullptr;
  capacity_ = 0;
  return freed;
}

Status DeviceBuffer::reserve(size_t bytes, void* stream) {
  if (bytes <= capacity_) return Status();
  if (data_) (void)cudaFreeAsync(data_, as_stream(stream));
  data_ = nullptr;
  capacity_ = 0;
  void* p = nullptr;
  const cudaError_t e = cudaMallocAsync(&p, bytes, as_stream(stream));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // an out-of-memory is not sticky
    return failed(e, "cudaMallocAsync of " + std::to_string(bytes) + " bytes");
  }
  data_ = p;
  capacity_ = bytes;
  stream_ = stream;
  return Status();
}

void DeviceBuffer::reset() {
  if (data_ && cudaFreeAsync(data_, as_stream(stream_)) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFree(data_);  // the stream is unusable: the plain free (which may wait for the GPU)
  }
  data_ = nullptr;
  capacity_ = 0;
  stream_ = nullptr;
}

}  // namespace rcoll::kernels::cuda
