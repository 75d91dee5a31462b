// Where a device op's host time goes, phase by phase (RCOLL_NCCL_PHASES=1, a
// diagnostic): each op on NCCL's marks go into its own sums, which join those
// of its size when it ends; a run of ops of one size is logged when the size
// changes and at close. Off, each call is one branch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "base/deadline.h"

namespace rcoll {

struct NcclPhases {
  enum Phase : size_t {
    kCallerStream,
    kSetup,
    kKeep,
    kIssue,
    kQueueVerdict,
    kSlices,
    kConfirmation,
    kEnd,
    kCount
  };
  static constexpr const char* kNames[kCount] = {"caller stream", "setup",  "keep input",   "issue",
                                                 "queue verdict", "slices", "confirmation", "end"};
  using Sums = std::array<Clock::duration, kCount>;

  bool on = false;
  // The op in flight: since its start or last mark, what it spent so far,
  // and whether it ran on NCCL (a staged op is not counted).
  Clock::time_point last{};
  Sums op{};
  bool op_on_nccl = false;
  // The run of ops of one size.
  Sums sum{};
  uint64_t ops = 0;
  size_t bytes = 0;

  void start() {
    if (!on) return;
    last = Clock::now();
    op = {};
    op_on_nccl = false;
  }
  void mark(Phase p) {
    if (!on) return;
    const Clock::time_point now = Clock::now();
    op[p] += now - last;
    last = now;
    if (p == kSetup) op_on_nccl = true;
  }
  // The op ended (its end marked): true when it starts a new size, and the
  // run so far (in sum, ops, bytes) should be logged before take_op().
  bool new_size(size_t op_bytes) const { return op_on_nccl && ops > 0 && op_bytes != bytes; }
  void take_op(size_t op_bytes) {
    if (!op_on_nccl) return;
    if (ops > 0 && op_bytes != bytes) {
      sum = {};
      ops = 0;
    }
    bytes = op_bytes;
    for (size_t i = 0; i < kCount; ++i) sum[i] += op[i];
    ++ops;
  }
};

}  // namespace rcoll
