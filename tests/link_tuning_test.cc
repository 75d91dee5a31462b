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
// Every rank's sample through the store exchange's reduction, as a rank
// reads it, adopted as rank 0 would.
LinkSummary reduced(const std::vector<LinkSample>& samples, const std::vector<bool>& moved = {}) {
  std::vector<Bytes> values;
  for (size_t q = 0; q < samples.size(); ++q)
    values.push_back(encode_link_value(samples[q], q < moved.size() && moved[q]));
  LinkSummary out;
  EXPECT_TRUE(decode_link_summary(reduce_link_values(values), &out));
  return out;
}

Tuning adopt(LinkTuner& t, uint32_t epoch, const std::vector<LinkSample>& samples,
             const std::string& transport, int size) {
  return t.adopt(epoch, reduced(samples), samples.front(), transport, size, 1.0);
}

const std::vector<LinkSample> kFar = {link(10, 3.0), link(2000, 1.5), link(10, 3.0)};
const std::vector<LinkSample> kNear = {link(10, 3.0), link(10, 3.0), link(10, 3.0)};

TEST(LinkTuner, TheSlowestLinkOfEveryRankSetsTheTuningFromTheFirstOp) {
  LinkTuner t{Options{}};
  const Tuning defaults;
  EXPECT_EQ(t.for_op(collective(0)).piece_bytes, defaults.piece_bytes);
  const Tuning far = adopt(t, 0, kFar, "tcp", 3);
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
  const Tuning near = adopt(t, 0, kNear, "tcp", 3);
  t.resume_from(9);
  const Tuning far = adopt(t, 1, kFar, "tcp", 3);
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
  const Tuning far = adopt(t, 0, kFar, "ucx", 3);
  EXPECT_EQ(far.piece_bytes, 12345u);
  EXPECT_EQ(far.window, 3);
  EXPECT_NE(t.note().find("pinned by options"), std::string::npos) << t.note();
}

// What follows from the transport and the ranks' CPUs, alike on every rank.
TEST(LinkTuner, TransportAndSharedCpusChooseTheBroadcasts) {
  LinkTuner t{Options{}};
  const std::vector<LinkSample> two_cpus = {link(10, 3.0, "a", "3"), link(10, 3.0, "a", "3"),
                                            link(10, 3.0, "a", "3"), link(10, 3.0, "a", "3")};
  const Tuning tcp = adopt(t, 0, two_cpus, "tcp", 4);
  EXPECT_TRUE(tcp.doubling_blocks);
  EXPECT_TRUE(tcp.few_shared_cpus);
  EXPECT_EQ(tcp.eager_broadcast_bytes, kEagerBroadcastBytesTcpStar);
  EXPECT_NE(t.note().find("broadcasts by star (the ranks share 2 CPUs)"), std::string::npos)
      << t.note();
  const Tuning tcp_hosts = adopt(t, 0, kNear, "tcp", 3);
  EXPECT_FALSE(tcp_hosts.few_shared_cpus) << "the samples say no host: CPUs unknown";
  EXPECT_EQ(tcp_hosts.eager_broadcast_bytes, kEagerBroadcastBytesTcp);
  const Tuning ucx = adopt(t, 0, two_cpus, "ucx", 4);
  EXPECT_FALSE(ucx.doubling_blocks);
  EXPECT_EQ(ucx.eager_broadcast_bytes, kEagerBroadcastBytes);
  const Tuning pair = adopt(t, 0, {link(10, 3.0), link(10, 3.0)}, "tcp", 2);
  EXPECT_EQ(pair.eager_broadcast_bytes, kEagerBroadcastBytes);
}

TEST(LinkTuner, AGroupShrunkToOneRankStartsOverFromTheDefaults) {
  LinkTuner t{Options{}};
  adopt(t, 0, kFar, "tcp", 3);
  t.start_over();
  EXPECT_EQ(t.for_op(collective(0)).piece_bytes, Tuning{}.piece_bytes);
  EXPECT_EQ(t.for_op(send()).piece_bytes, Tuning{}.piece_bytes);
}

