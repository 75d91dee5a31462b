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

}  // namespace
}  // namespace rcoll
