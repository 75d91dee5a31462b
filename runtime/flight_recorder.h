// The flight recorder: the last ops of this rank (seq, kind, bytes, state,
// slices, timings), kept in a small ring so that a failure report can say what
// every rank was doing. Cheap enough to stay on: a lock and a few stores per op.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "runtime/op.h"

namespace rcoll {

struct OpTrace {
  enum class State : uint8_t { kQueued, kRunning, kDone, kFailed };
  uint64_t seq = 0;
  OpBrief what;  // formatted only when a report asks
  size_t bytes = 0;
  State state = State::kQueued;
  Clock::time_point issued{};
  Clock::time_point started{};
  Clock::time_point finished{};
  uint32_t epoch = 0;
  size_t slices_done = 0;
  size_t slices_total = 0;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 64) : ring_(capacity) {}
  void issued(const Op& op);
  // `at`: the caller's clock reading (it has one already: no second read per op).
  void started(uint64_t seq, uint32_t epoch, size_t slices_total, Clock::time_point at);
  void progressed(uint64_t seq, size_t slices_done, uint32_t epoch);
  void finished(uint64_t seq, bool ok, Clock::time_point at = Clock::now());
  // Newest last.
  std::vector<OpTrace> last(size_t n) const;
  // One line: where this rank is ("running allreduce seq 7 (...) slice 3/16 for 1.2 s").
  std::string position() const;
  // One line per op, newest last.
  std::string dump(size_t n) const;

 private:
  OpTrace* find(uint64_t seq);
  mutable std::mutex mu_;
  std::vector<OpTrace> ring_;
};

}  // namespace rcoll
