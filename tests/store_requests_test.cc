// What creation and recovery cost the rendezvous store, counted: every
// request the ranks make (a counting wrapper around each rank's client of one
// TCP store server) and the keys the store holds. In-process ranks on
// loopback TCP. Creation and recovery read every rank's settings, addresses,
// link timing, connect outcome and ledger through the combined exchange
// (base/store_exchange.h): O(P) requests in all, not P reads of P keys.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "rcoll/rcoll.h"
#include "tests/thread_ranks.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;

// The requests of every rank, and the keys the store holds (as set, added
// to and erased through these clients).
struct StoreTally {
  std::atomic<long> calls{0};
  std::mutex mu;
  std::set<std::string> keys;
  void wrote(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    keys.insert(key);
  }
  void erased(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    keys.erase(key);
  }
  // Left out: a link timing done again (tune/<e>/again/) when a latency
  // moved, which one recovery may need and the next not.
  size_t held() {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (const std::string& k : keys) n += k.find("/again/") == std::string::npos ? 1 : 0;
    return n;
  }
};

class CountingStore : public Store {
 public:
  CountingStore(std::shared_ptr<Store> inner, StoreTally& tally)
      : inner_(std::move(inner)), tally_(tally) {}
  Status set(const std::string& key, const Bytes& value) override {
    ++tally_.calls;
    tally_.wrote(key);
    return inner_->set(key, value);
  }
  Result<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
    ++tally_.calls;
    return inner_->get(key, timeout);
  }
  Result<int64_t> add(const std::string& key, int64_t delta) override {
    ++tally_.calls;
    tally_.wrote(key);
    return inner_->add(key, delta);
  }
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    ++tally_.calls;
    return inner_->wait(keys, timeout);
  }
  Result<bool> check(const std::string& key) override {
    ++tally_.calls;
    return inner_->check(key);
  }
  Status erase(const std::string& key) override {
    ++tally_.calls;
    tally_.erased(key);
    return inner_->erase(key);
  }

 private:
  std::shared_ptr<Store> inner_;
  StoreTally& tally_;
};

// P ranks create a communicator, run an allreduce per step, and recover from
// a closed link at each of `faults` steps. Returns the store requests of the
// creation, of each recovery (from the op before to the op after), and the
// keys held after each.
struct Cost {
  long creation = 0;
  std::vector<long> recoveries;
  std::vector<size_t> keys_after;
};

Cost run(int size, int faults) {
  std::string spec;
  for (int f = 0; f < faults; ++f)
    spec += (spec.empty() ? "" : ";") + std::string("close-link:rank=0,peer=1,op=") +
            std::to_string(3 + 2 * f);
  ::setenv("RCOLL_INJECT", spec.c_str(), 1);
  StoreTally tally;
  Cost cost;
  std::atomic<int> arrived{0};
  std::atomic<int> step_done{0};
  // Every rank waits for all at each step, so the tally between steps is one step's.
  auto step = [&](int n) {
    ++step_done;
    while (step_done.load() < n * size) std::this_thread::yield();
  };
  const std::string name =
      "store-requests-" + std::to_string(::getpid()) + "-" + std::to_string(size);
  testing_support::run_thread_ranks(size, [&](int r, std::shared_ptr<Store> store) {
    Options o;
    o.rank = r;
    o.world_size = size;
    o.store = std::make_shared<CountingStore>(std::move(store), tally);
    o.name = name;
    o.socket_ifname = "=lo";
    o.transport = "tcp";
    o.connect_timeout = 60000ms;
    o.recovery_timeout = 60000ms;
    o.op_timeout = 30000ms;
    ++arrived;
    Communicator c = Communicator::create(o);
    int n = 1;
    step(n++);
    if (r == 0) cost.creation = tally.calls.exchange(0);
    step(n++);
    std::vector<float> v(256, 1.0f);
    for (int op = 1; op <= 2 + 2 * faults; ++op) {
      std::fill(v.begin(), v.end(), 1.0f);
      c.allreduce(Buffer::of(v), Buffer::of(v), ReduceOp::kSum);
      EXPECT_EQ(v[0], static_cast<float>(size)) << "rank " << r << " op " << op;
      step(n++);
      if (r == 0 && op >= 3 && op % 2 == 1) {
        cost.recoveries.push_back(tally.calls.exchange(0));
        cost.keys_after.push_back(tally.held());
      }
      step(n++);
      if (r == 0 && op % 2 == 0) tally.calls = 0;  // the op between two faults
      step(n++);
    }
    EXPECT_EQ(c.counters().recoveries, static_cast<uint64_t>(faults)) << "rank " << r;
    c.close();
  });
  ::unsetenv("RCOLL_INJECT");
  return cost;
}

// Creation and each recovery cost the store O(P) requests: at 16 ranks, under
// 24 P each (the flat exchanges took about 3 P^2 - P: 752 at creation).
TEST(StoreRequests, CreationAndRecoveryCostLinearlyManyRequests) {
  constexpr int kRanks = 16;
  const Cost cost = run(kRanks, 3);
  std::printf("P=%d: creation %ld store requests, recoveries", kRanks, cost.creation);
  for (long c : cost.recoveries) std::printf(" %ld", c);
  std::printf("; keys held after each:");
  for (size_t k : cost.keys_after) std::printf(" %zu", k);
  std::printf("\n");
  EXPECT_LE(cost.creation, 24 * kRanks);
  ASSERT_EQ(cost.recoveries.size(), 3u);
  for (long c : cost.recoveries) EXPECT_LE(c, 24 * kRanks);
  // Keys of finished epochs are erased: the store holds no more after the
  // third recovery than after the second.
  EXPECT_EQ(cost.keys_after[2], cost.keys_after[1]);
}

}  // namespace
}  // namespace rcoll
