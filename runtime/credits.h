// Completion credits of eager broadcasts (runtime/algorithms/context.h,
// eager_credit_*): at a credit point every rank posts an empty frame to every
// other and a receive for theirs; a lag later it waits for them, and the
// replay log lets go of the collectives up to the point. The schedule (which
// ops are credit points, when a point is due) is decided from the op
// sequence alone, so every rank decides alike; this class keeps it and the
// pending points' requests. Owned by whichever thread holds the data plane.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "rcoll/status.h"
#include "runtime/algorithms/context.h"
#include "runtime/ledger.h"
#include "transports/transport.h"

namespace rcoll {

// Which eager broadcasts are credit points: the first (at all, or after a
// recovery), then the first a period after the last (eager_credit_min_period
// collectives at least; then kMaxCreditPeriod of them, or kCreditPeriodBytes
// of eager broadcasts since the last). A function of the op sequence alone.
class CreditSchedule {
 public:
  void reset(int size);
  // No point before collective `seq`; the next eligible one is a point.
  void restart_from(uint64_t seq);
  bool is_point(uint64_t match_seq, uint64_t bytes) const;
  // The eager broadcast `match_seq` of `bytes` completed: returns whether it
  // is a credit point (and starts a new period if so).
  bool advance(uint64_t match_seq, uint64_t bytes);
  uint64_t last_point() const { return last_point_; }

 private:
  int size_ = 1;
  uint64_t from_seq_ = 0;     // no point before this collective (set by a recovery)
  uint64_t last_point_ = 0;   // 0: none since the start or the last recovery
  uint64_t bytes_since_ = 0;  // of the eager broadcasts since the last point
};

class CompletionCredits {
 public:
  // The group changed (creation, a shrink): forgets the schedule.
  void reset(int rank, int size);
  // A recovery: the first collective no rank had started (`seq`) is the
  // earliest a credit point may be, so one every rank runs whole in the new
  // epoch. Pending points must be dropped with their transport (drop()).
  void restart_from(uint64_t seq);

  // Whether `rec` takes part: an eager broadcast off NCCL, with recovery on.
  bool carries(const OpRecord& rec, bool recovery) const;
  // The op completed here: posts its credits on `transport` if it is a
  // credit point, else counts its bytes toward the next.
  void completed(const OpRecord& rec, Transport& transport);

  // Waits (under ctx's guard) for the oldest points' credits if `op` is due
  // to collect them; the replay log then lets go of the collectives up to
  // each. `closing`: the closing barrier, which collects every point.
  Status collect(const Op& op, AlgoContext& ctx, ReplayLog& log, bool closing);
  // The transport that holds the pending requests is going away.
  void drop();

  size_t pending() const { return pending_; }

 private:
  struct Point {
    uint64_t seq = 0;  // the credit point's match seq
    // For d = 1 .. p-1: [2(d-1)] the receive from rank - d, [2(d-1)+1] the send to rank + d.
    std::vector<Request> reqs;
  };
  // The peer of Point::reqs[k].
  int peer(size_t k) const {
    const int d = static_cast<int>(k / 2) + 1;
    return k % 2 == 1 ? (rank_ + d) % size_ : (rank_ - d + size_) % size_;
  }
  void post(const Op& op, Transport& transport);

  int rank_ = 0;
  int size_ = 1;
  // A ring: at most eager_credit_lag_points + 1 points are pending (the
  // oldest is collected before more). A slot's requests stay where they are
  // while the transport holds them.
  std::array<Point, kCreditLagPeriods + 1> points_;
  size_t first_ = 0;    // the oldest pending point's slot
  size_t pending_ = 0;  // points posted, not yet collected
  CreditSchedule schedule_;
};

}  // namespace rcoll
