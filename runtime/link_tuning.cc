#include "runtime/link_tuning.h"

#include <cmath>

#include "base/log.h"

namespace rcoll {

LinkTuner::LinkTuner(const Options& options) {
  pins_.piece = options.chunk_bytes > 0;
  pins_.window = options.pipeline_depth > 0;
  if (pins_.piece) base_.piece_bytes = options.chunk_bytes;
  if (pins_.window) base_.window = options.pipeline_depth;
  base_.allreduce = options.allreduce_algorithm;
  base_.broadcast = options.broadcast_algorithm;
  base_.small_allreduce_bytes = options.small_allreduce_bytes;
  schedule_.reset(base_);
  piece_ = base_.piece_bytes;
  window_ = base_.window;
}

Tuning LinkTuner::for_op(const Op& op) {
  if (op.kind == OpKind::kSendRecv) return schedule_.for_point_to_point();
  schedule_.prune_before(op.match_seq);
  return schedule_.for_collective(op.match_seq);
}

Tuning LinkTuner::adopt(uint32_t epoch, const LinkSummary& links, const LinkSample& mine,
                        const std::string& transport, int size, double ms) {
  last_ = mine;
  last_transport_ = transport;
  last_size_ = size;
  const LinkSample& worst = links.worst;
  Tuning tuned = tune_for_link(worst, base_, pins_);
  // A property of the transport every rank agreed on for this epoch (blocks_by_doubling).
  tuned.doubling_blocks = transport == "tcp";
  // Whether the ranks share so few CPUs that the star broadcast wins
  // (broadcast_is_star).
  const int cpus = links.shared_cpus;
  tuned.few_shared_cpus = cpus > 0 && cpus <= kStarBroadcastCpus;
  // Likewise the eager broadcast range (broadcast_is_eager): over TCP above 2
  // ranks, up to where the acknowledged chain or star takes over.
  const bool star = large_broadcasts_by_star(size, tuned);
  tuned.eager_broadcast_bytes = transport != "tcp" || size <= 2 ? kEagerBroadcastBytes
                                : star                          ? kEagerBroadcastBytesTcpStar
                                                                : kEagerBroadcastBytesTcp;
  const uint64_t from = epoch == 0 ? 0 : resume_seq_;
  if (epoch == 0) {
    schedule_.reset(tuned);
  } else {
    schedule_.adopt(from, tuned);
  }
  piece_ = tuned.piece_bytes;
  window_ = tuned.window;
  latency_s_ = worst.latency_s;
  bandwidth_ = worst.bandwidth;
  const char* pinned = pins_.piece && pins_.window ? " (pinned by options)" : "";
  if (epoch > 0) {
    RCOLL_LOG(kInfo,
              "epoch %u over %s: slowest link %s (timed in %.1f ms); collectives from collective "
              "seq %llu on use %s%s",
              epoch, transport.c_str(), describe_link(worst).c_str(), ms,
              static_cast<unsigned long long>(from), describe_tuning(tuned).c_str(), pinned);
  }
  note_ = describe_link(worst) + " (timed in " + std::to_string(static_cast<int>(ms + 0.5)) +
          " ms) -> " + describe_tuning(tuned) + pinned;
  if (size > 2 && tuned.broadcast != BroadcastAlgorithm::kAuto) {
    note_ += star ? "; broadcasts by star (pinned)" : "; broadcasts by chain (pinned)";
  } else if (star) {
    note_ += "; broadcasts by star (the ranks share " + std::to_string(cpus) + " CPU" +
             (cpus == 1 ? "" : "s") + ")";
  }
  return tuned;
}

const LinkSample* LinkTuner::last_sample(uint32_t epoch, const std::string& transport,
                                         int size) const {
  if (epoch == 0 || transport != last_transport_ || last_size_ != size) return nullptr;
  return &last_;
}

bool LinkTuner::link_moved(const LinkSample& last, const LinkSample& now) {
  if (!last.valid || !now.valid) return true;
  const double a = last.latency_s, b = now.latency_s;
  return std::abs(b - a) > kLatencyMoved && (b > 2 * a || b < a / 2);
}

bool LinkTuner::keep_bandwidth(const LinkSample& last, LinkSample& now) {
  if (!now.valid) return true;  // could not time its links: the caller aborts the epoch
  if (link_moved(last, now)) return false;
  now.bandwidth = last.bandwidth;
  return true;
}

void LinkTuner::fill(Counters& c) const {
  c.chunk_bytes = piece_;
  c.pipeline_depth = window_;
  c.link_latency_us = latency_s_ * 1e6;
  c.link_bandwidth = bandwidth_;
}

}  // namespace rcoll
