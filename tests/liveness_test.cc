// The liveness side channel (runtime/liveness.h): heartbeats carry each rank's
// state (to its ring neighbours, and to the peers that want it), abort
// notices reach every peer within milliseconds, a clean shutdown
// is not a death, a real process death (exit, SIGKILL) is reported within the
// budget, a SIGSTOPped process turns silent and comes back after SIGCONT, and a
// mesh to a rank that never starts fails within the connect deadline naming it.
// A stopped rank's ring neighbours tell every other rank that it is silent,
// and that it is back.
// Several ranks share this process (threads); the real faults use fork()ed
// children (this binary re-executed), which this test starts, stops and kills
// by pid. Loopback only.
#include "runtime/liveness.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rcoll/store.h"
#include "transports/tcp/on_demand_links.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;
using Kind = LivenessEvent::Kind;

long ms_since(Clock::time_point t) {
  return static_cast<long>(std::chrono::duration_cast<Millis>(Clock::now() - t).count());
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kPeerAborted: return "aborted";
    case Kind::kPeerDead: return "dead";
    case Kind::kPeerSilent: return "silent";
    case Kind::kPeerBack: return "back";
  }
  return "?";
}

// What one rank's listener saw, with arrival times.
class Events {
 public:
  struct Seen {
    LivenessEvent event;
    Clock::time_point at;
  };
  std::function<void(const LivenessEvent&)> listener() {
    return [this](const LivenessEvent& e) {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(Seen{e, Clock::now()});
      cv_.notify_all();
    };
  }
  // The first event of this kind from this peer, waiting up to `timeout`.
  std::optional<Seen> wait_for(Kind kind, int peer, Millis timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<Seen> found;
    cv_.wait_for(lock, timeout, [&] {
      for (const Seen& s : seen_) {
        if (s.event.kind == kind && s.event.peer == peer) {
          found = s;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  int count(Kind kind) const {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const Seen& s : seen_) n += s.event.kind == kind;
    return n;
  }
  std::string describe() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const Seen& s : seen_) {
      out += std::string(" [") + kind_name(s.event.kind) + " peer " + std::to_string(s.event.peer) + " epoch " +
             std::to_string(s.event.epoch) + ": " + s.event.reason + "]";
    }
    return out.empty() ? " (none)" : out;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Seen> seen_;
};

class LivenessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    auto s = start_tcp_store_server(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s).value();
  }

  // One client per rank, as separate processes would have.
  std::shared_ptr<Store> client() const {
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = server_->port();
    o.connect_timeout = 3000ms;
    auto c = connect_tcp_store(o);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? c.value() : nullptr;
  }

  LivenessParams params(int rank, int size, Millis interval, Millis budget,
                        bool to_all = false) const {
    LivenessParams p;
    p.to_all = to_all;
    p.rank = rank;
    p.size = size;
    p.store = client();
    p.ifname_spec = "=lo";
    p.prefer_loopback = true;
    p.job_token = "liveness-test";
    p.interval = interval;
    p.budget = budget;
    p.connect_deadline = Deadline::after(5s);
    return p;
  }

  // n ranks in this process, each started on its own thread (start blocks
  // until the mesh is complete), each with its listener set.
  // With `skip`, that rank is left out (another process runs it).
  std::vector<std::unique_ptr<Liveness>> start_all(int n, Millis interval, Millis budget,
                                                   std::vector<Events>* events, bool to_all = false,
                                                   int skip = -1) {
    return start_all(n, interval, budget, events, to_all, std::vector<int>{skip});
  }
  // The same, leaving out every rank of `skip`.
  std::vector<std::unique_ptr<Liveness>> start_all(int n, Millis interval, Millis budget,
                                                   std::vector<Events>* events, bool to_all,
                                                   const std::vector<int>& skip) {
    std::vector<std::unique_ptr<Liveness>> out(n);
    std::vector<Status> errors(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      if (std::find(skip.begin(), skip.end(), r) != skip.end()) continue;
      threads.emplace_back([&, r] {
        auto l = Liveness::start(params(r, n, interval, budget, to_all));
        if (!l.ok()) {
          errors[r] = l.status();
          return;
        }
        out[r] = std::move(l).value();
        out[r]->set_listener((*events)[r].listener());
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) EXPECT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r].to_string();
    return out;
  }

  std::unique_ptr<TcpStoreServer> server_;
};

// Every rank's state reaches every rank: with heartbeats to all, by itself;
// with the ring (the default), once each rank wants every peer's.
class LivenessModes : public LivenessTest, public ::testing::WithParamInterface<bool> {};

TEST_P(LivenessModes, HeartbeatsCarryEachRanksState) {
  constexpr int n = 5;
  constexpr Millis interval = 50ms;
  const bool to_all = GetParam();
  std::vector<Events> events(n);
  auto ranks = start_all(n, interval, 2000ms, &events, to_all);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);

  // Neither in_comm nor epoch changes, so only the periodic heartbeat carries it.
  const auto t0 = Clock::now();
  for (int r = 0; r < n; ++r) ranks[r]->set_local(RankState{100u + static_cast<uint64_t>(r), false, 0});
  if (!to_all) {
    for (int r = 0; r < n; ++r) ranks[r]->want(-1);
  }
  bool all_seen = false;
  while (!all_seen && ms_since(t0) < 2 * interval.count() + 100) {
    all_seen = true;
    for (int me = 0; me < n; ++me) {
      for (int r = 0; r < n; ++r) {
        if (r != me && ranks[me]->peer(r).state.op_seq != 100u + r) all_seen = false;
      }
    }
    if (!all_seen) std::this_thread::sleep_for(2ms);
  }
  const long took = ms_since(t0);
  EXPECT_TRUE(all_seen) << "after " << took << " ms";
  EXPECT_LE(took, 2 * interval.count() + 30) << "state took longer than about two intervals to arrive";
  for (int me = 0; me < n; ++me) {
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      const PeerView v = ranks[me]->peer(r);
      EXPECT_EQ(v.health, PeerHealth::kAlive) << "rank " << me << " about rank " << r;
      EXPECT_TRUE(v.current) << "rank " << me << " about rank " << r;
      EXPECT_FALSE(v.state.in_comm);
      EXPECT_LE(ms_since(v.last_heard), 3 * interval.count());
      EXPECT_TRUE(contains(v.address, "127.0.0.1:")) << v.address;
    }
    EXPECT_EQ(events[me].count(Kind::kPeerSilent) + events[me].count(Kind::kPeerDead), 0)
        << "rank " << me << ":" << events[me].describe();
    EXPECT_EQ(ranks[me]->highest_aborted_epoch(), -1);
  }
}

