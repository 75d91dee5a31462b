// The fallback chain: the transports a communicator may use, preferred first,
// and which of them it has dropped. Every decision that changes the transport
// is made from facts every rank shares (connect outcomes and recovery votes
// published in the store), so all ranks run every epoch on the same transport.
//
//   - A transport that fails to connect on any rank is dropped at once; the
//     epoch is connected again on the next one.
//   - Each recovery counts as one failure of the transport of the failed epoch.
//     A rank votes to move down when the transport has failed `failures_to_drop`
//     times within `failure_window`; the ranks take the most cautious vote.
//   - After `probe_after` without using a dropped transport, a rank votes at the
//     next recovery to try it again (probing back up); the move happens only if
//     every rank votes for it.
#pragma once

#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "rcoll/options.h"
#include "rcoll/status.h"
#include "base/deadline.h"

namespace rcoll {

class TransportChain {
 public:
  // From Options::transport (a pinned one) or Options::transports (the chain).
  // Skips transports not built in or not usable for host memory, explaining
  // each in `notes`; fails with kUnsupported when nothing usable is left, or
  // when a pinned transport is not built in.
  static Result<TransportChain> make(const Options& options, std::vector<std::string>* notes);

  const std::vector<std::string>& order() const { return order_; }
  size_t index() const { return index_; }
  const std::string& current() const { return order_[index_]; }
  bool has_next() const { return index_ + 1 < order_.size(); }
  // Whether device-buffer collectives may run on NCCL (it is in the chain and built).
  bool nccl() const { return nccl_; }
  std::string describe() const;

  // The current transport failed to connect (on some rank): move to the next.
  // False when there is none.
  bool drop_current(Clock::time_point now);
  // A recovery on the current transport: counts it and returns this rank's
  // vote (an index into order()) for the next epoch.
  size_t vote_after_failure(Clock::time_point now);
  // Adopts the index the ranks agreed on (the largest vote). Returns true if the transport changed.
  bool adopt(size_t index, Clock::time_point now);

  uint64_t fallbacks() const { return fallbacks_; }
  uint64_t probes() const { return probes_; }

 private:
  std::vector<std::string> order_;  // host transports
  bool nccl_ = false;
  size_t index_ = 0;
  int failures_to_drop_ = 3;
  Clock::duration failure_window_{};
  Clock::duration probe_after_{};
  std::deque<Clock::time_point> failures_;     // recoveries of the current transport, newest last
  std::vector<Clock::time_point> dropped_at_;  // per index; time_point{} = never dropped
  uint64_t fallbacks_ = 0;
  uint64_t probes_ = 0;
};

}  // namespace rcoll
