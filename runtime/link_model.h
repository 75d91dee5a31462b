// Adaptive chunking: what the links of an epoch measured, and the frame size
// and pipeline depth every rank derives from that.
//
// Every time a data plane is connected (start-up, each recovery, a shrink) the
// ranks time it: a few empty frames passed around the ring (latency), then
// bursts of frames to the next rank while receiving one from the previous
// (bandwidth, every link loaded at once, as a ring collective loads them). A
// stall only adds to a latency round, so the fastest counts; a burst can be
// slowed or sped up (its data already waiting), so the median of three. Each
// rank publishes its sample in the store and reads every rank's, so all derive
// the same tuning from the same numbers: the worst link sets it.
//
// The tuning keeps enough bytes in flight to cover twice the bandwidth-delay
// product (frames grow first, then the window), bounded so that one frame
// neither occupies the link for long (kFrameTime) nor a large share of the
// op deadline, and never below the defaults measured best on loopback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "rcoll/status.h"
#include "rcoll/store.h"
#include "runtime/algorithms/context.h"
#include "transports/transport.h"

namespace rcoll {

struct LinkSample {
  bool valid = false;
  double latency_s = 0;     // one way: the fastest ring round of empty frames (after the first)
  double bandwidth = 0;     // bytes/s into this rank while every link is busy (median burst)
  int64_t deadline_ms = 0;  // this rank's communicator op timeout (0: none set)
  // Where the rank runs: the kernel it runs on (its boot id; ranks in
  // containers on one machine share it, and its CPUs) and the CPUs it may use
  // there, as a hex mask (CPU 0 the lowest bit). Empty: not known.
  std::string host;
  std::string cpus;
};

// This process's host and CPUs, for a sample.
void describe_this_host(LinkSample* s);

// How many CPUs the ranks of the samples share, when every one of them runs
// on the same host (the union of their masks); 0 when they span hosts, or any
// sample does not say.
int shared_cpus(const std::vector<LinkSample>& samples);

std::string encode_sample(const LinkSample& s);
// Anything malformed decodes as an invalid sample (ignored when combining).
LinkSample decode_sample(const std::string& text);

// The slowest of the valid samples: highest latency, lowest bandwidth, tightest
// deadline. Invalid when none is valid.
LinkSample worst_link(const std::vector<LinkSample>& samples);

// Every rank's link timing as the link tuner adopts it: reduced by the
// store exchange's combiner, so that each rank reads O(1) bytes, not P
// samples (CommunicatorImpl::exchange_link_samples).
struct LinkSummary {
  LinkSample worst;             // worst_link of the samples
  int shared_cpus = 0;          // shared_cpus of the samples
  std::vector<int> unmeasured;  // the ranks whose sample is not valid
  bool moved = false;           // a rank's latency moved since the sample it kept
  // The ranks that did not connect the epoch's transport (they have no
  // sample either): every rank falls back, or the epoch fails.
  std::vector<int> not_connected;
};
LinkSummary summarize_links(const std::vector<LinkSample>& samples, bool moved = false);

// What a rank publishes: its sample, whether its latency moved since the
// last epoch's (LinkTuner::keep_bandwidth), and whether it connected the
// epoch's transport at all (then with no sample).
Bytes encode_link_value(const LinkSample& mine, bool moved, bool connected = true);
// The combiner's reduction of every rank's value, in rank order (a value
// that does not decode counts as a rank that could not time its links).
Bytes reduce_link_values(const std::vector<Bytes>& values);
// False for anything reduce_link_values did not write.
bool decode_link_summary(const Bytes& reduced, LinkSummary* out);

// Times the ring of `t`. Every rank of the transport must call it at the same
// point (nothing else in flight), with the same `bandwidth`: false times the
// latency only (empty frames; the sample's bandwidth is 0, the caller's to
// fill). On failure (a link broke, the deadline, `cancelled`: a rank did not
// connect) it has aborted the transport: the epoch is over. `cancelled` (may
// be empty) is asked every 20 ms at most while the probe waits.
Result<LinkSample> probe_ring(Transport& t, Deadline deadline, bool bandwidth = true,
                              const std::function<bool()>& cancelled = {});

// What the user pinned (Options::chunk_bytes, pipeline_depth): never adapted.
struct TuningPins {
  bool piece = false;
  bool window = false;
};

// The tuning for a link: `base` (the measured defaults or the pins) where the
// link needs no more, deterministic in its inputs.
Tuning tune_for_link(const LinkSample& link, const Tuning& base, TuningPins pins);

// "128 KiB frames x 4 in flight".
std::string describe_tuning(const Tuning& t);
std::string describe_link(const LinkSample& s);

// Which tuning each collective op uses. Ops keep the tuning they started with
// (a replay cuts an op the same way); a new tuning takes effect from a
// collective sequence number no rank has started, so every rank switches at the
// same op. Point-to-point ops keep the tuning agreed when the group formed.
class TuningSchedule {
 public:
  TuningSchedule() { reset(Tuning{}); }
  void reset(const Tuning& t) {
    base_ = t;
    steps_.assign(1, {0, t});
  }
  // From collective seq `from` on (and every later one until the next adopt).
  void adopt(uint64_t from, const Tuning& t);
  const Tuning& for_collective(uint64_t seq) const;
  const Tuning& for_point_to_point() const { return base_; }
  // Forgets steps no op at or after `seq` can use.
  void prune_before(uint64_t seq);

 private:
  Tuning base_;
  std::vector<std::pair<uint64_t, Tuning>> steps_;
};

}  // namespace rcoll