INSTANTIATE_TEST_SUITE_P(Heartbeats, LivenessModes, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "ToAll" : "Ring");
                         });

// The ring: a rank hears its two neighbours and no one else until it wants a
// peer; the wanted peer's view turns current, and it heartbeats here for the
// lease (two budgets) only: unrenewed, the view goes stale and the
// heartbeats stop. A rank it never wanted is never judged silent here.
TEST_F(LivenessTest, AWantedPeerHeartbeatsForTheLeaseOnly) {
  constexpr int n = 6;
  constexpr Millis interval = 50ms, budget = 400ms;  // lease 800 ms
  std::vector<Events> events(n);
  auto ranks = start_all(n, interval, budget, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);
  ranks[3]->set_local(RankState{33, true, 0});
  std::this_thread::sleep_for(3 * interval);
  for (int q : {1, 5}) EXPECT_TRUE(ranks[0]->peer(q).current) << "neighbour " << q;
  for (int q : {2, 3, 4})
    EXPECT_FALSE(ranks[0]->peer(q).current) << "rank " << q << " is no neighbour of rank 0";
  EXPECT_NE(ranks[0]->peer(3).state.op_seq, 33u) << "rank 3 heartbeat to rank 0 unasked";

  const auto t0 = Clock::now();
  ranks[0]->want(3);
  while (!ranks[0]->peer(3).current && ms_since(t0) < 2000) std::this_thread::sleep_for(1ms);
  const long took = ms_since(t0);
  ASSERT_TRUE(ranks[0]->peer(3).current) << "rank 3 never answered the want (" << took << " ms)";
  EXPECT_EQ(ranks[0]->peer(3).state.op_seq, 33u);
  EXPECT_TRUE(ranks[0]->peer(3).state.in_comm);
  // Within the lease it goes on heartbeating here.
  std::this_thread::sleep_for(300ms);
  EXPECT_LE(ms_since(ranks[0]->peer(3).last_heard), 3 * interval.count());
  EXPECT_TRUE(ranks[0]->peer(3).current);
  // Not renewed: past the lease the view is stale and no heartbeat comes.
  std::this_thread::sleep_for(800ms);
  EXPECT_FALSE(ranks[0]->peer(3).current);
  const auto last = ranks[0]->peer(3).last_heard;
  std::this_thread::sleep_for(4 * interval);
  EXPECT_EQ(ranks[0]->peer(3).last_heard, last) << "rank 3 heartbeats past the lease";
  // Nobody unasked, nobody stale, is called silent.
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(events[r].count(Kind::kPeerSilent), 0) << "rank " << r << ":" << events[r].describe();
    EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << "rank " << r << ":" << events[r].describe();
  }
}

// A new epoch is sent at once, not at the next tick. Entering or leaving an op
// rides the periodic heartbeat (waking the liveness thread twice per op would
// cost small ops latency): it arrives within one interval.
TEST_F(LivenessTest, EpochChangesAreSentImmediatelyOpStateWithinAnInterval) {
  constexpr int n = 2;
  std::vector<Events> events(n);
  auto ranks = start_all(n, 2000ms, 10000ms, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);
  std::this_thread::sleep_for(50ms);  // past the first (immediate) heartbeats

  auto wait_until = [&](auto pred, long limit_ms) {
    const auto t0 = Clock::now();
    while (!pred() && ms_since(t0) < limit_ms) std::this_thread::sleep_for(1ms);
    return ms_since(t0);
  };
  ranks[1]->set_local(RankState{7, true, 0});
  long took = wait_until([&] { return ranks[0]->peer(1).state.in_comm; }, 3000);
  EXPECT_TRUE(ranks[0]->peer(1).state.in_comm);
  EXPECT_EQ(ranks[0]->peer(1).state.op_seq, 7u);
  EXPECT_LT(took, 2600) << "entering an op was not sent within one heartbeat interval";

  ranks[1]->set_local(RankState{7, false, 0});
  took = wait_until([&] { return !ranks[0]->peer(1).state.in_comm; }, 3000);
  EXPECT_FALSE(ranks[0]->peer(1).state.in_comm);
  EXPECT_LT(took, 2600) << "leaving an op was not sent within one heartbeat interval";

  ranks[1]->set_local(RankState{8, false, 3});
  took = wait_until([&] { return ranks[0]->peer(1).state.epoch == 3; }, 1000);
  EXPECT_EQ(ranks[0]->peer(1).state.epoch, 3u);
  EXPECT_EQ(ranks[0]->peer(1).state.op_seq, 8u);
  EXPECT_LT(took, 100) << "a new epoch waited for the 2 s heartbeat";

  // A burst of changes from another thread neither blocks the caller nor loses the last state.
  const auto t0 = Clock::now();
  for (int i = 0; i < 10000; ++i) ranks[1]->set_local(RankState{1000u + i, (i % 2) == 0, 3});
  EXPECT_LT(ms_since(t0), 500) << "set_local blocked its caller";
  took = wait_until([&] { return ranks[0]->peer(1).state.op_seq == 10999u; }, 3000);
  EXPECT_EQ(ranks[0]->peer(1).state.op_seq, 10999u);
  EXPECT_FALSE(ranks[0]->peer(1).state.in_comm);
  EXPECT_LT(took, 2600) << "the last state of a burst did not ride the next heartbeat";
}

