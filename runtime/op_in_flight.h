// Detection's state for the op this rank runs now: one record per op, reset
// when the op starts (CommunicatorImpl::run_op, run_group). The stall judge's
// verdicts (runtime/stall_judge.h) are applied to it: the straggler logged, a
// hang's clock across recoveries, a send or receive judged hung and looked at
// again, a cycle of waits seen.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "runtime/ledger.h"
#include "runtime/op.h"
#include "runtime/stall_judge.h"

namespace rcoll {

// The longest timeout taken as written; longer ones ("never") are a year.
inline constexpr std::chrono::hours kYear{24 * 365};

struct OpInFlight {
  OpRecord* record = nullptr;    // null while no op runs; a group's first member
  std::span<OpRecord> group;     // a group's members (record is the first); empty otherwise
  const Op* group_op = nullptr;  // the group's carrier (Op::group), while one runs
  // The records of the op in flight: a group's members, the op's, or none.
  std::span<OpRecord> current() const {
    if (!group.empty()) return group;
    return record ? std::span<OpRecord>(record, 1) : std::span<OpRecord>();
  }
  // "allreduce seq 7 (...)", "group of seq 7..9 (...)", or `none`.
  std::string what(const char* none) const {
    if (group_op) return group_op->describe();
    return record ? record->op.describe() : std::string(none);
  }
  Clock::time_point started{};
  int straggler = -1;                   // the late rank logged for this op (-1: none)
  Clock::time_point straggler_noted{};  // when it was last logged
  bool straggler_expired = false;       // the last stall was a straggler past its timeout
  // A silent rank waited for under a stream gate (wait_for_silent_under_gate):
  // which, since when (the recovery timeout counts from there; logged then),
  // and the op's moves then. Another rank, a move, or a verdict other than
  // silent starts it over.
  int silent_under_gate = -1;
  Clock::time_point silent_under_gate_since{};
  uint64_t silent_under_gate_moves = 0;
  int recoveries = 0;  // recoveries of this op so far
  // The hang timeout's clock (Options::hang_timeout): when the stall last
  // judged hung began (stall_began), and when the spell of hangs began
  // (hang_since), which lasts across recoveries while no slice of the op
  // completes (hang_done: the op's slices done when it began;
  // recoveries_at_hang: its recoveries then).
  Clock::time_point stall_began{};
  Clock::time_point hang_since{};
  size_t hang_done = 0;
  int recoveries_at_hang = 0;
  // Is op `seq` (one of) the op in flight?
  bool holds(uint64_t seq) const {
    for (const OpRecord& r : current())
      if (r.op.seq == seq) return true;
    return false;
  }
  // The hang timeout as a duration (a year at most: "never" written as a
  // huge timeout must not overflow).
  static Clock::duration hang_limit(std::chrono::milliseconds hang_timeout) {
    return hang_timeout >= kYear ? Clock::duration(kYear) : Clock::duration(hang_timeout);
  }
  // What is left of the hang timeout, or max() when there is none.
  Clock::duration hang_left(std::chrono::milliseconds hang_timeout) const {
    if (hang_timeout.count() <= 0) return Clock::duration::max();
    if (hang_since == Clock::time_point{}) return hang_limit(hang_timeout);
    return std::max<Clock::duration>(Clock::duration::zero(),
                                     hang_limit(hang_timeout) - (Clock::now() - hang_since));
  }
  std::vector<WaitLink> cycle;  // a cycle of waits seen at the last stall (judge_cycle)
  // A send or receive judged hung once, at hung_seen: looked at again
  // (look_again, next_look) before it counts.
  Clock::time_point hung_seen{};
  bool look_again = false;
  std::vector<ChainMember> chain;  // the chain of waits as seen at hung_seen
  // Progress of the op (bytes moved, an NCCL slice done), counted: the
  // stall looked at again is the one judged hung before only if nothing
  // moved in between, in the same epoch.
  uint64_t moves = 0;
  uint64_t moves_at_look = 0;
  uint32_t epoch_at_look = 0;
  Clock::time_point stall_began_at_look{};  // when the stall judged hung at hung_seen began
  // The peers' views the judging reads (CommunicatorImpl::want_views): the
  // moves last seen and since when none came (still_since), when they were
  // last asked for, and a stall whose judging waits for them to answer
  // (views_deferred: stalled for views_stall, with views_moves moves, when
  // deferred at views_deferred_at; once per op and epoch: views_deferred_epoch).
  // Every caller of on_stall asks again after next_look() then.
  uint64_t moves_seen = 0;
  Clock::time_point still_since{};
  Clock::time_point views_wanted{};
  bool views_deferred = false;
  int64_t views_deferred_epoch = -1;
  Clock::duration views_stall{};
  Clock::time_point views_deferred_at{};
  uint64_t views_moves = 0;  // moves when the judging was deferred
  void look_at(Clock::time_point stall_began, uint32_t epoch) {
    hung_seen = Clock::now();
    look_again = true;
    moves_at_look = moves;
    epoch_at_look = epoch;
    stall_began_at_look = stall_began;
  }
  bool second_look(uint32_t epoch) const {
    return hung_seen != Clock::time_point{} && moves == moves_at_look && epoch == epoch_at_look;
  }
};

}  // namespace rcoll
