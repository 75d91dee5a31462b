// The tuning of the ops to come, as a unit: what the user pinned, the
// schedule each op takes its tuning from, and the tuning every rank derives
// from the link samples of each new epoch (runtime/link_model.h). Pure: the
// samples come from the caller (CommunicatorImpl::exchange_link_samples), so
// its rules are tested without sockets (tests/link_tuning_test.cc).
//
// Owned by the thread that owns the data plane; what counters() and
// diagnostics() report (frame size, window, the link) may be read from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "rcoll/communicator.h"
#include "runtime/link_model.h"
#include "runtime/op.h"

namespace rcoll {

class LinkTuner {
 public:
  // The defaults, or what `options` pins (chunk_bytes, pipeline_depth,
  // algorithms, the small all-reduce bound).
  explicit LinkTuner(const Options& options);

  // The tuning `op` keeps, replays included: a collective's by its match
  // sequence (forgetting steps no later op needs), point-to-point's the group's.
  Tuning for_op(const Op& op);

  // A recovery found that no rank has started collective `seq`: the next
  // epoch's tuning applies from there, on every rank alike.
  void resume_from(uint64_t seq) { resume_seq_ = seq; }

  // A group shrunk to one rank: no links, the defaults again.
  void start_over() { schedule_.reset(base_); }

  // Every rank's samples of `epoch`'s links over `transport`, reduced (the
  // same on every rank), set the tuning: for every collective from epoch 0
  // on, or from the resume sequence after a recovery. `mine`: this rank's
  // sample, kept for the next epoch's (last_sample). `ms`: how long the
  // timing took (for the log). Logs the switch after a recovery.
  Tuning adopt(uint32_t epoch, const LinkSummary& links, const LinkSample& mine,
               const std::string& transport, int size, double ms);

  // A recovery that reconnects the transport of the last epoch among the same
  // ranks need not time every link's bandwidth again (P ranks moving 6 MiB
  // each: 2.3 s of a 3.7 s recovery at 96 ranks on 2 CPUs): this rank's
  // sample of the last epoch, whose bandwidth a latency-only timing keeps, or
  // null where the bandwidth must be timed (epoch 0, another transport, a
  // shrink).
  const LinkSample* last_sample(uint32_t epoch, const std::string& transport, int size) const;
  // This rank's latency-only sample, completed with `last`'s bandwidth.
  // Returns false, leaving it as it is, when its latency moved (link_moved):
  // it says so in its published value, and if any rank's moved, every rank
  // times its bandwidth again. A sample that is not valid keeps nothing (the
  // caller aborts the epoch).
  static bool keep_bandwidth(const LinkSample& last, LinkSample& now);
  // A latency that at least doubled or halved, by more than kLatencyMoved.
  static bool link_moved(const LinkSample& last, const LinkSample& now);
  static constexpr double kLatencyMoved = 100e-6;

  // The tuning of new collectives, as last adopted (any thread).
  size_t piece_bytes() const { return piece_; }
  int window() const { return window_; }
  void fill(Counters& c) const;
  // "loopback ... -> 256 KiB frames x 8 in flight", for the ready line.
  const std::string& note() const { return note_; }

 private:
  Tuning base_;
  TuningPins pins_;
  TuningSchedule schedule_;
  uint64_t resume_seq_ = 0;
  std::atomic<uint64_t> piece_{0};
  std::atomic<int> window_{0};
  std::atomic<double> latency_s_{0};
  std::atomic<double> bandwidth_{0};
  std::string note_ = "one rank, no links";
  LinkSample last_;  // this rank's sample adopted last, and over what, among how many ranks
  std::string last_transport_;
  int last_size_ = 0;
};

}  // namespace rcoll
