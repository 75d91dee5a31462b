// The link tuner as a unit (runtime/link_tuning.h): the tuning every rank
// derives from every rank's link samples, when it takes effect, and what the
// user pinned. No sockets: the samples are made here.
#include "runtime/link_tuning.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rcoll {
namespace {

LinkSample link(double latency_us, double gbps, const std::string& host = "",
                const std::string& cpus = "") {
  LinkSample s;
  s.valid = true;
  s.latency_s = latency_us * 1e-6;
  s.bandwidth = gbps * 1e9;
  s.host = host;
  s.cpus = cpus;
  return s;
}

Op collective(uint64_t match_seq) {
  Op op;
  op.kind = OpKind::kAllreduce;
  op.match_seq = match_seq;
  return op;
}

Op send() {
  Op op;
  op.kind = OpKind::kSendRecv;
  return op;
}

// A link 2 ms away needs more bytes in flight than loopback's defaults.
const std::vector<LinkSample> kFar = {link(10, 3.0), link(2000, 1.5), link(10, 3.0)};
const std::vector<LinkSample> kNear = {link(10, 3.0), link(10, 3.0), link(10, 3.0)};

TEST(LinkTuner, TheSlowestLinkOfEveryRankSetsTheTuningFromTheFirstOp) {
  LinkTuner t{Options{}};
  const Tuning defaults;
  EXPECT_EQ(t.for_op(collective(0)).piece_bytes, defaults.piece_bytes);
  const Tuning far = t.adopt(0, kFar, "tcp", 3, 1.0);
  EXPECT_EQ(far.piece_bytes, tune_for_link(kFar[1], defaults, {}).piece_bytes);
  EXPECT_GT(far.piece_bytes, defaults.piece_bytes);
  EXPECT_EQ(t.for_op(collective(0)).piece_bytes, far.piece_bytes);
  EXPECT_EQ(t.for_op(send()).piece_bytes, far.piece_bytes) << "epoch 0 sets point-to-point's too";
  Counters c;
  t.fill(c);
  EXPECT_EQ(c.chunk_bytes, far.piece_bytes);
  EXPECT_EQ(c.pipeline_depth, far.window);
  EXPECT_DOUBLE_EQ(c.link_latency_us, 2000);
  EXPECT_NE(t.note().find("->"), std::string::npos) << t.note();
}

// After a recovery the new tuning applies from the collective no rank had
// started: ops before it keep how they were cut (their replays must cut them
// the same way on every rank), and sends keep the group's tuning.
TEST(LinkTuner, ARecoverysTuningAppliesFromTheResumeSequence) {
  LinkTuner t{Options{}};
  const Tuning near = t.adopt(0, kNear, "tcp", 3, 1.0);
  t.resume_from(9);
  const Tuning far = t.adopt(1, kFar, "tcp", 3, 1.0);
  ASSERT_NE(near.piece_bytes, far.piece_bytes);
  EXPECT_EQ(t.for_op(collective(8)).piece_bytes, near.piece_bytes);
  EXPECT_EQ(t.for_op(collective(9)).piece_bytes, far.piece_bytes);
  EXPECT_EQ(t.for_op(collective(12)).piece_bytes, far.piece_bytes);
  EXPECT_EQ(t.for_op(send()).piece_bytes, near.piece_bytes);
  EXPECT_EQ(t.piece_bytes(), far.piece_bytes) << "counters report the tuning of new collectives";
}

TEST(LinkTuner, PinnedFramesAndWindowAreNeverAdapted) {
  Options o;
  o.chunk_bytes = 12345;
  o.pipeline_depth = 3;
  LinkTuner t{o};
  const Tuning far = t.adopt(0, kFar, "ucx", 3, 1.0);
  EXPECT_EQ(far.piece_bytes, 12345u);
  EXPECT_EQ(far.window, 3);
  EXPECT_NE(t.note().find("pinned by options"), std::string::npos) << t.note();
}

// What follows from the transport and the ranks' CPUs, alike on every rank.
TEST(LinkTuner, TransportAndSharedCpusChooseTheBroadcasts) {
  LinkTuner t{Options{}};
  const std::vector<LinkSample> two_cpus = {link(10, 3.0, "a", "3"), link(10, 3.0, "a", "3"),
                                            link(10, 3.0, "a", "3"), link(10, 3.0, "a", "3")};
  const Tuning tcp = t.adopt(0, two_cpus, "tcp", 4, 1.0);
  EXPECT_TRUE(tcp.doubling_blocks);
  EXPECT_TRUE(tcp.few_shared_cpus);
  EXPECT_EQ(tcp.eager_broadcast_bytes, kEagerBroadcastBytesTcpStar);
  EXPECT_NE(t.note().find("broadcasts by star (the ranks share 2 CPUs)"), std::string::npos)
      << t.note();
  const Tuning tcp_hosts = t.adopt(0, kNear, "tcp", 3, 1.0);
  EXPECT_FALSE(tcp_hosts.few_shared_cpus) << "the samples say no host: CPUs unknown";
  EXPECT_EQ(tcp_hosts.eager_broadcast_bytes, kEagerBroadcastBytesTcp);
  const Tuning ucx = t.adopt(0, two_cpus, "ucx", 4, 1.0);
  EXPECT_FALSE(ucx.doubling_blocks);
  EXPECT_EQ(ucx.eager_broadcast_bytes, kEagerBroadcastBytes);
  const Tuning pair = t.adopt(0, {link(10, 3.0), link(10, 3.0)}, "tcp", 2, 1.0);
  EXPECT_EQ(pair.eager_broadcast_bytes, kEagerBroadcastBytes);
}

TEST(LinkTuner, AGroupShrunkToOneRankStartsOverFromTheDefaults) {
  LinkTuner t{Options{}};
  t.adopt(0, kFar, "tcp", 3, 1.0);
  t.start_over();
  EXPECT_EQ(t.for_op(collective(0)).piece_bytes, Tuning{}.piece_bytes);
  EXPECT_EQ(t.for_op(send()).piece_bytes, Tuning{}.piece_bytes);
}

// A recovery onto the same transport among the same ranks may keep the last
// epoch's bandwidths; epoch 0, another transport or another group may not.
TEST(LinkTuner, TheLastSamplesServeOnlyTheSameTransportAndRanks) {
  LinkTuner t{Options{}};
  EXPECT_EQ(t.last_samples(1, "tcp", 3), nullptr) << "nothing adopted yet";
  t.adopt(0, kFar, "tcp", 3, 1.0);
  ASSERT_NE(t.last_samples(1, "tcp", 3), nullptr);
  EXPECT_EQ(t.last_samples(1, "tcp", 3)->size(), 3u);
  EXPECT_EQ(t.last_samples(0, "tcp", 3), nullptr) << "epoch 0 (a new group) times everything";
  EXPECT_EQ(t.last_samples(1, "ucx", 3), nullptr) << "a fallback times the new transport";
  EXPECT_EQ(t.last_samples(1, "tcp", 2), nullptr) << "other ranks";
}

LinkSample latency_only(double latency_us) {
  LinkSample s = link(latency_us, 0);
  s.bandwidth = 0;
  return s;
}

TEST(LinkTuner, ALatencyOnlyTimingKeepsTheBandwidthsUnlessALinkMoved) {
  const std::vector<LinkSample> last = {link(10, 3.0), link(12, 2.0), link(9, 1.0)};
  std::vector<LinkSample> now = {latency_only(11), latency_only(40), latency_only(9)};
  ASSERT_TRUE(LinkTuner::keep_bandwidths(last, now))
      << "40 us against 12: more than doubled, but by under 100 us";
  EXPECT_DOUBLE_EQ(now[1].bandwidth, 2e9);
  EXPECT_DOUBLE_EQ(now[2].bandwidth, 1e9);
  EXPECT_DOUBLE_EQ(now[1].latency_s, 40e-6) << "the latency is the new one";
  // A link 3 ms away now (the degrading link of adaptive_chunking_link_degrades).
  std::vector<LinkSample> far = {latency_only(11), latency_only(3000), latency_only(9)};
  EXPECT_FALSE(LinkTuner::keep_bandwidths(last, far));
  EXPECT_DOUBLE_EQ(far[0].bandwidth, 0) << "left as they are: every rank times its bandwidth again";
  // Faster by far (the link that degraded recovers) counts too.
  const std::vector<LinkSample> slow = {link(3000, 0.1), link(3000, 0.1)};
  std::vector<LinkSample> back = {latency_only(10), latency_only(3000)};
  EXPECT_FALSE(LinkTuner::keep_bandwidths(slow, back));
  // A rank whose last sample was not valid has no bandwidth to keep.
  std::vector<LinkSample> again = {latency_only(10), latency_only(12), latency_only(9)};
  EXPECT_FALSE(LinkTuner::keep_bandwidths({link(10, 3.0), LinkSample{}, link(9, 1.0)}, again));
}

}  // namespace
}  // namespace rcoll
