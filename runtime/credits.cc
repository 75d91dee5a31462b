#include "runtime/credits.h"

#include <string>

#include "base/log.h"

namespace rcoll {

void CreditSchedule::reset(int size) {
  size_ = size;
  from_seq_ = last_point_ = bytes_since_ = 0;
}

void CreditSchedule::restart_from(uint64_t seq) {
  from_seq_ = seq;
  last_point_ = 0;
}

bool CreditSchedule::is_point(uint64_t match_seq, uint64_t bytes) const {
  if (match_seq < from_seq_) return false;
  if (last_point_ == 0) return true;  // the first at all, or after a recovery
  // A period's worth since the last.
  const uint64_t since = match_seq - last_point_;
  return since >= eager_credit_min_period(size_) &&
         (since >= eager_credit_max_period(size_) || bytes_since_ + bytes >= kCreditPeriodBytes);
}

bool CreditSchedule::advance(uint64_t match_seq, uint64_t bytes) {
  if (!is_point(match_seq, bytes)) {
    bytes_since_ += bytes;
    return false;
  }
  last_point_ = match_seq;
  bytes_since_ = 0;
  return true;
}

void CompletionCredits::reset(int rank, int size) {
  rank_ = rank;
  size_ = size;
  schedule_.reset(size);
}

void CompletionCredits::restart_from(uint64_t seq) { schedule_.restart_from(seq); }

bool CompletionCredits::carries(const OpRecord& rec, bool recovery) const {
  return recovery && size_ > 1 && !rec.nccl && broadcast_is_eager(rec.op, rec.tuning);
}

void CompletionCredits::completed(const OpRecord& rec, Transport& transport) {
  if (schedule_.advance(rec.op.match_seq, rec.op.out.bytes())) post(rec.op, transport);
}

// Every rank posts its credits at the same place in its stream of frames to
// each peer (after the credit point's frames, before the next op's), so the
// transports' in-order matching pairs them like any other frame.
void CompletionCredits::post(const Op& op, Transport& transport) {
  if (pending_ == points_.size()) {
    // Cannot happen: the op collected the oldest credit point if more than a
    // lag's were pending when it started (or a recovery dropped them all,
    // which makes this no credit point).
    RCOLL_LOG(kError,
              "%s: the completion credits of collective seq %llu were never collected; sending "
              "none for this one (peers that do will see a desync, and a recovery follows)",
              op.describe().c_str(), static_cast<unsigned long long>(points_[first_].seq));
    return;
  }
  Point& c = points_[(first_ + pending_) % points_.size()];
  FrameHeader h = op.frame_template(transport.epoch(), rank_);
  h.step = AlgoContext::kCreditStep;
  c.reqs.assign(2 * static_cast<size_t>(size_ - 1), Request{});
  for (size_t k = 0; k < c.reqs.size(); ++k) {
    if (k % 2 == 1) {
      transport.post_send(peer(k), h, nullptr, &c.reqs[k]);
    } else {
      transport.post_background_recv(peer(k), h, &c.reqs[k]);
    }
  }
  c.seq = op.match_seq;
  ++pending_;
}

Status CompletionCredits::collect(const Op& op, AlgoContext& ctx, ReplayLog& log, bool closing) {
  if (op.kind == OpKind::kSendRecv) return Status();
  while (pending_ > 0) {
    Point& c = points_[first_];
    // Sooner where the log's backups near the budget (which would leave the
    // oldest ops unreplayable): at least a minimum period's, as ever.
    const bool due =
        closing || pending_ > eager_credit_lag_points(size_, ctx.tuning()) ||
        op.match_seq >= c.seq + eager_credit_lag_ops(size_, ctx.tuning()) ||
        (op.match_seq >= c.seq + eager_credit_min_period(size_) && log.bytes() > log.budget() / 2);
    if (!due) return Status();
    for (size_t k = 0; k < c.reqs.size(); ++k) {
      if (Status s = ctx.wait_for_credit(c.reqs[k], peer(k), k % 2 == 1, c.seq); !s.ok()) return s;
    }
    log.done_everywhere(c.seq);
    RCOLL_LOG(kDebug,
              "completion credits of collective seq %llu collected from every rank in epoch %u "
              "(at %s): the replay log lets go of collectives up to there",
              static_cast<unsigned long long>(c.seq), ctx.epoch(), op.describe().c_str());
    first_ = (first_ + 1) % points_.size();
    --pending_;
  }
  return Status();
}

void CompletionCredits::drop() {
  for (; pending_ > 0; --pending_) {
    Point& c = points_[first_];
    RCOLL_LOG(kInfo,
              "completion credits of collective seq %llu dropped with the old data plane; the "
              "first eager broadcast no rank had started posts new ones",
              static_cast<unsigned long long>(c.seq));
    c.reqs.clear();
    first_ = (first_ + 1) % points_.size();
  }
  first_ = 0;
}

}  // namespace rcoll
