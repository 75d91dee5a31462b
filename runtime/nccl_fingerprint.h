// What the ranks of an op on NCCL must agree it is, carried by its
// confirmation (runtime/nccl_ops.cc): NCCL's calls carry no header, so a rank
// that ran another op (or a send of another size) is caught only there.
#pragma once

#include <cstdint>

#include "runtime/op.h"

namespace rcoll {

// The op's kind, dtype, counts, reduce op, root and match_seq (FNV-1a): equal
// on every rank of a collective, and on both ends of a send and its receive.
uint64_t fingerprint(const Op& op);
// One op's fingerprint folded into those of the collectives before it.
uint64_t fold(uint64_t hash, uint64_t fingerprint);
// A member of a device group (send or receive to op.peer) as its pair's
// confirmation sums it: its fingerprint weighed by the direction its bytes
// go (upward from the lower rank, or down). Summed over the members between
// two ranks, both ends get the same value whatever order each issued them in.
uint64_t pair_term(const Op& member, int rank);

}  // namespace rcoll
