#include "runtime/op.h"

#include <cstdint>
#include <string>

#include "kernels/cpu_reduce.h"
#include "kernels/cuda_memory.h"

namespace rcoll {

FrameHeader Op::frame_template(uint32_t epoch, int sender_rank) const {
  FrameHeader h;
  h.type = FrameType::kData;
  h.op_kind = kind;
  h.dtype = static_cast<uint8_t>(out.dtype);
  h.redop = static_cast<uint8_t>(kind == OpKind::kAllreduce || kind == OpKind::kReduceScatter ? reduce : ReduceOp::kSum);
  h.epoch = epoch;
  h.op_seq = match_seq;
  switch (kind) {
    case OpKind::kSendRecv: h.root = sender_rank; h.count = out.count; break;
    case OpKind::kBroadcast: h.root = root; h.count = out.count; break;
    case OpKind::kAllgather: h.count = in.count; break;          // per-rank count
    case OpKind::kReduceScatter: h.count = out.count; break;     // per-rank count
    default: h.count = out.count; break;
  }
  return h;
}

std::string OpBrief::describe() const {
  std::string s = kind == OpKind::kSendRecv ? (is_send ? "send" : "recv") : to_string(kind);
  s += " seq " + std::to_string(seq) + " (";
  s += to_string(dtype);
  s += " x " + std::to_string(count);
  if (kind == OpKind::kAllreduce || kind == OpKind::kReduceScatter) s += std::string(", ") + to_string(reduce);
  if (kind == OpKind::kBroadcast) s += ", root " + std::to_string(root);
  if (kind == OpKind::kSendRecv) s += (is_send ? ", to rank " : ", from rank ") + std::to_string(peer);
  s += ")";
  return s;
}

std::string Op::describe() const {
  if (!group) return brief().describe();
  size_t sends = 0;
  for (const Op& m : *group) sends += m.is_send ? 1 : 0;
  const size_t recvs = group->size() - sends;
  std::string s = "group of seq " + std::to_string(seq);
  if (group->size() > 1) s += ".." + std::to_string(group->back().seq);
  s += " (" + std::to_string(sends) + (sends == 1 ? " send, " : " sends, ") +
       std::to_string(recvs) + (recvs == 1 ? " recv)" : " recvs)");
  return s;
}

namespace {

Status invalid(const Op& op, int rank, const std::string& what) {
  return Status(ErrorCode::kInvalidArgument, ErrorContext{rank, op.peer, op.seq, -1, ""},
                op.describe() + ": " + what + "; nothing was sent");
}

Status check_buffer(const Op& op, int rank, const Buffer& b, const char* name) {
  if (static_cast<int>(b.dtype) >= kNumDataTypes) {
    return invalid(op, rank, std::string(name) + " has an invalid dtype value " + std::to_string(static_cast<int>(b.dtype)));
  }
  if (b.data == nullptr && b.count > 0) {
    return invalid(op, rank, std::string(name) + " is null but has " + std::to_string(b.count) + " elements");
  }
  if (b.memory != MemoryKind::kHost && b.memory != MemoryKind::kCuda) {
    return invalid(op, rank, std::string(name) + " has an invalid memory kind value " + std::to_string(static_cast<int>(b.memory)));
  }
  if (b.count > (uint64_t{1} << 62) / 8) return invalid(op, rank, std::string(name) + " count is implausibly large");
  return Status();
}

// A device buffer's device: kUnsupported where this build or host has no
// CUDA, kInvalidArgument for memory that is not on a device. -1 when empty.
Result<int> buffer_device(const Op& op, int rank, const Buffer& b, const char* name) {
  if (b.memory != MemoryKind::kCuda || b.bytes() == 0) return -1;
  auto d = kernels::cuda::device_of(b.data);
  if (d.ok()) return d;
  const Status& s = d.status();
  if (s.code() == ErrorCode::kInvalidArgument) return invalid(op, rank, std::string(name) + ": " + s.message());
  return Status(s.code(), ErrorContext{rank, -1, op.seq, -1, ""},
                op.describe() + ": " + name + " is device memory, which this process cannot use: " + s.message() +
                    "; nothing was sent");
}

Status check_devices(Op& op, int rank) {
  if (!op.on_device()) return Status();
  if (op.in.memory != op.out.memory && op.in.bytes() > 0 && op.out.bytes() > 0) {
    return invalid(op, rank, "input and output must both be host or both be device memory");
  }
  auto in = buffer_device(op, rank, op.in, "input");
  if (!in.ok()) return in.status();
  auto out = buffer_device(op, rank, op.out, "output");
  if (!out.ok()) return out.status();
  if (in.value() >= 0 && out.value() >= 0 && in.value() != out.value()) {
    return invalid(op, rank, "input is on CUDA device " + std::to_string(in.value()) + " but output on device " +
                                 std::to_string(out.value()));
  }
  op.device = out.value() >= 0 ? out.value() : in.value();
  return Status();
}

bool overlap(const Buffer& a, const Buffer& b) {
  auto a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  return a.bytes() > 0 && b.bytes() > 0 && a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

}  // namespace

Status validate(Op& op, int rank, int size) {
  if (Status s = check_buffer(op, rank, op.in, "input"); !s.ok()) return s;
  if (Status s = check_buffer(op, rank, op.out, "output"); !s.ok()) return s;
  if (Status s = check_devices(op, rank); !s.ok()) return s;
  const bool reducing = op.kind == OpKind::kAllreduce || op.kind == OpKind::kReduceScatter;
  if (reducing && static_cast<int>(op.reduce) >= kNumReduceOps) {
    return invalid(op, rank, "invalid reduce op value " + std::to_string(static_cast<int>(op.reduce)));
  }
  if (reducing && !kernels::supports(op.out.dtype, op.reduce)) {
    return invalid(op, rank, std::string("reduce op ") + to_string(op.reduce) + " is not defined for " +
                                 to_string(op.out.dtype) + " (avg of integers would truncate; use sum)");
  }
  if (op.in.dtype != op.out.dtype) {
    return invalid(op, rank, std::string("input dtype ") + to_string(op.in.dtype) + " differs from output dtype " + to_string(op.out.dtype));
  }
  const size_t n = static_cast<size_t>(size);
  switch (op.kind) {
    case OpKind::kSendRecv:
      if (op.peer < 0 || op.peer >= size) return invalid(op, rank, "peer " + std::to_string(op.peer) + " is out of range [0, " + std::to_string(size) + ")");
      if (op.peer == rank) return invalid(op, rank, "peer is this rank; send/recv to self is not supported");
      break;
    case OpKind::kAllreduce:
      if (op.in.count != op.out.count) return invalid(op, rank, "input has " + std::to_string(op.in.count) + " elements but output has " + std::to_string(op.out.count));
      if (!op.in_place() && overlap(op.in, op.out)) return invalid(op, rank, "input and output overlap without being the same buffer");
      break;
    case OpKind::kAllgather: {
      if (op.in.count > SIZE_MAX / n) return invalid(op, rank, "input count times world size overflows");
      if (op.out.count != op.in.count * n) return invalid(op, rank, "output must have size x input = " + std::to_string(op.in.count * n) + " elements, has " + std::to_string(op.out.count));
      auto slot = static_cast<const char*>(op.out.data) + op.in.bytes() * static_cast<size_t>(rank);
      if (op.in.data != slot && overlap(op.in, op.out)) return invalid(op, rank, "input overlaps output without being this rank's slot of it");
      break;
    }
    case OpKind::kReduceScatter:
      if (op.out.count > SIZE_MAX / n) return invalid(op, rank, "output count times world size overflows");
      if (op.in.count != op.out.count * n) return invalid(op, rank, "input must have size x output = " + std::to_string(op.out.count * n) + " elements, has " + std::to_string(op.in.count));
      if (overlap(op.in, op.out)) return invalid(op, rank, "input and output overlap; reduce_scatter needs separate buffers");
      break;
    case OpKind::kBroadcast:
      if (op.root < 0 || op.root >= size) return invalid(op, rank, "root " + std::to_string(op.root) + " is out of range [0, " + std::to_string(size) + ")");
      break;
    case OpKind::kAlltoall:
      if (op.in.count != op.out.count) return invalid(op, rank, "input has " + std::to_string(op.in.count) + " elements but output has " + std::to_string(op.out.count));
      if (op.out.count % n != 0) return invalid(op, rank, std::to_string(op.out.count) + " elements do not split into " + std::to_string(size) + " equal blocks");
      if (overlap(op.in, op.out)) return invalid(op, rank, "input and output overlap; alltoall needs separate buffers");
      break;
    case OpKind::kBarrier:
    case OpKind::kNone:
      break;
  }
  return Status();
}

namespace {
std::string where(const Op& op) {
  return op.on_device() ? "CUDA device " + std::to_string(op.device) : std::string("the host");
}
}  // namespace

Status validate_group(Op& carrier, int rank, int size) {
  std::vector<Op>& members = *carrier.group;
  const Op* placed = nullptr;  // the first member whose buffer is somewhere
  for (Op& m : members) {
    if (Status s = validate(m, rank, size); !s.ok()) {
      return Status(s.code(), s.context(), "in " + carrier.describe() + ": " + s.message());
    }
    // All on the host, or all on one CUDA device (one NCCL group there). An
    // empty device buffer is on no device (validate): it goes with the rest.
    if (m.on_device() && m.device < 0) continue;
    if (placed == nullptr) {
      placed = &m;
    } else if (m.on_device() != placed->on_device() || m.device != placed->device) {
      return Status(ErrorCode::kInvalidArgument, ErrorContext{rank, m.peer, m.seq, -1, ""},
                    carrier.describe() + ": " + m.describe() + " is on " + where(m) + " but " +
                        placed->describe() + " is on " + where(*placed) +
                        "; a group's buffers are all on the host or all on one CUDA device; "
                        "nothing was sent");
    }
  }
  // Where every member is an empty device buffer, the carrier stays on no
  // device: the runtime completes it as the peers' device groups do
  // (CommunicatorImpl::run_group).
  carrier.device = placed != nullptr ? placed->device : -1;
  for (Op& m : members) {
    if (!m.on_device() || m.device >= 0 || placed == nullptr) continue;
    m.device = carrier.device;
    if (carrier.device < 0)
      m.in.memory = m.out.memory = MemoryKind::kHost;  // with the host members
  }
  for (size_t i = 0; i < members.size(); ++i) {
    for (size_t j = 0; j < members.size(); ++j) {
      const Op& a = members[i];
      const Op& b = members[j];
      if (i == j || a.is_send || (b.is_send ? false : j < i) || !overlap(a.out, b.out)) continue;
      return Status(ErrorCode::kInvalidArgument, ErrorContext{rank, a.peer, a.seq, -1, ""},
                    carrier.describe() + ": the buffer of " + a.describe() + " overlaps that of " +
                        b.describe() +
                        "; a receive in a group needs a buffer of its own; nothing was sent");
    }
  }
  return Status();
}

}  // namespace rcoll

namespace rcoll {

WorkState::~WorkState() {
  kernels::cuda::event_destroy(ready_event);
  kernels::cuda::event_destroy(verdict_event);
}

}  // namespace rcoll
