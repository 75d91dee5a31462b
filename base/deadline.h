// A point in time by which something must happen. Every wait in rcoll takes one.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace rcoll {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class Deadline {
 public:
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  // Any duration type; one too large to add to now (milliseconds::max(), say)
  // is never, compared in the caller's unit so the conversion cannot overflow.
  template <typename Rep, typename Period>
  static Deadline after(std::chrono::duration<Rep, Period> d) {
    using D = std::chrono::duration<Rep, Period>;
    const auto now = Clock::now();
    const auto headroom = Clock::time_point::max() - now;
    if (d >= std::chrono::duration_cast<D>(headroom)) return never();
    return Deadline(now + std::chrono::duration_cast<Clock::duration>(d));
  }
  static Deadline at(Clock::time_point t) { return Deadline(t); }

  bool is_never() const { return at_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= at_; }
  Clock::time_point time() const { return at_; }
  Clock::duration remaining() const {
    if (is_never()) return Clock::duration::max();
    return std::max(Clock::duration::zero(), at_ - Clock::now());
  }
  Millis remaining_ms() const {
    if (is_never()) return Millis::max();
    return std::chrono::duration_cast<Millis>(remaining());
  }
  Deadline earlier(Deadline other) const { return at_ <= other.at_ ? *this : other; }

 private:
  explicit Deadline(Clock::time_point t) : at_(t) {}
  Clock::time_point at_;
};

// The pause between two polls of something a device finishes (a CUDA event,
// NCCL's enqueue): a yield for the first `spin` of the wait, then a sleep of
// a sixteenth of the time waited so far, at most `max_sleep`. So a wait ends
// within a few percent of what it waits for (a fixed sleep after a fixed spin
// adds the sleep to every op just longer than the spin), and a long one
// leaves its core alone.
class PollPause {
 public:
  explicit PollPause(Clock::duration spin, Clock::duration max_sleep = Millis(1)) : spin_(spin), max_sleep_(max_sleep) {}
  void operator()() const {
    const Clock::duration waited = Clock::now() - since_;
    if (waited < spin_) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::min<Clock::duration>(waited / 16, max_sleep_));
    }
  }

 private:
  Clock::duration spin_;
  Clock::duration max_sleep_;
  Clock::time_point since_ = Clock::now();
};

}  // namespace rcoll