TEST_F(LivenessTest, AbortNoticeReachesEveryPeerWithin50ms) {
  constexpr int n = 4;
  std::vector<Events> events(n);
  auto ranks = start_all(n, 100ms, 2000ms, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);

  const std::string reason = "allreduce seq 17 made no progress for 1500 ms";
  const auto t0 = Clock::now();
  ranks[2]->announce_abort(3, reason);
  EXPECT_LT(ms_since(t0), 10) << "announce_abort blocked its caller";
  for (int r = 0; r < n; ++r) {
    if (r == 2) continue;
    auto seen = events[r].wait_for(Kind::kPeerAborted, 2, 1000ms);
    ASSERT_TRUE(seen.has_value()) << "rank " << r << " never heard of the abort:" << events[r].describe();
    const long took = static_cast<long>(std::chrono::duration_cast<Millis>(seen->at - t0).count());
    EXPECT_LE(took, 50) << "rank " << r;
    EXPECT_EQ(seen->event.epoch, 3u);
    EXPECT_EQ(seen->event.reason, reason);
    EXPECT_EQ(ranks[r]->highest_aborted_epoch(), 3);
  }
  EXPECT_EQ(events[2].count(Kind::kPeerAborted), 0) << "a rank hears its own abort:" << events[2].describe();
  EXPECT_EQ(ranks[2]->highest_aborted_epoch(), -1);

  // A lower epoch is reported but does not lower the highest; a long reason is cut to 1 KiB.
  ranks[1]->announce_abort(2, std::string(5000, 'x'));
  auto seen = events[0].wait_for(Kind::kPeerAborted, 1, 1000ms);
  ASSERT_TRUE(seen.has_value()) << events[0].describe();
  EXPECT_EQ(seen->event.epoch, 2u);
  EXPECT_EQ(seen->event.reason, std::string(1024, 'x'));
  EXPECT_EQ(ranks[0]->highest_aborted_epoch(), 3);
  // The channel still works after the payload.
  ranks[1]->set_local(RankState{55, true, 0});
  const auto t1 = Clock::now();
  while (ranks[0]->peer(1).state.op_seq != 55u && ms_since(t1) < 1000) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(ranks[0]->peer(1).state.op_seq, 55u);
  for (int r = 0; r < n; ++r) EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << events[r].describe();
}

TEST_F(LivenessTest, CleanShutdownIsNotADeath) {
  // A budget well above a loaded CI host's stalls (ASan, steal): a clean
  // shutdown must never read as a death or a silence, whatever the budget,
  // and a stall of the whole test process must not pass for one.
  constexpr int n = 3;
  constexpr Millis budget = 1000ms;
  std::vector<Events> events(n);
  auto ranks = start_all(n, 20ms, budget, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);
  std::this_thread::sleep_for(60ms);

  const auto t0 = Clock::now();
  ranks[2].reset();
  // The destructor waits at most its linger (kGoodbyeLinger in runtime/liveness.cc: 250 ms,
  // which this bound must stay below) for the peers to close their side; both answered the
  // goodbye, so it must not have waited that out.
  EXPECT_LT(ms_since(t0), 240)
      << "the destructor lingered although every peer answered its goodbye";
  std::this_thread::sleep_for(budget + 200ms);  // past the budget
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << "rank " << r << ":" << events[r].describe();
    EXPECT_EQ(events[r].count(Kind::kPeerSilent), 0) << "rank " << r << ":" << events[r].describe();
  }
  // The two that remain still hear each other (heartbeats every 20 ms).
  EXPECT_EQ(ranks[0]->peer(1).health, PeerHealth::kAlive);
  EXPECT_LE(ms_since(ranks[0]->peer(1).last_heard), 500);
  EXPECT_LE(ms_since(ranks[1]->peer(0).last_heard), 500);
  // Rank 2 is gone as having left, not as dead.
  EXPECT_TRUE(ranks[0]->peer(2).left);
  EXPECT_TRUE(ranks[1]->peer(2).left);

  // Both remaining ranks shutting down at once is clean too.
  std::thread a([&] { ranks[0].reset(); });
  std::thread b([&] { ranks[1].reset(); });
  a.join();
  b.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << events[r].describe();
}

// A wanted rank answers at once, not at its next tick: with a 1 s interval,
// every one of the five wanted ranks answers within 200 ms (a tick would make
// most of them wait half a second or more).
TEST_F(LivenessTest, AWantedPeerAnswersAtOnce) {
  constexpr int n = 8;
  std::vector<Events> events(n);
  auto ranks = start_all(n, 1000ms, 10000ms, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);
  std::this_thread::sleep_for(50ms);  // past the first (immediate) heartbeats
  const auto t0 = Clock::now();
  ranks[0]->want(-1);
  for (int q : {2, 3, 4, 5, 6}) {
    while (!ranks[0]->peer(q).current && ms_since(t0) < 3000) std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(ranks[0]->peer(q).current) << "rank " << q;
  }
  EXPECT_LT(ms_since(t0), 200) << "the wanted ranks waited for their next tick";
}

// A want renewed just before half its lease has passed extends nothing (no
// watch goes out): the peer stops at the lease it was told, and this rank
// expects no more of it than that. Before, the second want moved the
// expectation a budget past what the peer was asked for, and every wanted
// rank was called silent, for good.
TEST_F(LivenessTest, AWantThatRenewsNothingExpectsNothingMore) {
  constexpr int n = 8;
  constexpr Millis interval = 50ms, budget = 400ms;  // lease 800 ms, renewed from 400 ms left
  std::vector<Events> events(n);
  auto ranks = start_all(n, interval, budget, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);
  const auto t0 = Clock::now();
  ranks[0]->want(-1);
  std::this_thread::sleep_for(350ms);
  ranks[0]->want(-1);  // 450 ms of the lease left: no renewal
  // Past the lease told (800 ms), short of the one a renewal would have
  // asked for (1150 ms): the wanted views are stale again.
  std::this_thread::sleep_until(t0 + 950ms);
  for (int q = 2; q < n - 1; ++q) EXPECT_FALSE(ranks[0]->peer(q).current) << "rank " << q;
  std::this_thread::sleep_for(2000ms);
  for (int q = 1; q < n; ++q)
    EXPECT_EQ(ranks[0]->peer(q).health, PeerHealth::kAlive) << "rank " << q;
  EXPECT_EQ(events[0].count(Kind::kPeerSilent), 0) << events[0].describe();
}

