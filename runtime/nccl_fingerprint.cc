#include "runtime/nccl_fingerprint.h"

namespace rcoll {

uint64_t fold(uint64_t hash, uint64_t fingerprint) {
  return (hash ^ fingerprint) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
}

uint64_t fingerprint(const Op& op) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<uint64_t>(op.kind));
  mix(static_cast<uint64_t>(op.out.dtype));
  mix(op.out.count);
  mix(op.in.count);
  mix(static_cast<uint64_t>(op.kind == OpKind::kAllreduce || op.kind == OpKind::kReduceScatter
                                ? op.reduce
                                : ReduceOp::kSum));
  mix(static_cast<uint64_t>(static_cast<int64_t>(op.root)));
  mix(op.match_seq);
  return h;
}

uint64_t pair_term(const Op& member, int rank) {
  const bool upward = member.is_send ? rank < member.peer : member.peer < rank;
  // Odd weights: a sum of terms tells the directions apart.
  return fingerprint(member) * (upward ? 0x9e3779b97f4a7c15ull : 0xc2b2ae3d27d4eb4full);
}

}  // namespace rcoll
