#include "transports/frame.h"

#include <cstring>
#include <string>

#include "rcoll/types.h"

namespace rcoll {
namespace {

template <typename T>
void put(uint8_t* p, T v) {
  // Every platform rcoll targets is little-endian; static_assert keeps it honest.
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "big-endian hosts need byte swaps");
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kNone: return "none";
    case OpKind::kSendRecv: return "send/recv";
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kAlltoall: return "alltoall";
  }
  return "invalid-op-kind";
}

FrameBytes encode(const FrameHeader& h) {
  FrameBytes b{};
  put<uint32_t>(&b[0], kFrameMagic);
  b[4] = static_cast<uint8_t>(h.type);
  b[5] = static_cast<uint8_t>(h.op_kind);
  b[6] = h.dtype;
  b[7] = h.redop;
  put<uint32_t>(&b[8], h.epoch);
  put<int32_t>(&b[12], h.root);
  put<uint64_t>(&b[16], h.op_seq);
  put<uint64_t>(&b[24], h.count);
  put<uint32_t>(&b[32], h.chunk);
  put<uint16_t>(&b[36], h.step);
  put<uint16_t>(&b[38], h.flags);
  put<uint64_t>(&b[40], h.payload_bytes);
  return b;
}

Result<FrameHeader> decode_frame_header(const uint8_t* data, size_t size) {
  if (size < kFrameHeaderBytes) {
    return Status(ErrorCode::kTransport, "truncated frame header: " + std::to_string(size) +
                                             " of " + std::to_string(kFrameHeaderBytes) + " bytes");
  }
  uint32_t magic = get<uint32_t>(data);
  if (magic != kFrameMagic) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "bad frame magic 0x%08x (expected 0x%08x): not an rcoll peer",
                  magic, kFrameMagic);
    return Status(ErrorCode::kTransport, buf);
  }
  FrameHeader h;
  uint8_t type = data[4];
  if (type < 1 || type > static_cast<uint8_t>(kLastFrameType))
    return Status(ErrorCode::kTransport, "unknown frame type " + std::to_string(type));
  h.type = static_cast<FrameType>(type);
  uint8_t kind = data[5];
  if (kind > static_cast<uint8_t>(kLastOpKind)) {
    return Status(ErrorCode::kTransport, "unknown op kind " + std::to_string(kind) + " in frame");
  }
  h.op_kind = static_cast<OpKind>(kind);
  h.dtype = data[6];
  h.redop = data[7];
  if (h.dtype >= kNumDataTypes || h.redop >= kNumReduceOps) {
    return Status(ErrorCode::kTransport, "frame has invalid dtype " + std::to_string(h.dtype) +
                                             " or reduce op " + std::to_string(h.redop));
  }
  h.epoch = get<uint32_t>(data + 8);
  h.root = get<int32_t>(data + 12);
  h.op_seq = get<uint64_t>(data + 16);
  h.count = get<uint64_t>(data + 24);
  h.chunk = get<uint32_t>(data + 32);
  h.step = get<uint16_t>(data + 36);
  h.flags = get<uint16_t>(data + 38);
  h.payload_bytes = get<uint64_t>(data + 40);
  if (h.payload_bytes > kMaxFramePayload) {
    return Status(ErrorCode::kTransport,
                  "frame claims " + std::to_string(h.payload_bytes) + " payload bytes (limit " +
                      std::to_string(kMaxFramePayload) + ")");
  }
  return h;
}

std::string describe_op(const FrameHeader& h) {
  std::string s = to_string(h.op_kind);
  s += " seq " + std::to_string(h.op_seq) + " (";
  s += to_string(static_cast<DataType>(h.dtype));
  s += " x " + std::to_string(h.count);
  if (h.op_kind == OpKind::kAllreduce || h.op_kind == OpKind::kReduceScatter) {
    s += ", ";
    s += to_string(static_cast<ReduceOp>(h.redop));
  }
  if (h.op_kind == OpKind::kBroadcast) s += ", root " + std::to_string(h.root);
  if (h.op_kind == OpKind::kSendRecv) s += ", from rank " + std::to_string(h.root);
  s += ")";
  return s;
}

std::string describe_frame(const FrameHeader& h) {
  return describe_op(h) + " chunk " + std::to_string(h.chunk) + " step " + std::to_string(h.step) +
         " epoch " + std::to_string(h.epoch) + ", " + std::to_string(h.payload_bytes) + " bytes";
}

uint64_t job_token_hash(const std::string& token) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : token) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Status match_frame(const FrameHeader& want, const FrameHeader& got, const ErrorContext& ctx) {
  // Every frame passes through here: the names below are built only for a mismatch.
  if (got.type == FrameType::kData && got.epoch == want.epoch && got.same_op(want) &&
      got.same_position(want)) {
    return Status();
  }
  const std::string me = "rank " + std::to_string(ctx.rank);
  const std::string them = "rank " + std::to_string(ctx.peer);
  if (got.type != FrameType::kData || got.epoch != want.epoch) {
    return Status(ErrorCode::kTransport, ctx,
                  "unexpected frame from " + them + ": " + describe_frame(got) + "; closing the connection");
  }
  if (!got.same_op(want)) {
    if (want.op_kind == OpKind::kSendRecv && got.op_kind == OpKind::kSendRecv && want.op_seq == got.op_seq) {
      // Numbered as both ends number it: the pair's n-th send from the peer to this rank.
      const std::string transfer = "p2p #" + std::to_string(got.op_seq) + " " +
                                   std::to_string(ctx.peer) + "->" + std::to_string(ctx.rank);
      return Status(
          ErrorCode::kDesync, ctx,
          me + " receives " + transfer + " as " + to_string(static_cast<DataType>(want.dtype)) +
              " x " + std::to_string(want.count) + " but " + them + " sent it as " +
              to_string(static_cast<DataType>(got.dtype)) + " x " + std::to_string(got.count) +
              ": a send or receive skipped, added or mismatched on one of them (the n-th send "
              "from one rank to another pairs with the n-th receive there, with the same count "
              "and dtype)");
    }
    // Collective sequence numbers are equal on every rank, so a peer that is
    // already past this op sent its frames for it: they were lost. The same
    // holds within the send/recv sequence. A different op at the same
    // sequence number is a desync.
    const bool same_sequence_space = (got.op_kind == OpKind::kSendRecv) == (want.op_kind == OpKind::kSendRecv);
    if (same_sequence_space && got.op_seq != want.op_seq) {
      return Status(ErrorCode::kTransport, ctx,
                    "frames lost: " + me + " still waits for " + describe_frame(want) + " but " + them + " sent " +
                        describe_frame(got) + "; frames of one of these ops never arrived");
    }
    return Status(ErrorCode::kDesync, ctx,
                  me + " is at " + describe_op(want) + " but " + them + " sent data for " + describe_op(got) +
                      "; every rank must issue the same collectives in the same order");
  }
  if (!got.same_position(want)) {
    return Status(ErrorCode::kTransport, ctx,
                  "frames lost: " + me + " expected " + describe_frame(want) + " from " + them + " but got " +
                      describe_frame(got) + "; the stream to this rank lost data");
  }
  return Status();
}

}  // namespace rcoll