// A recovery onto the same transport among the same ranks may keep the last
// epoch's bandwidth; epoch 0, another transport or another group may not.
TEST(LinkTuner, TheLastSampleServesOnlyTheSameTransportAndRanks) {
  LinkTuner t{Options{}};
  EXPECT_EQ(t.last_sample(1, "tcp", 3), nullptr) << "nothing adopted yet";
  adopt(t, 0, kFar, "tcp", 3);
  ASSERT_NE(t.last_sample(1, "tcp", 3), nullptr);
  EXPECT_DOUBLE_EQ(t.last_sample(1, "tcp", 3)->latency_s, kFar.front().latency_s)
      << "this rank's own";
  EXPECT_EQ(t.last_sample(0, "tcp", 3), nullptr) << "epoch 0 (a new group) times everything";
  EXPECT_EQ(t.last_sample(1, "ucx", 3), nullptr) << "a fallback times the new transport";
  EXPECT_EQ(t.last_sample(1, "tcp", 2), nullptr) << "other ranks";
}

LinkSample latency_only(double latency_us) {
  LinkSample s = link(latency_us, 0);
  s.bandwidth = 1;  // the placeholder a sample needs to decode
  return s;
}

TEST(LinkTuner, ALatencyOnlyTimingKeepsTheBandwidthUnlessTheLinkMoved) {
  LinkSample now = latency_only(40);
  ASSERT_TRUE(LinkTuner::keep_bandwidth(link(12, 2.0), now))
      << "40 us against 12: more than doubled, but by under 100 us";
  EXPECT_DOUBLE_EQ(now.bandwidth, 2e9);
  EXPECT_DOUBLE_EQ(now.latency_s, 40e-6) << "the latency is the new one";
  // A link 3 ms away now (the degrading link of adaptive_chunking_link_degrades).
  LinkSample far = latency_only(3000);
  EXPECT_FALSE(LinkTuner::keep_bandwidth(link(12, 2.0), far));
  EXPECT_DOUBLE_EQ(far.bandwidth, 1) << "left as it is: every rank times its bandwidth again";
  // Faster by far (the link that degraded recovers) counts too.
  LinkSample back = latency_only(10);
  EXPECT_FALSE(LinkTuner::keep_bandwidth(link(3000, 0.1), back));
  // A rank whose last sample was not valid has no bandwidth to keep.
  LinkSample again = latency_only(12);
  EXPECT_FALSE(LinkTuner::keep_bandwidth(LinkSample{}, again));
}

// What every rank reads of the link timings: the worst link, the CPUs they
// share, who could not time theirs, and whether any latency moved. O(1)
// bytes, however many ranks.
TEST(LinkTuner, EveryRanksSampleIsReducedToWhatTheTunerAdopts) {
  const std::vector<LinkSample> two_cpus = {link(10, 3.0, "boot", "1"), link(30, 2.0, "boot", "2"),
                                            link(20, 1.0, "boot", "1")};
  LinkSummary s = reduced(two_cpus, {false, false, false});
  EXPECT_DOUBLE_EQ(s.worst.latency_s, 30e-6);
  EXPECT_DOUBLE_EQ(s.worst.bandwidth, 1e9);
  EXPECT_EQ(s.shared_cpus, 2);
  EXPECT_TRUE(s.unmeasured.empty());
  EXPECT_FALSE(s.moved);
  s = reduced({link(10, 3.0), LinkSample{}, link(20, 1.0), LinkSample{}},
              {false, false, true, false});
  EXPECT_EQ(s.unmeasured, (std::vector<int>{1, 3}));
  EXPECT_TRUE(s.moved) << "rank 2's latency moved: every rank times its bandwidth again";
  EXPECT_DOUBLE_EQ(s.worst.latency_s, 20e-6);
  // A value that does not decode is a rank that could not time its links.
  const Bytes reduced_bad =
      reduce_link_values({encode_link_value(link(10, 3.0), false), Bytes{1, 2, 3}});
  ASSERT_TRUE(decode_link_summary(reduced_bad, &s));
  EXPECT_EQ(s.unmeasured, (std::vector<int>{1}));
  EXPECT_FALSE(decode_link_summary(Bytes{1, 2, 3}, &s));
  std::vector<LinkSample> many(4096, link(10, 3.0));
  EXPECT_LT(reduce_link_values(std::vector<Bytes>(4096, encode_link_value(many[0], false))).size(),
            100u);
}

}  // namespace
}  // namespace rcoll