// ---- real processes ---------------------------------------------------------------

// Rank 1 of 2 in a child process: this test binary re-executed (fork + exec,
// so the child starts single-threaded) to run only LivenessChild.DISABLED_Rank1,
// which reads its orders from
// RCOLL_LIVENESS_CHILD="port,interval_ms,budget_ms,live_for_ms[,rank,size]".
// It creates its Liveness, then either exits without any destructor after
// live_for_ms (no goodbye, as if it crashed) or, with -1, heartbeats until the
// test stops or kills it.
pid_t spawn_rank1(uint16_t store_port, Millis interval, Millis budget,
                  std::optional<Millis> live_for, int rank = 1, int size = 2) {
  const std::string orders = "RCOLL_LIVENESS_CHILD=" + std::to_string(store_port) + "," +
                             std::to_string(interval.count()) + "," +
                             std::to_string(budget.count()) + "," +
                             std::to_string(live_for ? live_for->count() : -1) + "," +
                             std::to_string(rank) + "," + std::to_string(size);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(orders);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string arg0 = "liveness_test", filter = "--gtest_filter=LivenessChild.DISABLED_Rank1",
              disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {arg0.data(), filter.data(), disabled.data(), nullptr};
  // Everything is allocated before fork: the child only calls async-signal-safe functions until exec.
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int devnull = ::open("/dev/null", O_WRONLY);
  if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);  // the child's gtest banner
  ::execve("/proc/self/exe", argv, envp.data());
  ::_exit(127);
}

TEST(LivenessChild, DISABLED_Rank1) {
  const char* orders = std::getenv("RCOLL_LIVENESS_CHILD");
  if (orders == nullptr) GTEST_SKIP() << "only runs as the child of LivenessProcessTest";
  unsigned port = 0;
  long interval = 0, budget = 0, live_for = 0;
  int rank = 1, size = 2;
  if (std::sscanf(orders, "%u,%ld,%ld,%ld,%d,%d", &port, &interval, &budget, &live_for, &rank,
                  &size) < 4)
    ::_exit(9);
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = static_cast<uint16_t>(port);
  o.connect_timeout = 3000ms;
  auto store = connect_tcp_store(o);
  if (!store.ok()) ::_exit(10);
  LivenessParams p;
  p.rank = rank;
  p.size = size;
  p.store = store.value();
  p.ifname_spec = "=lo";
  p.job_token = "liveness-test";
  p.interval = Millis(interval);
  p.budget = Millis(budget);
  p.connect_deadline = Deadline::after(5s);
  auto l = Liveness::start(p);
  if (!l.ok()) ::_exit(11);
  l.value()->set_local(RankState{42, false, 0});
  if (live_for >= 0) {
    std::this_thread::sleep_for(Millis(live_for));
    ::_exit(0);  // no destructor: no goodbye
  }
  for (;;) ::pause();
}

