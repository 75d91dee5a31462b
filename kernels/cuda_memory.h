// Device memory, streams, events and pinned host memory for the layers above,
// without CUDA headers: streams and events travel as void* (a cudaStream_t /
// cudaEvent_t; a null stream is the legacy default stream). Every call returns
// a Status that names the CUDA error, so callers can put rank, op and epoch
// around it.
//
// In a build without the CUDA toolkit every call fails with kUnsupported
// ("this build has no CUDA"), so the runtime links the same either way.
#pragma once

#include <cstddef>
#include <string>

#include "rcoll/status.h"
#include "base/deadline.h"

namespace rcoll::kernels::cuda {

// Whether this build has CUDA at all.
bool built();

// The ErrorCode for a cudaError_t value: kUnsupported where this host cannot
// do device work (no driver or device, out of memory), kDevice for sticky
// errors, kTransport for the rest.
ErrorCode error_code(int cuda_error);

// The device that owns `p`: kInvalidArgument when `p` is host memory (or
// unknown to CUDA), kUnsupported when there is no usable driver or device.
Result<int> device_of(const void* p);
Status set_device(int device);
Result<int> current_device();

// Whether the calling thread has a CUDA context current (it used a device).
bool thread_has_context();

// Makes `device` the calling thread's current device for a scope. The
// caller's device is put back after only if the thread had a context on it:
// setting a device creates its context (hundreds of MB of GPU memory), which a
// thread that never used the device must not get.
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (previous_ >= 0 && previous_ != device_) (void)set_device(previous_);
  }
  Status enter(int device) {
    const bool had = thread_has_context();
    auto cur = current_device();
    if (!cur.ok()) return cur.status();
    device_ = device;
    if (cur.value() == device) return Status();
    if (had) previous_ = cur.value();
    return set_device(device);
  }

 private:
  int previous_ = -1;
  int device_ = -1;
};

// A sticky error (illegal address, launch failure, ECC...) fails with
// kDevice: the process's CUDA context is lost, so retrying or recovering on
// this GPU cannot help.
Result<void*> stream_create();  // non-blocking with respect to the legacy default stream
void stream_destroy(void* stream);
Result<void*> event_create();  // timing disabled: the cheapest kind to record and query
void event_destroy(void* event);
Status event_record(void* event, void* stream);
// Work queued on `stream` after this waits for `event` (no host blocking).
Status stream_wait_event(void* stream, void* event);
// Whether the work before the event's record has finished.
Result<bool> event_done(void* event);
// Polls the event until it fires or `deadline` passes (kTimeout, naming `what`),
// sleeping at most `max_sleep` between polls once past the first 1 ms.
// Never a cudaEventSynchronize: a hung GPU cannot hang the caller.
Status wait_event(void* event, Deadline deadline, const std::string& what, Clock::duration max_sleep = Millis(1));

// Any direction (cudaMemcpyDefault: unified addressing tells host from device).
Status copy_async(void* dst, const void* src, size_t bytes, void* stream);

// Page-locked host memory: what device copies run at full speed from, and
// what the host transports read and write while the GPU copies the rest.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { release(); }
  // Grows to at least `bytes` (contents are not kept); never shrinks.
  Status reserve(size_t bytes);
  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  // Gives the memory back (once no stream gate holds a stream:
  // StreamGate::free_when_none_held); returns how many bytes that was.
  size_t release();

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Device memory on the current device, allocated and freed in stream order
// (cudaMallocAsync / cudaFreeAsync): a plain cudaFree may wait for the whole
// GPU, including other communicators' kernels that wait on peers, which can
// deadlock a process that holds several. Grows, never shrinks.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }
  // At least `bytes`, usable by work queued on `stream` from now on (an old,
  // smaller block is freed behind the work already queued there).
  Status reserve(size_t bytes, void* stream);
  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  // Frees it behind the work queued on the stream it was allocated on.
  void reset();

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
  void* stream_ = nullptr;  // where it was last allocated; must outlive the buffer
};

// RAII owner of a stream or an event, made on first create().
template <Result<void*> (*Make)(), void (*Destroy)(void*)>
class Owned {
 public:
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }
  Status create() {
    if (h_) return Status();
    auto r = Make();
    if (!r.ok()) return r.status();
    h_ = r.value();
    return Status();
  }
  void reset() {
    Destroy(h_);
    h_ = nullptr;
  }
  void* get() const { return h_; }
  // Lets go of the handle without destroying it (it must outlive work that
  // is still to use it).
  void leak() { h_ = nullptr; }

 private:
  void* h_ = nullptr;
};
using Stream = Owned<stream_create, stream_destroy>;
using Event = Owned<event_create, event_destroy>;

}  // namespace rcoll::kernels::cuda
