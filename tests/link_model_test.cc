// Adaptive chunking: the tuning derived from measured links, the samples the
// ranks exchange, the schedule that makes every rank switch at the same op,
// and the probe that measures a link (ranks as threads over loopback TCP).
#include "runtime/link_model.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <thread>
#include <vector>

#include "rcoll/store.h"
#include "runtime/inject.h"
#include "tests/thread_ranks.h"
#include "transports/tcp/tcp_transport.h"

namespace rcoll {
namespace {

LinkSample link(double latency_us, double gbps, int64_t deadline_ms = 0) {
  LinkSample s;
  s.valid = true;
  s.latency_s = latency_us * 1e-6;
  s.bandwidth = gbps * 1e9;
  s.deadline_ms = deadline_ms;
  return s;
}

TEST(LinkModel, LoopbackKeepsTheMeasuredDefaults) {
  const Tuning base;
  // What this host's loopback measured (TCP 2 ranks, UCX 2 ranks, TCP 4 ranks on 2 cores).
  for (const LinkSample& s : {link(11.4, 3.05), link(2.5, 4.37), link(72.1, 0.32)}) {
    const Tuning t = tune_for_link(s, base, {});
    EXPECT_EQ(t.piece_bytes, base.piece_bytes) << describe_link(s);
    EXPECT_EQ(t.window, base.window) << describe_link(s);
  }
}

TEST(LinkModel, LongLinkKeepsTwiceTheBandwidthDelayProductInFlight) {
  const Tuning base;
  const LinkSample s = link(2000, 1.5);  // 2 ms one way, 1.5 GB/s: BDP 6 MB
  const Tuning t = tune_for_link(s, base, {});
  const double need = 2 * s.bandwidth * 2 * s.latency_s;
  EXPECT_EQ(t.piece_bytes, 1u << 20);  // frames grow first, up to their bound
  EXPECT_GE(static_cast<double>(t.piece_bytes) * t.window, need);
  EXPECT_LT(static_cast<double>(t.piece_bytes) * (t.window - 1), need);  // and no more than needed
  // Longer still: the window stops at its bound.
  const Tuning far = tune_for_link(link(50000, 10), base, {});
  EXPECT_EQ(far.piece_bytes, 1u << 20);
  EXPECT_EQ(far.window, 32);
  // A moderate product grows frames only.
  const Tuning mid = tune_for_link(link(200, 2.0), base, {});  // need 1.6 MB
  EXPECT_EQ(mid.window, base.window);
  EXPECT_GT(mid.piece_bytes, base.piece_bytes);
  EXPECT_EQ(mid.piece_bytes % 4096, 0u);
}

TEST(LinkModel, SlowLinkOrShortDeadlineBoundsTheFrame) {
  const Tuning base;
  // 10 MB/s: a 128 KiB frame would hold the link 13 ms; at most 5 ms of it.
  const Tuning slow = tune_for_link(link(100, 0.01), base, {});
  EXPECT_LE(static_cast<double>(slow.piece_bytes) / 0.01e9, 0.005);
  EXPECT_GE(slow.piece_bytes, 16u << 10);
  // A 100 ms op deadline at 200 MB/s: at most 1/16 of it per frame (1.25 MB
  // would be allowed), and a 10 ms deadline: 125 KB.
  EXPECT_EQ(tune_for_link(link(100, 0.2, 100), base, {}).piece_bytes, base.piece_bytes);
  const Tuning tight = tune_for_link(link(100, 0.2, 10), base, {});
  EXPECT_LE(tight.piece_bytes, 125000u);
  // Never below the floor, however slow.
  EXPECT_EQ(tune_for_link(link(100, 0.0001), base, {}).piece_bytes, 16u << 10);
}

// A transfer with nothing to pipeline behind it (a 2-rank broadcast) takes
// frames as large as the link allows: 1 MiB on loopback, 5 ms of a slow link,
// 1/16 of a short op deadline; never below the ordinary frame.
TEST(LinkModel, StreamFramesAreAsLargeAsTheLinkAllows) {
  const Tuning base;
  Op op;  // a 64 MiB broadcast
  op.kind = OpKind::kBroadcast;
  op.in = op.out = Buffer{nullptr, 16u << 20, DataType::kFloat32};
  const Tuning loopback = tune_for_link(link(11.4, 3.05), base, {});
  EXPECT_EQ(loopback.piece_bytes, base.piece_bytes);
  EXPECT_EQ(loopback.stream_piece_bytes, 1u << 20);
  EXPECT_EQ(broadcast_piece_bytes(op, 2, loopback), 1u << 20);
  EXPECT_EQ(broadcast_piece_bytes(op, 3, loopback), base.piece_bytes);  // a chain forwards: pipeline it
  const Tuning slow = tune_for_link(link(100, 0.05), base, {});     // 50 MB/s: 5 ms = 250 KB
  EXPECT_LE(slow.stream_piece_bytes, 250000u);
  EXPECT_GT(slow.stream_piece_bytes, base.piece_bytes);
  const Tuning tight = tune_for_link(link(100, 0.2, 10), base, {});  // 1/16 of 10 ms at 200 MB/s
  EXPECT_LE(tight.stream_piece_bytes, 125000u);
  EXPECT_GE(tight.stream_piece_bytes, tight.piece_bytes);
  // Unmeasured or pinned frames: broadcasts use the ordinary frame.
  EXPECT_EQ(broadcast_piece_bytes(op, 2, tune_for_link(LinkSample{}, base, {})), base.piece_bytes);
  Tuning pinned = base;
  pinned.piece_bytes = 64 * 1024;
  EXPECT_EQ(broadcast_piece_bytes(op, 2, tune_for_link(link(11.4, 3.05), pinned, {true, false})), 64u * 1024);
}

TEST(LinkModel, PinnedValuesAreNeverAdapted) {
  Tuning base;
  base.piece_bytes = 64 * 1024;
  base.window = 2;
  const LinkSample far = link(2000, 1.5);
  Tuning t = tune_for_link(far, base, {true, true});
  EXPECT_EQ(t.piece_bytes, 64u * 1024);
  EXPECT_EQ(t.window, 2);
  t = tune_for_link(far, base, {true, false});  // frames pinned: the window covers the product
  EXPECT_EQ(t.piece_bytes, 64u * 1024);
  EXPECT_EQ(t.window, 32);
  t = tune_for_link(far, base, {false, true});
  EXPECT_EQ(t.window, 2);
  EXPECT_EQ(t.piece_bytes, 1u << 20);
}

TEST(LinkModel, UnmeasuredLinkKeepsTheBase) {
  const Tuning base;
  const Tuning t = tune_for_link(LinkSample{}, base, {});
  EXPECT_EQ(t.piece_bytes, base.piece_bytes);
  EXPECT_EQ(t.window, base.window);
}

TEST(LinkModel, SamplesRoundTripAndMalformedOnesAreIgnored) {
  const LinkSample s = link(12.5, 2.25, 3000);
  const LinkSample back = decode_sample(encode_sample(s));
  ASSERT_TRUE(back.valid);
  EXPECT_DOUBLE_EQ(back.latency_s, s.latency_s);
  EXPECT_DOUBLE_EQ(back.bandwidth, s.bandwidth);
  EXPECT_EQ(back.deadline_ms, 3000);
  EXPECT_EQ(encode_sample(LinkSample{}), "none");
  for (const char* bad : {"none", "", "1e-5", "1e-5 x 0", "-1 5e9 0", "1e-5 0 0", "1e-5 inf 0", "1e-5 5e9 -3", "nan 5e9 0"}) {
    EXPECT_FALSE(decode_sample(bad).valid) << "'" << bad << "'";
  }
}

LinkSample on(const std::string& host, const std::string& cpus) {
  LinkSample s = link(10, 3.0);
  s.host = host;
  s.cpus = cpus;
  return s;
}

TEST(LinkModel, SamplesCarryTheHostAndItsCpus) {
  LinkSample here = link(10, 3.0);
  describe_this_host(&here);
  ASSERT_FALSE(here.host.empty()) << "no /proc/sys/kernel/random/boot_id?";
  ASSERT_FALSE(here.cpus.empty());
  const LinkSample back = decode_sample(encode_sample(here));
  ASSERT_TRUE(back.valid);
  EXPECT_EQ(back.host, here.host);
  EXPECT_EQ(back.cpus, here.cpus);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(shared_cpus({here}), CPU_COUNT(&set));
  // Without them (an older rank's sample) the sample is still valid.
  EXPECT_TRUE(decode_sample("1e-5 5e9 0").valid);
  EXPECT_TRUE(decode_sample("1e-5 5e9 0").host.empty());
  for (const char* bad : {"1e-5 5e9 0 host", "1e-5 5e9 0 host 3g", "1e-5 5e9 0 host -1"}) {
    EXPECT_FALSE(decode_sample(bad).valid) << "'" << bad << "'";
  }
}

// The union of the masks, on one host only; any sample without a host, or
// two hosts, and the group's CPUs are unknown (0).
TEST(LinkModel, SharedCpusAreTheUnionOnOneHost) {
  EXPECT_EQ(shared_cpus({on("a", "3"), on("a", "3"), on("a", "3"), on("a", "3")}), 2);
  EXPECT_EQ(shared_cpus({on("a", "1"), on("a", "2")}), 2) << "two ranks bound to one CPU each";
  EXPECT_EQ(shared_cpus({on("a", "f0"), on("a", "1")}), 5);
  EXPECT_EQ(shared_cpus({on("a", "100000000000000000000000000000001"), on("a", "3")}), 3);
  EXPECT_EQ(shared_cpus({on("a", "3"), on("b", "3")}), 0);
  EXPECT_EQ(shared_cpus({on("a", "3"), link(10, 3.0)}), 0);
  EXPECT_EQ(shared_cpus({on("a", "3"), LinkSample{}}), 0);
}

TEST(LinkModel, TheWorstLinkOfAllRanksSetsTheTuning) {
  const LinkSample w = worst_link({link(10, 3.0), LinkSample{}, link(40, 5.0, 2000), link(20, 1.0, 500)});
  ASSERT_TRUE(w.valid);
  EXPECT_DOUBLE_EQ(w.latency_s, 40e-6);
  EXPECT_DOUBLE_EQ(w.bandwidth, 1e9);
  EXPECT_EQ(w.deadline_ms, 500);
  EXPECT_FALSE(worst_link({LinkSample{}, LinkSample{}}).valid);
  // The same samples in any order give the same answer (every rank reads them in rank order anyway).
  const LinkSample v = worst_link({link(20, 1.0, 500), link(40, 5.0, 2000), link(10, 3.0)});
  EXPECT_DOUBLE_EQ(v.latency_s, w.latency_s);
  EXPECT_DOUBLE_EQ(v.bandwidth, w.bandwidth);
}

Tuning frames(size_t piece) {
  Tuning t;
  t.piece_bytes = piece;
  return t;
}

TEST(TuningSchedule, OpsSwitchAtTheAgreedSequence) {
  TuningSchedule s;
  s.reset(frames(1000));
  EXPECT_EQ(s.for_collective(1).piece_bytes, 1000u);
  s.adopt(7, frames(2000));  // a recovery while some rank had started op 6
  EXPECT_EQ(s.for_collective(6).piece_bytes, 1000u);  // op 6 keeps how it was cut
  EXPECT_EQ(s.for_collective(7).piece_bytes, 2000u);
  EXPECT_EQ(s.for_point_to_point().piece_bytes, 1000u);  // agreed when the group formed
  EXPECT_EQ(s.for_collective(UINT64_MAX).piece_bytes, 2000u);  // and every later op
}

TEST(TuningSchedule, ASecondRecoveryBeforeTheSwitchKeepsEveryRankInStep) {
  // Recovery 1 agrees "from op 7". Rank A then starts op 7 (with the new
  // tuning); rank B has not when recovery 2 agrees "from op 8": both must cut
  // op 7 alike, so B keeps the step at 7.
  TuningSchedule a, b;
  for (TuningSchedule* s : {&a, &b}) {
    s->reset(frames(1000));
    s->adopt(7, frames(2000));
  }
  EXPECT_EQ(a.for_collective(7).piece_bytes, 2000u);
  a.prune_before(7);
  a.adopt(8, frames(3000));
  b.adopt(8, frames(3000));
  EXPECT_EQ(b.for_collective(7).piece_bytes, a.for_collective(7).piece_bytes);
  EXPECT_EQ(b.for_collective(8).piece_bytes, 3000u);
  EXPECT_EQ(a.for_collective(8).piece_bytes, 3000u);
  // Recovery 2 with nobody past op 6 restates "from op 7": the newer tuning wins there.
  TuningSchedule c;
  c.reset(frames(1000));
  c.adopt(7, frames(2000));
  c.adopt(7, frames(3000));
  EXPECT_EQ(c.for_collective(6).piece_bytes, 1000u);
  EXPECT_EQ(c.for_collective(7).piece_bytes, 3000u);
}

TEST(TuningSchedule, PruningKeepsWhatLaterOpsNeed) {
  TuningSchedule s;
  s.reset(frames(1000));
  s.adopt(5, frames(2000));
  s.adopt(9, frames(3000));
  s.prune_before(6);
  EXPECT_EQ(s.for_collective(6).piece_bytes, 2000u);
  EXPECT_EQ(s.for_collective(9).piece_bytes, 3000u);
  EXPECT_EQ(s.for_point_to_point().piece_bytes, 1000u);
}

TEST(LinkLatencyFault, Parses) {
  auto f = parse_fault_spec("link-latency:us=2000;link-latency:us=5,rank=1,epoch=2");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f.value().size(), 2u);
  EXPECT_EQ(f.value()[0].kind, FaultKind::kLinkLatency);
  EXPECT_EQ(f.value()[0].us, 2000);
  EXPECT_EQ(f.value()[0].rank, -1);
  EXPECT_EQ(f.value()[1].rank, 1);
  EXPECT_EQ(f.value()[1].epoch, 2u);
  for (const char* bad : {"link-latency", "link-latency:us=0", "link-latency:us=x", "link-latency:us=5,op=3",
                          "random:rate=0.5,seed=1,kinds=link-latency"}) {
    auto r = parse_fault_spec(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

// Stalls once: the first frame with a payload this rank sends waits `stall`
// before it goes, as if the rank were descheduled in the middle of a burst.
// Counts the payload bytes it sends.
class StallOnceTransport final : public Transport {
 public:
  StallOnceTransport(Transport& inner, std::chrono::milliseconds stall)
      : inner_(inner), stall_(stall) {}
  const char* name() const override { return inner_.name(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  uint32_t epoch() const override { return inner_.epoch(); }
  void post_send(int peer, const FrameHeader& header, const void* data, Request* req) override {
    if (!stalled_ && header.payload_bytes > 0) {
      stalled_ = true;
      std::this_thread::sleep_for(stall_);
    }
    payload_sent_ += header.payload_bytes;
    inner_.post_send(peer, header, data, req);
  }
  void post_recv(int peer, const FrameHeader& expected, void* dst, Request* req) override {
    inner_.post_recv(peer, expected, dst, req);
  }
  void post_background_recv(int peer, const FrameHeader& expected, Request* req) override {
    inner_.post_background_recv(peer, expected, req);
  }
  void progress(Deadline until) override { inner_.progress(until); }
  void abort(const Status& why) override { inner_.abort(why); }
  void break_link(int peer) override { inner_.break_link(peer); }
  uint64_t bytes_sent() const override { return inner_.bytes_sent(); }
  uint64_t bytes_received() const override { return inner_.bytes_received(); }
  bool stalled() const { return stalled_; }
  uint64_t payload_sent() const { return payload_sent_; }

 private:
  Transport& inner_;
  const std::chrono::milliseconds stall_;
  bool stalled_ = false;
  uint64_t payload_sent_ = 0;
};

// The probe times more than one bandwidth burst, and one stalled burst does
// not set the sample: rank 1 stalls 600 ms before its first burst frame, which
// holds both ranks' first burst (rank 0 waits for rank 1's frames). Had every
// byte rank 1 sent moved in that burst, it would still show at most
// bytes / 600 ms; both samples must show several times that. (With one
// burst, a stall like this set the tuning for a whole epoch.)
TEST(LinkProbe, OneStalledBurstDoesNotSetTheSample) {
  using namespace std::chrono_literals;
  constexpr auto kStall = 600ms;
  std::vector<LinkSample> samples(2);
  uint64_t stalled_rank_sent = 0;
  testing_support::run_thread_ranks(2, [&](int r, std::shared_ptr<Store> store) {
    TcpConnectParams p;
    p.rank = r;
    p.size = 2;
    p.store = std::move(store);
    p.ifname_spec = "=lo";
    p.deadline = Deadline::after(5000ms);
    auto t = connect_tcp_transport(p);
    ASSERT_TRUE(t.ok()) << "rank " << r << ": " << t.status().to_string();
    StallOnceTransport stalling(*t.value(), kStall);
    Transport& probed = r == 1 ? static_cast<Transport&>(stalling) : *t.value();
    auto sample = probe_ring(probed, Deadline::after(20000ms));
    ASSERT_TRUE(sample.ok()) << "rank " << r << ": " << sample.status().to_string();
    samples[static_cast<size_t>(r)] = sample.value();
    if (r == 1) {
      EXPECT_TRUE(stalling.stalled())
          << "the probe sent no frame with a payload: nothing was stalled";
      stalled_rank_sent = stalling.payload_sent();
    }
  });
  const double stalled_bound =
      static_cast<double>(stalled_rank_sent) / std::chrono::duration<double>(kStall).count();
  ASSERT_GT(stalled_rank_sent, 0u);
  for (int r = 0; r < 2; ++r) {
    const LinkSample& s = samples[static_cast<size_t>(r)];
    ASSERT_TRUE(s.valid) << "rank " << r;
    EXPECT_GT(s.bandwidth, 4 * stalled_bound) << "rank " << r << " measured " << s.bandwidth / 1e6
                                              << " MB/s: the stalled burst set the sample";
  }
}

}  // namespace
}  // namespace rcoll
