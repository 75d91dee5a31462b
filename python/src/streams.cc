#include "streams.h"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace rcoll::torch_backend {

c10::Stream current_stream(c10::Device device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

c10::Stream pool_stream(c10::Device device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device);
}

void* native(const c10::Stream& stream) { return stream.native_handle(); }

}  // namespace rcoll::torch_backend
