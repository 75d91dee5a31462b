// CUDA streams as the backend's device ops use them, through c10's
// device-generic stream API (no CUDA header here): the current stream an op
// is ordered after, and a side stream from PyTorch's pool on which the
// backend queues what follows an op (copies back, its future's events).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

namespace rcoll::torch_backend {

// The current stream of `device` on this thread.
c10::Stream current_stream(c10::Device device);
// A stream from PyTorch's pool on `device` (they are handed out round robin).
c10::Stream pool_stream(c10::Device device);
// The stream as a cudaStream_t (for rcoll's OpOptions::cuda_stream and Work::stream_wait).
void* native(const c10::Stream& stream);

}  // namespace rcoll::torch_backend
