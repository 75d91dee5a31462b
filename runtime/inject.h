// Fault injection, built into the runtime and off unless RCOLL_INJECT (or
// rcoll-run --inject) names faults. The other piece of global state besides the
// logger: one process-wide plan, parsed once, strictly (a malformed spec is an
// error at start-up, never ignored).
//
//   RCOLL_INJECT="close-link:rank=1,peer=2,op=20;stall:rank=3,op=40,ms=2000"
//
// Kinds and keys (op = the rank's op sequence number, 1, 2, 3, ...):
//   close-link   rank, peer, op        close the connection rank<->peer during op
//                [at=done]             on NCCL: once the op's slices are done, before
//                                      the rank counts them (a peer that completed it
//                                      replays it); host ops ignore a close-link at=done
//   stall        rank, op, ms          the rank reaches op ms late (a straggler)
//   kill         rank, op              the rank's process dies (SIGKILL) at op
//   delay-chunk  rank, op, ms          the rank holds back a chunk of op for ms
//   drop-chunk   rank, op              the rank never sends one chunk of op
//   fail-connect transport, count      the next `count` connects of transport fail
//                [rank, epoch]         (on that rank only; from that epoch on)
//   random       rate, seed, kinds     each op of each rank gets a fault of `kinds`
//                                      ('+'-separated) with probability rate
//   bad-alloc    rank, op              the rank's op throws std::bad_alloc mid-op,
//                                      as a failed scratch allocation would
//   throw        rank, op              the rank's op throws std::runtime_error
//                                      mid-op, as a defect in rcoll would
//   link-latency us [, rank, epoch]    every frame the rank (default: every rank)
//                                      receives is delivered us later: a long link
//                                      (from that epoch on: a link that degrades)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rcoll/status.h"

namespace rcoll {

enum class FaultKind : uint8_t {
  kCloseLink,
  kStall,
  kKill,
  kDelayChunk,
  kDropChunk,
  kFailConnect,
  kRandom,
  kLinkLatency,
  kBadAlloc,
  kThrow,
  kHang
};
const char* to_string(FaultKind kind);

// Fault::rank of a fault planned for a process that is no longer in the group.
inline constexpr int kAnotherProcess = -2;

struct Fault {
  FaultKind kind;
  int rank = -1;      // -1: any rank; kAnotherProcess: one that left this group (shrink)
  int peer = -1;      // close-link: -1 = the op's first peer
  uint64_t op = 0;    // 0: not tied to an op
  int64_t ms = 0;
  int64_t us = 0;      // link-latency: one-way delay added to every frame the rank receives
  std::string transport;
  int count = 0;
  uint32_t epoch = 0;  // fail-connect: first epoch it applies to
  double rate = 0;
  uint64_t seed = 0;
  std::vector<FaultKind> random_kinds;
  // kill: "" = at the op; "ledgers" or "connect" = in a recovery during the
  // op, after publishing this rank's ledger or before connecting the next
  // epoch (a death in the middle of the protocol). close-link: "done" (above).
  std::string at;
};

// The faults that throw (bad-alloc: std::bad_alloc; throw: std::runtime_error),
// logged first; `op` describes the op it hits (seq `op_seq`) on `rank`.
[[noreturn]] void throw_injected(FaultKind kind, int rank, uint64_t op_seq, const std::string& op);

// Parses a whole RCOLL_INJECT value. Errors are kInvalidArgument naming the
// fault, the key and what was expected.
Result<std::vector<Fault>> parse_fault_spec(const std::string& spec);

}  // namespace rcoll