class LivenessProcessTest : public LivenessTest {
 protected:
  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      reap();
    }
  }
  int reap() {
    int status = 0;
    if (child_ > 0) ::waitpid(child_, &status, 0);
    child_ = -1;
    return status;
  }
  std::unique_ptr<Liveness> start_rank0(Millis interval, Millis budget, Events* events) {
    auto l = Liveness::start(params(0, 2, interval, budget));
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    if (!l.ok()) return nullptr;
    l.value()->set_listener(events->listener());
    return std::move(l).value();
  }
  bool wait_heard(Liveness& l, Millis timeout) {
    const auto t0 = Clock::now();
    while (ms_since(t0) < timeout.count()) {
      if (l.peer(1).state.op_seq == 42u) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  pid_t child_ = -1;
};

TEST_F(LivenessProcessTest, ExitWithoutGoodbyeIsReportedDead) {
  constexpr Millis budget = 1000ms;
  child_ = spawn_rank1(server_->port(), 50ms, budget, 300ms);
  ASSERT_GT(child_, 0);
  Events events;
  auto l = start_rank0(50ms, budget, &events);
  ASSERT_NE(l, nullptr);
  const auto started = Clock::now();
  const int status = reap();  // returns once the child has exited
  const auto exited = Clock::now();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  auto seen = events.wait_for(Kind::kPeerDead, 1, budget);
  ASSERT_TRUE(seen.has_value()) << "no death reported within " << budget.count() << " ms:" << events.describe();
  EXPECT_LE(std::chrono::duration_cast<Millis>(seen->at - exited).count(), budget.count());
  EXPECT_GE(std::chrono::duration_cast<Millis>(seen->at - started).count(), 200) << "reported before it died";
  EXPECT_TRUE(contains(seen->event.reason, "rank 1")) << seen->event.reason;
  EXPECT_TRUE(contains(seen->event.reason, "127.0.0.1:")) << seen->event.reason;
  EXPECT_EQ(l->peer(1).health, PeerHealth::kDead);
  EXPECT_EQ(events.count(Kind::kPeerDead), 1) << events.describe();
}

TEST_F(LivenessProcessTest, SigkillIsReportedDeadWithinOneSecond) {
  child_ = spawn_rank1(server_->port(), 50ms, 1000ms, std::nullopt);
  ASSERT_GT(child_, 0);
  Events events;
  auto l = start_rank0(50ms, 1000ms, &events);
  ASSERT_NE(l, nullptr);
  ASSERT_TRUE(wait_heard(*l, 1000ms)) << "no heartbeat from the child";
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(child_, SIGKILL), 0);
  auto seen = events.wait_for(Kind::kPeerDead, 1, 1000ms);
  ASSERT_TRUE(seen.has_value()) << "SIGKILL not reported within 1 s:" << events.describe();
  EXPECT_LE(std::chrono::duration_cast<Millis>(seen->at - t0).count(), 1000);
  EXPECT_TRUE(contains(seen->event.reason, "rank 1")) << seen->event.reason;
  EXPECT_EQ(seen->event.peer, 1);
  const int status = reap();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST_F(LivenessProcessTest, SigstopIsSilentAfterTheBudgetAndBackAfterSigcont) {
  constexpr Millis interval = 50ms;
  constexpr Millis budget = 500ms;
  child_ = spawn_rank1(server_->port(), interval, budget, std::nullopt);
  ASSERT_GT(child_, 0);
  Events events;
  auto l = start_rank0(interval, budget, &events);
  ASSERT_NE(l, nullptr);
  ASSERT_TRUE(wait_heard(*l, 1000ms)) << "no heartbeat from the child";

  const auto stopped = Clock::now();
  ASSERT_EQ(::kill(child_, SIGSTOP), 0);
  auto silent = events.wait_for(Kind::kPeerSilent, 1, 3000ms);
  ASSERT_TRUE(silent.has_value()) << "a stopped rank never turned silent:" << events.describe();
  const long after = static_cast<long>(std::chrono::duration_cast<Millis>(silent->at - stopped).count());
  // Its last heartbeat left at most one interval before the stop.
  EXPECT_GE(after, budget.count() - interval.count() - 10) << "silent before the budget";
  EXPECT_LE(after, budget.count() + 2 * interval.count() + 100) << "silent long after the budget";
  EXPECT_EQ(l->peer(1).health, PeerHealth::kSilent);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(events.count(Kind::kPeerDead), 0) << "a stopped process is not dead:" << events.describe();
  EXPECT_EQ(events.count(Kind::kPeerSilent), 1) << events.describe();

  const auto resumed = Clock::now();
  ASSERT_EQ(::kill(child_, SIGCONT), 0);
  auto back = events.wait_for(Kind::kPeerBack, 1, 2000ms);
  ASSERT_TRUE(back.has_value()) << "no kPeerBack after SIGCONT:" << events.describe();
  EXPECT_LE(std::chrono::duration_cast<Millis>(back->at - resumed).count(), 2 * interval.count() + 100);
  EXPECT_EQ(l->peer(1).health, PeerHealth::kAlive);

  // And a kill after all that is still a death.
  ASSERT_EQ(::kill(child_, SIGKILL), 0);
  EXPECT_TRUE(events.wait_for(Kind::kPeerDead, 1, 1000ms).has_value()) << events.describe();
  reap();
}

// Rank 2 of 5 in a child process, stopped: its ring neighbours (1 and 3) see
// it silent after the budget and tell ranks 0 and 4, which never heard from
// it; after SIGCONT every rank hears that it is back. Nobody reports a death.
TEST_F(LivenessProcessTest, AStoppedRanksNeighboursTellEveryRank) {
  constexpr int n = 5, stopped_rank = 2;
  constexpr Millis interval = 50ms, budget = 500ms;
  child_ = spawn_rank1(server_->port(), interval, budget, std::nullopt, stopped_rank, n);
  ASSERT_GT(child_, 0);
  std::vector<Events> events(n);
  auto ranks = start_all(n, interval, budget, &events, false, stopped_rank);
  for (int r = 0; r < n; ++r)
    if (r != stopped_rank) ASSERT_NE(ranks[r], nullptr) << "rank " << r;
  const auto t0 = Clock::now();
  while (ranks[1]->peer(stopped_rank).state.op_seq != 42u && ms_since(t0) < 2000)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(ranks[1]->peer(stopped_rank).state.op_seq, 42u) << "no heartbeat from the child";
  EXPECT_FALSE(ranks[0]->peer(stopped_rank).current) << "rank 0 is no neighbour of rank 2";

  const auto stopped = Clock::now();
  ASSERT_EQ(::kill(child_, SIGSTOP), 0);
  for (int r = 0; r < n; ++r) {
    if (r == stopped_rank) continue;
    auto silent = events[r].wait_for(Kind::kPeerSilent, stopped_rank, 3000ms);
    ASSERT_TRUE(silent.has_value())
        << "rank " << r << " never learned that rank 2 is silent:" << events[r].describe();
    const long after =
        static_cast<long>(std::chrono::duration_cast<Millis>(silent->at - stopped).count());
    EXPECT_GE(after, budget.count() - interval.count() - 10)
        << "rank " << r << ": silent before the budget";
    EXPECT_LE(after, budget.count() + 2 * interval.count() + 200) << "rank " << r;
    EXPECT_EQ(ranks[r]->peer(stopped_rank).health, PeerHealth::kSilent) << "rank " << r;
    if (r == 0 || r == 4) {
      EXPECT_TRUE(contains(silent->event.reason, "rank 1 heard") ||
                  contains(silent->event.reason, "rank 3 heard"))
          << "rank " << r << " was told by a neighbour of rank 2: " << silent->event.reason;
    }
  }
  std::this_thread::sleep_for(300ms);
  for (int r = 0; r < n; ++r) {
    if (r == stopped_rank) continue;
    EXPECT_EQ(events[r].count(Kind::kPeerSilent), 1) << "rank " << r << ":" << events[r].describe();
    EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << "rank " << r << ":" << events[r].describe();
  }

  const auto resumed = Clock::now();
  ASSERT_EQ(::kill(child_, SIGCONT), 0);
  for (int r = 0; r < n; ++r) {
    if (r == stopped_rank) continue;
    auto back = events[r].wait_for(Kind::kPeerBack, stopped_rank, 2000ms);
    ASSERT_TRUE(back.has_value()) << "rank " << r
                                  << " never heard rank 2 is back:" << events[r].describe();
    EXPECT_LE(std::chrono::duration_cast<Millis>(back->at - resumed).count(),
              2 * interval.count() + 200)
        << "rank " << r;
    EXPECT_EQ(ranks[r]->peer(stopped_rank).health, PeerHealth::kAlive) << "rank " << r;
  }
  // One silence in all (rank 2's), told once however many neighbours told it.
  for (int r = 0; r < n; ++r) {
    if (r == stopped_rank) continue;
    EXPECT_EQ(events[r].count(Kind::kPeerSilent), 1) << "rank " << r << ":" << events[r].describe();
    EXPECT_EQ(events[r].count(Kind::kPeerBack), 1) << "rank " << r << ":" << events[r].describe();
  }
}

// ---- the overlay: notices passed on to the ranks not connected -------------------

// 16 ranks: each is connected to its overlay partners only (rank +- 2^k,
// rank ^ 2^k), so most of the peers rank 5 could tell directly are not
// connected to it. Its abort notice reaches every rank within 50 ms, passed
// on, once per rank, naming rank 5; a second announcer of the same epoch
// reaches the ranks connected to it, and is not passed on again.
TEST_F(LivenessTest, AnAbortNoticeIsPassedOnToEveryRankOnce) {
  constexpr int n = 16, announcer = 5;
  std::vector<Events> events(n);
  auto ranks = start_all(n, 100ms, 5000ms, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);
  int not_partners = 0;
  for (int r = 0; r < n; ++r)
    not_partners += r != announcer && !eager_partners(announcer, n)[r] ? 1 : 0;
  ASSERT_GE(not_partners, 8);

  const std::string reason = "allreduce seq 17 made no progress for 1500 ms";
  const auto t0 = Clock::now();
  ranks[announcer]->announce_abort(4, reason);
  for (int r = 0; r < n; ++r) {
    if (r == announcer) continue;
    auto seen = events[r].wait_for(Kind::kPeerAborted, announcer, 1000ms);
    ASSERT_TRUE(seen.has_value()) << "rank " << r
                                  << " never heard of the abort:" << events[r].describe();
    EXPECT_LE(std::chrono::duration_cast<Millis>(seen->at - t0).count(), 50) << "rank " << r;
    EXPECT_EQ(seen->event.epoch, 4u);
    EXPECT_EQ(seen->event.reason, reason);
    EXPECT_EQ(ranks[r]->highest_aborted_epoch(), 4);
  }
  ranks[9]->announce_abort(4, "rank 9 saw it too");
  std::this_thread::sleep_for(200ms);
  for (int r = 0; r < n; ++r) {
    const int expected = (r == announcer ? 0 : 1) + (r != 9 && eager_partners(9, n)[r] ? 1 : 0);
    EXPECT_EQ(events[r].count(Kind::kPeerAborted), expected)
        << "rank " << r
        << " (rank 9's second notice reaches its partners only):" << events[r].describe();
    EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << "rank " << r << ":" << events[r].describe();
  }
}

// Rank 5 of 8 in a child process, killed: its partners see its connections
// close, and every other rank learns of the death from them within a second
// (rank 0 too, connected to it on first use only); one death each, named by
// the rank that saw it.
TEST_F(LivenessProcessTest, ADeathIsPassedOnToTheRanksNotConnectedToIt) {
  constexpr int n = 8, victim = 5;
  constexpr Millis interval = 50ms, budget = 1000ms;
  child_ = spawn_rank1(server_->port(), interval, budget, std::nullopt, victim, n);
  ASSERT_GT(child_, 0);
  std::vector<Events> events(n);
  auto ranks = start_all(n, interval, budget, &events, false, victim);
  for (int r = 0; r < n; ++r)
    if (r != victim) ASSERT_NE(ranks[r], nullptr) << "rank " << r;
  const auto t0 = Clock::now();
  while (ranks[4]->peer(victim).state.op_seq != 42u && ms_since(t0) < 2000)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(ranks[4]->peer(victim).state.op_seq, 42u) << "no heartbeat from the child";
  // Rank 0, no partner of rank 5, connects to it on first use: that link's
  // close is no verdict of its own (rank 0 too is told by the partners).
  ASSERT_FALSE(eager_partners(0, n)[victim]);
  ranks[0]->want(victim);
  while (!ranks[0]->peer(victim).current && ms_since(t0) < 4000) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(ranks[0]->peer(victim).current) << "rank 0's dial of rank 5 never connected";

  const auto killed = Clock::now();
  ASSERT_EQ(::kill(child_, SIGKILL), 0);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    auto seen = events[r].wait_for(Kind::kPeerDead, victim, 1000ms);
    ASSERT_TRUE(seen.has_value()) << "rank " << r
                                  << " never learned rank 5 died:" << events[r].describe();
    EXPECT_LE(std::chrono::duration_cast<Millis>(seen->at - killed).count(), 1000) << "rank " << r;
    EXPECT_EQ(ranks[r]->peer(victim).health, PeerHealth::kDead) << "rank " << r;
    EXPECT_FALSE(ranks[r]->peer(victim).left) << "rank " << r;
    if (!eager_partners(victim, n)[r]) {
      EXPECT_TRUE(contains(seen->event.reason, "told by rank"))
          << "rank " << r << " is no partner of rank 5: " << seen->event.reason;
    }
  }
  std::this_thread::sleep_for(200ms);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    EXPECT_EQ(events[r].count(Kind::kPeerDead), 1) << "rank " << r << ":" << events[r].describe();
  }
  reap();
}

