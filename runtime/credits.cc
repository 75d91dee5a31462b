// Completion credits of eager broadcasts (runtime/algorithms/context.h,
// eager_credit_*): posted after a credit point, collected a lag later, so the
// replay log can let go of the broadcasts before them.
#include <algorithm>
#include <csignal>
#include <string>
#include <thread>

#include "runtime/communicator_impl.h"
#include "base/log.h"

namespace rcoll {

bool CommunicatorImpl::carries_credits(const OpRecord& rec) const {
  return options_.recovery && size_ > 1 && !rec.nccl && broadcast_is_eager(rec.op, rec.tuning);
}

bool CommunicatorImpl::is_credit_point(const OpRecord& rec) const {
  const Op& op = rec.op;
  if (op.match_seq < credits_from_seq_) return false;
  if (last_credit_seq_ == 0) return true;  // the first at all, or after a recovery
  // A period's worth since the last.
  const uint64_t since = op.match_seq - last_credit_seq_;
  return since >= eager_credit_min_period(size_) &&
         (since >= eager_credit_max_period(size_) ||
          credit_bytes_ + op.out.bytes() >= kCreditPeriodBytes);
}

// Every rank posts its credits at the same place in its stream of frames to
// each peer (after the credit point's frames, before the next op's), so the
// transports' in-order matching pairs them like any other frame.
void CommunicatorImpl::post_credits(const OpRecord& rec) {
  const Op& op = rec.op;
  const int p = size_;
  if (credits_pending_ == credits_.size()) {
    // Cannot happen: the op collected the oldest credit point if more than a
    // lag's were pending when it started (or a recovery dropped them all,
    // which makes this no credit point).
    RCOLL_LOG(kError, "%s: the completion credits of collective seq %llu were never collected; sending none for this one "
              "(peers that do will see a desync, and a recovery follows)",
              op.describe().c_str(), static_cast<unsigned long long>(credits_[credits_first_].seq));
    return;
  }
  Credits& c = credits_[(credits_first_ + credits_pending_) % credits_.size()];
  FrameHeader h = op.frame_template(transport_->epoch(), rank_);
  h.step = AlgoContext::kCreditStep;
  c.reqs.assign(2 * static_cast<size_t>(p - 1), Request{});
  for (size_t k = 0; k < c.reqs.size(); ++k) {
    if (k % 2 == 1) {
      transport_->post_send(credit_peer(k), h, nullptr, &c.reqs[k]);
    } else {
      transport_->post_background_recv(credit_peer(k), h, &c.reqs[k]);
    }
  }
  c.seq = op.match_seq;
  ++credits_pending_;
  last_credit_seq_ = op.match_seq;
  credit_bytes_ = 0;
}

Status CommunicatorImpl::collect_credits(const Op& op, AlgoContext& ctx) {
  if (op.kind == OpKind::kSendRecv) return Status();
  while (credits_pending_ > 0) {
    Credits& c = credits_[credits_first_];
    // Sooner where the log's backups near the budget (which would leave the
    // oldest ops unreplayable): at least a minimum period's, as ever.
    const bool due = closing_barrier_running_ ||
                     credits_pending_ > eager_credit_lag_points(size_, ctx.tuning()) ||
                     op.match_seq >= c.seq + eager_credit_lag_ops(size_, ctx.tuning()) ||
                     (op.match_seq >= c.seq + eager_credit_min_period(size_) &&
                      log_.bytes() > log_.budget() / 2);
    if (!due) return Status();
    for (size_t k = 0; k < c.reqs.size(); ++k) {
      if (Status s = ctx.wait_for_credit(c.reqs[k], credit_peer(k), k % 2 == 1, c.seq); !s.ok()) return s;
    }
    log_.done_everywhere(c.seq);
    RCOLL_LOG(kDebug, "completion credits of collective seq %llu collected from every rank in epoch %u (at %s): the replay "
              "log lets go of collectives up to there", static_cast<unsigned long long>(c.seq), transport_->epoch(),
              op.describe().c_str());
    credits_first_ = (credits_first_ + 1) % credits_.size();
    --credits_pending_;
  }
  return Status();
}

void CommunicatorImpl::drop_credits() {
  for (; credits_pending_ > 0; --credits_pending_) {
    Credits& c = credits_[credits_first_];
    RCOLL_LOG(kInfo, "completion credits of collective seq %llu dropped with the old data plane; the first eager "
              "broadcast no rank had started posts new ones", static_cast<unsigned long long>(c.seq));
    c.reqs.clear();
    credits_first_ = (credits_first_ + 1) % credits_.size();
  }
  credits_first_ = 0;
}

}  // namespace rcoll
