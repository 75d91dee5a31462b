// The wire format shared by every byte-stream transport. Each message is a
// fixed 48-byte header followed by `payload_bytes` of data. The header carries
// the recovery identity of the bytes (epoch, op seq, chunk, step) and the op's
// fingerprint (kind, dtype, reduce op, root/peer, count), so a receiver can
// drop stale epochs and detect a desync at the first frame that disagrees.
//
// Layout (little-endian):
//   0 magic u32 | 4 type u8 | 5 op_kind u8 | 6 dtype u8 | 7 redop u8
//   8 epoch u32 | 12 root i32 | 16 op_seq u64 | 24 count u64
//  32 chunk u32 | 36 step u16 | 38 flags u16 | 40 payload_bytes u64
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "rcoll/status.h"

namespace rcoll {

inline constexpr uint32_t kFrameMagic = 0x31434352;  // "RCC1"
inline constexpr size_t kFrameHeaderBytes = 48;
// No frame may carry more than this; a header that claims more is hostile or corrupt.
inline constexpr uint64_t kMaxFramePayload = uint64_t{1} << 31;

// kHeartbeat, kGoodbye, kWatch, kSuspect and kNotice travel only on the
// liveness channel (runtime/liveness.h): a heartbeat carries the sender's
// op_seq, epoch and in_comm (flags bit 0); a goodbye announces a clean
// shutdown, so the connection closing after it is no death; a watch asks the
// receiver to heartbeat to the sender for `count` ms. A suspect notice tells
// that rank `count` - 1 turned silent (flags bit 0) or heartbeats again: its
// teller (a ring neighbour of that rank) is rank `epoch` - 1, `chunk` the
// teller's count of its notices about that rank, `op_seq` the silence in ms;
// it is passed on over the liveness overlay. A notice tells that rank
// `count` - 1 died (flags 1, the payload the reason) or left (flags 2), as
// its overlay partner saw it, and is passed on likewise.
enum class FrameType : uint8_t {
  kData = 1,
  kHello = 2,
  kHelloAck = 3,
  kAbort = 4,
  kHeartbeat = 5,
  kGoodbye = 6,
  kWatch = 7,
  kSuspect = 8,
  kNotice = 9,
};
// The highest frame type (decoders reject anything above).
inline constexpr FrameType kLastFrameType = FrameType::kNotice;

enum class OpKind : uint8_t {
  kNone = 0,
  kSendRecv,
  kAllreduce,
  kAllgather,
  kReduceScatter,
  kBroadcast,
  kBarrier,
  kAlltoall,  // appended: values on the wire never change meaning
};
// The highest op kind a frame may carry (decoders reject anything above).
inline constexpr OpKind kLastOpKind = OpKind::kAlltoall;
const char* to_string(OpKind kind);

struct FrameHeader {
  FrameType type = FrameType::kData;
  OpKind op_kind = OpKind::kNone;
  uint8_t dtype = 0;
  uint8_t redop = 0;
  uint32_t epoch = 0;
  int32_t root = -1;  // broadcast root, or the sender's rank for send/recv
  uint64_t op_seq = 0;
  uint64_t count = 0;  // element count of the op (fingerprint), not of this frame
  uint32_t chunk = 0;
  uint16_t step = 0;
  uint16_t flags = 0;
  uint64_t payload_bytes = 0;

  // Same op (kind, seq and fingerprint)?
  bool same_op(const FrameHeader& o) const {
    return op_kind == o.op_kind && op_seq == o.op_seq && dtype == o.dtype && redop == o.redop &&
           root == o.root && count == o.count;
  }
  // Same place inside the op?
  bool same_position(const FrameHeader& o) const {
    return chunk == o.chunk && step == o.step && payload_bytes == o.payload_bytes;
  }
};

using FrameBytes = std::array<uint8_t, kFrameHeaderBytes>;
FrameBytes encode(const FrameHeader& h);
// Rejects a wrong magic, an unknown type or kind, an out-of-range dtype/redop and
// a payload above kMaxFramePayload.
Result<FrameHeader> decode_frame_header(const uint8_t* data, size_t size);

// "allreduce seq 7 (float32 x 1048576, sum) chunk 3 step 2"
std::string describe_op(const FrameHeader& h);
std::string describe_frame(const FrameHeader& h);

// The hash of the job token that every transport's hello carries (FNV-1a).
uint64_t job_token_hash(const std::string& token);

// Does the arriving frame `got` belong where the receiver expects `want`? The
// diagnosis every transport gives: kDesync (another op at this sequence
// number), kInvalidArgument (a recv whose send disagrees on count or dtype),
// kTransport "frames lost" (the peer is past this op, or at another chunk).
// `ctx` names this rank, the peer, the epoch and the transport.
Status match_frame(const FrameHeader& want, const FrameHeader& got, const ErrorContext& ctx);

}  // namespace rcoll