// Rank 3 of 8 closes (a goodbye to its partners): every other rank, its
// partners or not, sees it as having left, and nobody reports a death or a
// silence.
TEST_F(LivenessTest, ADepartureIsPassedOnToTheRanksNotConnectedToIt) {
  constexpr int n = 8, leaver = 3;
  constexpr Millis budget = 1000ms;
  std::vector<Events> events(n);
  auto ranks = start_all(n, 20ms, budget, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);
  ASSERT_FALSE(eager_partners(leaver, n)[6]);
  ranks[leaver].reset();
  const auto t0 = Clock::now();
  for (int r = 0; r < n; ++r) {
    if (r == leaver) continue;
    while (!ranks[r]->peer(leaver).left && ms_since(t0) < 1000) std::this_thread::sleep_for(2ms);
    EXPECT_TRUE(ranks[r]->peer(leaver).left) << "rank " << r << " never learned rank 3 left";
  }
  std::this_thread::sleep_for(budget + 200ms);
  for (int r = 0; r < n; ++r) {
    if (r == leaver) continue;
    EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << "rank " << r << ":" << events[r].describe();
    EXPECT_EQ(events[r].count(Kind::kPeerSilent), 0) << "rank " << r << ":" << events[r].describe();
  }
}

// A liveness link that breaks while both ranks live (a reset on the way)
// is no death: the rank whose side closed dials the peer again, the peer
// (whose side closed too) takes or makes the new connection, and no rank
// reports anything; heartbeats flow again on the new link. Before stop 50 the
// close was rank 0's verdict that rank 1 died, passed on to every rank.
// A ring link and a recursive-doubling one dropped (both ends see it), then
// a ring link forgotten by one end only (half open: the other end learns it
// from the new dial), then a departure over the new links.
TEST_F(LivenessTest, ALinkThatBreaksBetweenLiveRanksIsMadeAgainWithNoVerdict) {
  constexpr int n = 8;
  constexpr Millis interval = 20ms, budget = 600ms;
  std::vector<Events> events(n);
  auto ranks = start_all(n, interval, budget, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);
  ASSERT_TRUE(eager_partners(0, n)[1]);
  ASSERT_TRUE(eager_partners(3, n)[7]);
  ranks[0]->drop_link_for_testing(1);  // ring neighbours
  ranks[7]->drop_link_for_testing(3);  // 3 ^ 4: overlay partners, not neighbours
  std::this_thread::sleep_for(budget + 300ms);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << "rank " << r << ":" << events[r].describe();
    EXPECT_EQ(events[r].count(Kind::kPeerSilent), 0) << "rank " << r << ":" << events[r].describe();
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      EXPECT_NE(ranks[r]->peer(q).health, PeerHealth::kDead) << "rank " << r << " about rank " << q;
    }
  }
  // The ring link carries heartbeats again: rank 0 hears rank 1 now.
  EXPECT_LE(ms_since(ranks[0]->peer(1).last_heard), 5 * interval.count());
  EXPECT_LE(ms_since(ranks[1]->peer(0).last_heard), 5 * interval.count());
  // Half open: rank 2 forgets its link to rank 3 while rank 3 still counts
  // it open (no end of stream reaches it). Rank 3 hears rank 2 dial again,
  // drops its stale side at the second hello, and the link is made again.
  ranks[2]->drop_link_for_testing(3, true);
  std::this_thread::sleep_for(budget + 300ms);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << "rank " << r << ":" << events[r].describe();
    EXPECT_EQ(events[r].count(Kind::kPeerSilent), 0) << "rank " << r << ":" << events[r].describe();
  }
  EXPECT_LE(ms_since(ranks[2]->peer(3).last_heard), 5 * interval.count());
  EXPECT_LE(ms_since(ranks[3]->peer(2).last_heard), 5 * interval.count());
  // A departure after the relinks is still one (a goodbye on the new links),
  // with no death reported.
  ranks[1]->drop_link_for_testing(0);
  std::this_thread::sleep_for(50ms);
  ranks[3].reset();
  const auto t1 = Clock::now();
  for (int r = 0; r < n; ++r) {
    if (r == 3) continue;
    while (!ranks[r]->peer(3).left && ms_since(t1) < 1000) std::this_thread::sleep_for(2ms);
    EXPECT_TRUE(ranks[r]->peer(3).left) << "rank " << r;
  }
  std::this_thread::sleep_for(200ms);
  for (int r = 0; r < n; ++r) {
    if (r == 3) continue;
    EXPECT_EQ(events[r].count(Kind::kPeerDead), 0) << "rank " << r << ":" << events[r].describe();
  }
}

