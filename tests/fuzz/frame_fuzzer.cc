// libFuzzer target: the wire-frame decoder every byte-stream transport and the
// liveness channel run on untrusted bytes (transports/frame.h).
//
// The input is read as a stream of frames, as a receiver would: a 48-byte
// header, then the payload it announces (cut short where the input ends). A
// header that decodes must re-encode to the same 48 bytes (the decoder keeps
// nothing it did not check) and describe itself; one that does not must be an
// error, never a crash. The payload bound is checked before any use, so a
// hostile length allocates nothing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "transports/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rcoll;
  size_t pos = 0;
  while (pos < size) {
    auto h = decode_frame_header(data + pos, size - pos);
    if (!h.ok()) {
      // The receiver closes the connection here; the message must say why.
      if (h.status().message().empty()) std::abort();
      return 0;
    }
    const FrameHeader& f = h.value();
    if (f.payload_bytes > kMaxFramePayload) std::abort();
    const FrameBytes again = encode(f);
    if (std::memcmp(again.data(), data + pos, kFrameHeaderBytes) != 0) std::abort();
    if (describe_frame(f).empty()) std::abort();
    pos += kFrameHeaderBytes;
    pos += static_cast<size_t>(std::min<uint64_t>(f.payload_bytes, size - pos));
  }
  return 0;
}