// Ranks 5, 6 and 7 of 8 in child processes, stopped together (a frozen
// host): rank 6's neighbours are frozen too, so nobody tells of its silence.
// Rank 1, not connected to rank 6, wants it: its dial goes unanswered, and
// rank 6 is silent a budget after the asking, as a connected rank that stops
// heartbeating is. After SIGCONT rank 6 answers the dial and heartbeats to
// rank 1, whose view of it turns current.
TEST_F(LivenessProcessTest, AWantedPeerThatCannotAnswerTheDialIsSilent) {
  constexpr int n = 8, wanted = 6;
  constexpr Millis interval = 50ms, budget = 600ms;
  const std::vector<int> frozen = {5, 6, 7};
  std::vector<pid_t> children;
  for (int r : frozen) {
    children.push_back(spawn_rank1(server_->port(), interval, budget, std::nullopt, r, n));
    ASSERT_GT(children.back(), 0);
  }
  struct Reaper {
    std::vector<pid_t>& pids;
    ~Reaper() {
      for (pid_t pid : pids) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reaper{children};
  std::vector<Events> events(n);
  auto ranks = start_all(n, interval, budget, &events, false, frozen);
  for (int r = 0; r < n; ++r)
    if (std::find(frozen.begin(), frozen.end(), r) == frozen.end())
      ASSERT_NE(ranks[r], nullptr) << "rank " << r;
  ASSERT_FALSE(eager_partners(1, n)[wanted]);
  const auto t0 = Clock::now();
  while ((ranks[4]->peer(5).state.op_seq != 42u || ranks[0]->peer(7).state.op_seq != 42u) &&
         ms_since(t0) < 2000)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(ranks[4]->peer(5).state.op_seq, 42u) << "no heartbeat from rank 5";
  for (pid_t pid : children) ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  std::this_thread::sleep_for(interval);
  const auto asked = Clock::now();
  ranks[1]->want(wanted);
  auto silent = events[1].wait_for(Kind::kPeerSilent, wanted, 3000ms);
  ASSERT_TRUE(silent.has_value()) << "rank 1 never found rank 6 silent:" << events[1].describe();
  const long after =
      static_cast<long>(std::chrono::duration_cast<Millis>(silent->at - asked).count());
  EXPECT_GE(after, budget.count() - interval.count() - 10) << "silent before the budget";
  EXPECT_LE(after, budget.count() + 2 * interval.count() + 200);
  EXPECT_EQ(silent->event.reason.rfind("no heartbeat", 0), 0u)
      << "told, not seen: " << silent->event.reason;
  EXPECT_TRUE(contains(silent->event.reason, "dial unanswered")) << silent->event.reason;
  EXPECT_EQ(events[1].count(Kind::kPeerDead), 0) << events[1].describe();

  for (pid_t pid : children) ASSERT_EQ(::kill(pid, SIGCONT), 0);
  auto back = events[1].wait_for(Kind::kPeerBack, wanted, 3000ms);
  ASSERT_TRUE(back.has_value()) << "rank 1 never heard rank 6 again:" << events[1].describe();
  ranks[1]->want(wanted);
  const auto t1 = Clock::now();
  while (!ranks[1]->peer(wanted).current && ms_since(t1) < 2000) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(ranks[1]->peer(wanted).current) << "the dial on first use never connected";
  EXPECT_EQ(ranks[1]->peer(wanted).state.op_seq, 42u);
}

// ---- connecting -------------------------------------------------------------------

TEST_F(LivenessTest, MeshToAPeerThatNeverStartsFailsNamingIt) {
  for (int rank : {0, 1}) {
    const int missing = 1 - rank;
    LivenessParams p = params(rank, 2, 100ms, 1000ms);
    p.store = make_prefix_store(client(), "alone" + std::to_string(rank));
    p.connect_deadline = Deadline::after(1000ms);
    const auto t0 = Clock::now();
    auto l = Liveness::start(p);
    const long took = ms_since(t0);
    ASSERT_FALSE(l.ok()) << "rank " << rank << " connected to nobody";
    const Status& s = l.status();
    EXPECT_EQ(s.code(), ErrorCode::kPeerUnreachable) << s.to_string();
    EXPECT_EQ(s.context().peer, missing) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "rank " + std::to_string(missing))) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "liveness")) << s.to_string();
    EXPECT_GE(took, 900) << "gave up before the connect deadline: " << s.to_string();
    EXPECT_LT(took, 2500) << s.to_string();
  }
}

TEST_F(LivenessTest, SingleRankNeedsNoPeers) {
  LivenessParams p;
  p.rank = 0;
  p.size = 1;
  auto l = Liveness::start(p);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  l.value()->set_local(RankState{3, true, 1});
  l.value()->announce_abort(1, "nobody hears this");
  EXPECT_EQ(l.value()->peer(0).state.op_seq, 3u);
  EXPECT_EQ(l.value()->highest_aborted_epoch(), -1);
}

// Heartbeats at the default 100 ms interval cost next to nothing: CPU time of
// this whole process (8 ranks, heartbeats to their ring neighbours only) per
// rank, the least of three 1 s windows (one
// window can catch a sanitizer's background thread or a page-fault burst; a
// rank that polls instead of sleeping costs 12% or more in every window: 2
// cores shared by 8 ranks). The bound is 2% of a core per rank, 4% under a
// sanitizer (RCOLL_SANITIZED, set by scripts/test.sh). The budget is long (5 s)
// because silence detection is not the subject here; that heartbeats flowed
// during every window is checked from each peer's last_heard instead.
TEST_F(LivenessTest, HeartbeatCpuCostIsSmall) {
  constexpr int n = 8;
  std::vector<Events> events(n);
  auto ranks = start_all(n, 100ms, 5000ms, &events);
  for (auto& l : ranks) ASSERT_NE(l, nullptr);
  auto cpu_us = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000L + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
  };
  const bool sanitized = std::getenv("RCOLL_SANITIZED") != nullptr;
  const double bound = sanitized ? 0.04 : 0.02;
  double least = 1e9;
  std::string windows;
  for (int w = 0; w < 3; ++w) {
    const long c0 = cpu_us();
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(1s);
    const double wall_us = static_cast<double>(ms_since(t0)) * 1000.0;
    const double per_rank = static_cast<double>(cpu_us() - c0) / wall_us / n;
    least = std::min(least, per_rank);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3f%%", w == 0 ? "" : ", ", per_rank * 100.0);
    windows += buf;
    for (int r = 0; r < n; ++r) {
      for (int q : {(r + 1) % n, (r + n - 1) % n}) {
        EXPECT_GT(ranks[r]->peer(q).last_heard, t0)
            << "rank " << r << " heard nothing from its neighbour rank " << q << " in window " << w
            << ": " << events[r].describe();
      }
      const int across = (r + n / 2) % n;
      EXPECT_LT(ranks[r]->peer(across).last_heard, t0)
          << "rank " << r << " heard rank " << across << ", no neighbour of it, unasked";
    }
  }
  std::printf(
      "heartbeat cost: %s of a core per rank in three 1 s windows (%d ranks, 2 ring neighbours "
      "each, 100 ms interval%s)\n",
      windows.c_str(), n, sanitized ? ", sanitized build" : "");
  RecordProperty("cpu_percent_per_rank", std::to_string(least * 100.0));
  EXPECT_LT(least, bound) << "every window: " << windows;
  for (int r = 0; r < n; ++r) EXPECT_EQ(events[r].count(Kind::kPeerSilent), 0) << events[r].describe();
}

}  // namespace
}  // namespace rcoll
