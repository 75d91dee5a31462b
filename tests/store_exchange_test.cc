// The store exchange (runtime/store/exchange.h) and what travels through it
// (runtime/store/notices.h), on an in-memory store: no sockets.
#include "base/store_exchange.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "base/packed_values.h"
#include "runtime/store/keys.h"
#include "runtime/store/notices.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;

// A Store in memory, as the TCP store behaves for these calls.
class MemoryStore : public Store {
 public:
  Status set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++calls;
      kv_[key] = value;
    }
    cv_.notify_all();
    return Status();
  }
  Result<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++calls;
    if (key.size() < 4 || key.compare(key.size() - 4, 4, "/all") != 0)
      ++key_reads;
    else
      ++combined_reads;
    if (!cv_.wait_for(lock, timeout, [&] { return kv_.count(key) > 0; })) return Status(ErrorCode::kTimeout, "no " + key);
    return kv_[key];
  }
  Result<int64_t> add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls;
    ++adds;
    if (!can_add) return Status(ErrorCode::kUnsupported, "add");
    if (stalled)
      return Status(ErrorCode::kTimeout, "the store did not answer add(\"" + key + "\") in time");
    return counters_[key] += delta;
  }
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++calls;
    ++waits;
    if (!cv_.wait_for(lock, timeout, [&] { return all_there(keys); }))
      return Status(ErrorCode::kTimeout, "waiting for keys");
    return Status();
  }
  // One request, as the TCP store's: waits for every key, then their values.
  Result<std::vector<Bytes>> multi_get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++calls;
    ++multi_gets;
    if (!cv_.wait_for(lock, timeout, [&] { return all_there(keys); }))
      return Status(ErrorCode::kTimeout, "waiting for keys");
    std::vector<Bytes> values;
    for (const auto& k : keys) values.push_back(kv_[k]);
    return values;
  }
  Result<bool> check(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls;
    ++checks;
    if (stalled) return Status(ErrorCode::kTimeout, "the store did not answer check(\"" + key + "\") in time");
    return kv_.count(key) > 0;
  }
  Status erase(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    kv_.erase(key);
    counters_.erase(key);
    return Status();
  }
  bool has(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return kv_.count(key) > 0;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return kv_.size() + counters_.size();
  }
  // Requests of every kind; reads of a rank's own key (not the combined value).
  std::atomic<int> calls{0};
  std::atomic<int> key_reads{0};
  std::atomic<int> multi_gets{0};
  std::atomic<int> combined_reads{0};  // gets of an exchange's combined value
  std::atomic<int> adds{0};
  int waits = 0;
  int checks = 0;
  bool stalled = false;  // checks and adds time out, as a stalled store host's do
  bool can_add = true;   // a store without add (kUnsupported)

 private:
  bool all_there(const std::vector<std::string>& keys) const {  // mu_ held
    for (const auto& k : keys)
      if (!kv_.count(k)) return false;
    return true;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> kv_;
  std::map<std::string, int64_t> counters_;
};

TEST(StoreExchange, EveryRanksValueInRankOrder) {
  MemoryStore store;
  const StoreExchange x(store, keys::tune(3), 3);
  EXPECT_EQ(x.key(2), "tune/3/2");
  for (int q = 2; q >= 0; --q) ASSERT_TRUE(x.publish(q, Bytes{static_cast<uint8_t>(10 + q)}).ok());
  auto all = x.gather(Deadline::after(1s));
  ASSERT_TRUE(all.ok()) << all.status.to_string();
  ASSERT_EQ(all.values.size(), 3u);
  for (int q = 0; q < 3; ++q) EXPECT_EQ(all.values[static_cast<size_t>(q)], Bytes{static_cast<uint8_t>(10 + q)});
}

TEST(StoreExchange, ALateRankIsWaitedForWithinTheDeadline) {
  MemoryStore store;
  const StoreExchange x(store, "settings/", 2);
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());
  std::thread late([&] {
    std::this_thread::sleep_for(150ms);
    (void)x.publish(1, Bytes{2});
  });
  auto all = x.gather(Deadline::after(5s), {}, 20ms);
  late.join();
  ASSERT_TRUE(all.ok()) << all.status.to_string();
  EXPECT_EQ(all.values[1], Bytes{2});
}

TEST(StoreExchange, MissingRanksAreNamedWhenTheDeadlinePasses) {
  MemoryStore store;
  const StoreExchange x(store, "recovery/0/ledger/", 4);
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());
  ASSERT_TRUE(x.publish(2, Bytes{1}).ok());
  auto all = x.gather(Deadline::after(100ms), {}, 20ms);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.ended, StoreExchange::Gathered::Ended::kTimedOut);
  EXPECT_EQ(all.missing, (std::vector<int>{1, 3}));
  EXPECT_EQ(all.status.code(), ErrorCode::kTimeout);
  EXPECT_EQ(all.status.context().peer, 1);
  EXPECT_NE(all.status.message().find("rank(s) 1, 3"), std::string::npos) << all.status.message();
}

TEST(StoreExchange, TheJudgeSeesWhoIsMissingAndCanEndTheWait) {
  MemoryStore store;
  const StoreExchange x(store, "tune/0/", 3);
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());
  ASSERT_TRUE(x.publish(1, Bytes{1}).ok());
  std::vector<int> seen;
  auto all = x.gather(Deadline::after(10s),
                      [&](const std::vector<int>& missing) {
                        seen = missing;
                        return Status(ErrorCode::kPeerDead, ErrorContext{0, missing.front(), 0, 0, ""}, "rank 2 died");
                      },
                      10ms);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.ended, StoreExchange::Gathered::Ended::kJudged);
  EXPECT_EQ(all.status.code(), ErrorCode::kPeerDead);  // the judge's own, untouched
  EXPECT_EQ(all.status.message(), "rank 2 died");
  EXPECT_EQ(seen, std::vector<int>{2});
}

TEST(StoreExchange, NoJudgeNoPerKeyReadsWhileWaiting) {
  MemoryStore store;
  const StoreExchange x(store, "settings/", 2);
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    (void)x.publish(1, Bytes{2});  // the last in: combines (one read of both keys)
  });
  auto all = x.gather(Deadline::after(5s), {}, 10ms);
  late.join();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all.values[1], Bytes{2});
  EXPECT_EQ(store.key_reads, 0) << "the gather read no rank's key itself, only the combined value";
  EXPECT_EQ(store.multi_gets, 1);
}

// What the combined value saves: P ranks cost the store O(P) requests, not P^2.
TEST(StoreExchange, EveryRankReadsOneCombinedValue) {
  constexpr int kRanks = 64;
  MemoryStore store;
  const StoreExchange x(store, keys::recovery_ledgers(5), kRanks);
  std::vector<std::thread> ranks;
  std::atomic<int> right{0};
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      if (!x.publish(r, Bytes(static_cast<size_t>(r), static_cast<uint8_t>(r))).ok()) return;
      auto all = x.gather(Deadline::after(10s));
      if (!all.ok()) return;
      for (int q = 0; q < kRanks; ++q) {
        if (all.values[static_cast<size_t>(q)] !=
            Bytes(static_cast<size_t>(q), static_cast<uint8_t>(q)))
          return;
      }
      ++right;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(right, kRanks);
  EXPECT_EQ(store.key_reads, 0) << "no rank reads a key alone";
  EXPECT_EQ(store.multi_gets, 1) << "the combiner reads the ranks' keys, in one request";
  // P sets, P adds, P reads, one write, P reads of the combined value (more
  // while a rank waits for the last, in slices), and a count now and then.
  EXPECT_LE(store.calls, 10 * kRanks) << "flat, it was " << kRanks * kRanks;
  ASSERT_TRUE(store.erase_many(x.all_keys()).ok());
  EXPECT_EQ(store.size(), 0u) << "erased: nothing of the exchange is left";
}

// A rank that publishes twice counts twice: the count reaches P before the
// last rank is in. The combiner, not finding its key within a second, writes
// an empty combined value, and every gather reads the keys themselves at once.
TEST(StoreExchange, APublishTwiceStillGathersEveryValue) {
  MemoryStore store;
  const StoreExchange x(store, "tune/1/", 3);
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());
  std::thread last([&] {
    std::this_thread::sleep_for(1500ms);
    (void)x.publish(2, Bytes{3});
  });
  ASSERT_TRUE(x.publish(1, Bytes{2}).ok());  // the count reaches 3 with rank 2 not in
  auto combined = store.get(x.combined_key(), 0ms);
  ASSERT_TRUE(combined.ok());
  EXPECT_TRUE(combined.value().empty()) << "the combiner could not read rank 2's key";
  auto all = x.gather(Deadline::after(10s), {}, 20ms);
  last.join();
  ASSERT_TRUE(all.ok()) << all.status.to_string();
  EXPECT_EQ(all.values, (std::vector<Bytes>{{1}, {2}, {3}}));
}

// Every rank in, and no combined value (its combiner died after counting
// itself in): the gather reads the keys after 2 s + 20 ms x P, or half of
// what its deadline leaves, whichever is sooner.
TEST(StoreExchange, EveryRankInWithoutACombinedValueIsReadKeyByKey) {
  MemoryStore store;
  const StoreExchange x(store, "settings/", 2);
  ASSERT_TRUE(store.set(x.key(0), Bytes{4}).ok());
  ASSERT_TRUE(store.set(x.key(1), Bytes{5}).ok());
  ASSERT_TRUE(store.add(x.count_key(), 2).ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto all = x.gather(Deadline::after(3s), {}, 20ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(all.ok()) << all.status.to_string();
  EXPECT_EQ(all.values, (std::vector<Bytes>{{4}, {5}}));
  EXPECT_GE(took, 1400ms) << "it gave a combiner time first";
  EXPECT_LT(took, 2900ms) << "and read the keys within the deadline";
}

TEST(StoreExchange, AStoreWithoutAddIsReadKeyByKey) {
  MemoryStore store;
  store.can_add = false;
  const StoreExchange x(store, "settings/", 3);
  for (int q = 0; q < 3; ++q) ASSERT_TRUE(x.publish(q, Bytes{static_cast<uint8_t>(q)}).ok());
  auto all = x.gather(Deadline::after(5s), {}, 20ms);
  ASSERT_TRUE(all.ok()) << all.status.to_string();
  EXPECT_EQ(all.values, (std::vector<Bytes>{{0}, {1}, {2}}));
  EXPECT_FALSE(store.has(x.combined_key()));
}

// A combined value that does not decode as `size` values is not trusted.
TEST(StoreExchange, AMalformedCombinedValueIsReadKeyByKey) {
  MemoryStore store;
  const StoreExchange x(store, "settings/", 2);
  ASSERT_TRUE(store.set(x.key(0), Bytes{7}).ok());
  ASSERT_TRUE(store.set(x.key(1), Bytes{8}).ok());
  ASSERT_TRUE(store.set(x.combined_key(), encode_values({Bytes{7}})).ok());  // one value, not two
  auto all = x.gather(Deadline::after(5s), {}, 20ms);
  ASSERT_TRUE(all.ok()) << all.status.to_string();
  EXPECT_EQ(all.values, (std::vector<Bytes>{{7}, {8}}));
}

TEST(StoreExchange, CombinedValuesRoundTripAndRefuseWhatIsNotExactlyP) {
  const std::vector<Bytes> v = {{}, {1, 2, 3}, Bytes(300, 9)};
  std::vector<Bytes> back;
  ASSERT_TRUE(decode_values(encode_values(v), 3, &back));
  EXPECT_EQ(back, v);
  EXPECT_FALSE(decode_values(encode_values(v), 2, &back));
  Bytes cut = encode_values(v);
  cut.pop_back();
  EXPECT_FALSE(decode_values(cut, 3, &back));
  EXPECT_FALSE(decode_values(Bytes{1, 0}, 1, &back));
}

// A reduction: every rank reads what the combiner made of the values (here
// their sum), not the values; the combined key holds that and nothing more.
StoreExchange::Reduce summing() {
  return [](const std::vector<Bytes>& values) {
    int sum = 0;
    for (const Bytes& v : values) sum += v.empty() ? 0 : v[0];
    return Bytes{static_cast<uint8_t>(sum)};
  };
}

TEST(StoreExchange, AReducedExchangeGivesEveryRankTheReductionOnly) {
  constexpr int kRanks = 16;
  MemoryStore store;
  const StoreExchange x(store, "tune/2/", kRanks, summing());
  std::vector<std::thread> ranks;
  std::atomic<int> right{0};
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      if (!x.publish(r, Bytes{static_cast<uint8_t>(r)}).ok()) return;
      auto all = x.gather(Deadline::after(10s));
      if (all.ok() && all.values.empty() && all.reduced == Bytes{120}) ++right;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(right, kRanks);
  auto combined = store.get(x.combined_key(), 0ms);
  ASSERT_TRUE(combined.ok());
  EXPECT_EQ(combined.value().size(), 2u) << "a mark and the sum: O(1) bytes for every rank to read";
}

// Where the combined value never comes, each rank reads the keys and makes
// the same reduction itself.
TEST(StoreExchange, AReducedExchangeThatFallsBackReducesTheKeysItself) {
  MemoryStore store;
  const StoreExchange x(store, "settings/", 3, summing());
  ASSERT_TRUE(store.set(x.key(0), Bytes{4}).ok());
  ASSERT_TRUE(store.set(x.key(1), Bytes{5}).ok());
  ASSERT_TRUE(store.set(x.key(2), Bytes{6}).ok());
  ASSERT_TRUE(store.set(x.combined_key(), Bytes{}).ok());  // the combiner could not read them
  auto all = x.gather(Deadline::after(5s), {}, 20ms);
  ASSERT_TRUE(all.ok()) << all.status.to_string();
  EXPECT_TRUE(all.values.empty());
  EXPECT_EQ(all.reduced, Bytes{15});
  // A combined value without the mark (an unreduced one) is not taken for a reduction.
  ASSERT_TRUE(store.set(x.combined_key(), encode_values({{4}, {5}, {6}})).ok());
  all = x.gather(Deadline::after(5s), {}, 20ms);
  ASSERT_TRUE(all.ok()) << all.status.to_string();
  EXPECT_EQ(all.reduced, Bytes{15});
}

// A rank's partners' values come with the combined value, in the same
// request; the second reduction is written beside it, and read only when asked.
TEST(StoreExchange, PickedRanksComeWithTheCombinedValueAndTheSecondReductionWaitsToBeAsked) {
  constexpr int kRanks = 16;
  MemoryStore store;
  const StoreExchange x(store, "tcp/0/", kRanks, summing(),
                        [](const std::vector<Bytes>& v) { return encode_values(v); });
  std::vector<std::thread> ranks;
  std::atomic<int> right{0};
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      if (!x.publish(r, Bytes{static_cast<uint8_t>(r)}).ok()) return;
      const std::vector<int> pick{(r + 1) % kRanks, (r + kRanks - 1) % kRanks};
      // One slice as long as the deadline: every rank's read waits for the
      // combined value, however late its thread started.
      auto all = x.gather(Deadline::after(10s), {}, Millis(10000), {}, pick);
      if (all.ok() && all.reduced == Bytes{120} &&
          all.picked ==
              std::vector<Bytes>{{static_cast<uint8_t>(pick[0])}, {static_cast<uint8_t>(pick[1])}})
        ++right;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(right, kRanks);
  EXPECT_EQ(store.multi_gets, kRanks + 1) << "one read a rank (the combiner's of every key aside)";
  EXPECT_EQ(store.key_reads, 0) << "no rank's key read alone";
  auto more = x.read_more(Deadline::after(1s));
  ASSERT_TRUE(more.ok()) << more.status().to_string();
  std::vector<Bytes> values;
  ASSERT_TRUE(decode_values(more.value(), kRanks, &values));
  EXPECT_EQ(values[5], Bytes{5});
  EXPECT_EQ(x.all_keys().back(), x.more_key()) << "erased with the rest";
}

// Where the combiner wrote neither (or the keys are all there is), the gather
// takes the picked values from the keys it reads, and read_more reduces them.
TEST(StoreExchange, PickedValuesAndTheSecondReductionComeFromTheKeysWithoutACombiner) {
  MemoryStore store;
  const StoreExchange x(store, "settings/", 3, summing(), summing());
  ASSERT_TRUE(store.set(x.key(0), Bytes{4}).ok());
  ASSERT_TRUE(store.set(x.key(1), Bytes{5}).ok());
  ASSERT_TRUE(store.set(x.key(2), Bytes{6}).ok());
  ASSERT_TRUE(store.set(x.combined_key(), Bytes{}).ok());  // the combiner could not read them
  auto all = x.gather(Deadline::after(5s), {}, 20ms, {}, {2, 0});
  ASSERT_TRUE(all.ok()) << all.status.to_string();
  EXPECT_EQ(all.reduced, Bytes{15});
  EXPECT_EQ(all.picked, (std::vector<Bytes>{{6}, {4}}));
  auto more = x.read_more(Deadline::after(2s));
  ASSERT_TRUE(more.ok()) << more.status().to_string();
  EXPECT_EQ(more.value(), Bytes{15});
  // Written by a combiner: taken as it is, the mark stripped.
  ASSERT_TRUE(store.set(x.more_key(), Bytes{StoreExchange::kReducedMark, 99}).ok());
  more = x.read_more(Deadline::after(1s));
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more.value(), Bytes{99});
}

// Every waiting rank asks the store again each time its wait runs out, and
// looks at the count: P requests a round each, served by the one store. At
// 16,384 ranks, slices of 0.8 s and a look every second (32,000 requests a
// second) kept a store sharing 2 CPUs with the ranks saturated, and creation
// took 12-18 s in the scale harness. A waiting rank now asks again every
// 150 us a rank (2.46 s here) and looks every other slice (4.9 s), so that all
// of them together ask about 10,000 times a second at most.
TEST(StoreExchange, AtThousandsOfRanksAWaitingRankAsksAgainInLongerSlices) {
  MemoryStore store;
  const StoreExchange x(store, "settings/", 16384);
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());  // the count's first add
  auto all = x.gather(Deadline::after(3s), {}, 20ms);
  EXPECT_EQ(all.ended, StoreExchange::Gathered::Ended::kTimedOut);
  // A slice of 2.46 s and the rest of the deadline (a third read of a
  // millisecond where the deadline's rest was rounded down). Was 4-5 of 0.82 s.
  EXPECT_GE(store.combined_reads, 2);
  EXPECT_LE(store.combined_reads, 3);
  // The count, only when the deadline passed (was once a second: 3 looks).
  EXPECT_EQ(store.adds - 1, 1);
}

TEST(PackedValues, EveryValueComesBackAndAddressesTakeAFewBytesEach) {
  std::vector<Bytes> values;
  std::vector<std::string> texts;
  for (int q = 0; q < 1000; ++q) {
    const std::string a = "127.0.0.1 " + std::to_string(40000 + 7 * q) + " lo";
    texts.push_back(a);
    values.emplace_back(a.begin(), a.end());
  }
  values.push_back(Bytes{});               // empty
  values.push_back(Bytes{'1', '2', '7'});  // all prefix
  values.push_back(Bytes{'l', 'o'});       // all suffix
  values.push_back(Bytes(300, 'x'));       // nothing shared, longer than the first
  for (size_t q = 1000; q < values.size(); ++q)
    texts.emplace_back(values[q].begin(), values[q].end());
  const Bytes packed = pack_values(values);
  EXPECT_LT(packed.size(), 1000u * 8 + 400)
      << "about 7 bytes per address (3 lengths, 4 digits), not 20";
  PackedValues back;
  ASSERT_TRUE(PackedValues::decode(packed, static_cast<int>(values.size()), &back));
  ASSERT_EQ(back.size(), static_cast<int>(values.size()));
  for (int q = 0; q < back.size(); ++q) EXPECT_EQ(back.at(q), texts[static_cast<size_t>(q)]) << q;
  EXPECT_EQ(back.all(), texts);
  EXPECT_EQ(PackedValues(texts).all(), texts);
  // Refused: another count, a cut, a share longer than the first value.
  EXPECT_FALSE(PackedValues::decode(packed, static_cast<int>(values.size()) - 1, &back));
  Bytes cut = packed;
  cut.pop_back();
  EXPECT_FALSE(PackedValues::decode(cut, static_cast<int>(values.size()), &back));
  EXPECT_FALSE(PackedValues::decode(Bytes{2, 0, 0, 1, 'a', 5, 0, 0}, 2, &back));
  EXPECT_FALSE(PackedValues::decode(Bytes{1, 1, 0, 0}, 1, &back))
      << "the first value shares nothing";
}

TEST(DistinctValues, EachDistinctValueOnceAndWhichRankWroteWhich) {
  std::vector<Bytes> values;
  for (int q = 0; q < 4096; ++q) {
    const std::string v = q == 7 ? "op C -1 5 done 3 of 8" : q == 9 ? "" : "op C -1 5 done 4 of 8";
    values.emplace_back(v.begin(), v.end());
  }
  const Bytes packed = pack_distinct(values);
  EXPECT_LT(packed.size(), 80u) << "each ledger once, and five runs of ranks";
  DistinctValues d;
  ASSERT_TRUE(DistinctValues::decode(packed, 4096, &d));
  EXPECT_EQ(d.size(), 4096);
  EXPECT_EQ(d.distinct(), 3);
  for (int q = 0; q < 4096; ++q)
    EXPECT_EQ(d.of_rank(q), std::string(values[static_cast<size_t>(q)].begin(),
                                        values[static_cast<size_t>(q)].end()));
  EXPECT_EQ(d.first_rank(d.index_of(7)), 7);
  EXPECT_EQ(d.ranks_with(d.index_of(0)), 4094);
  EXPECT_EQ(d.first_rank(d.index_of(100)), 0);
  const DistinctValues lengths =
      DistinctValues(d).transformed([](const std::string& v) { return std::to_string(v.size()); });
  EXPECT_EQ(lengths.of_rank(9), "0");
  EXPECT_EQ(lengths.of_rank(8), "21");
  const DistinctValues same(std::vector<std::string>{"a", "b", "a"});
  EXPECT_EQ(same.distinct(), 2);
  EXPECT_EQ(same.index_of(2), 0);
  // Alternating values: a run each, two bytes a rank at most.
  std::vector<Bytes> alternating;
  for (int q = 0; q < 1000; ++q) alternating.push_back(Bytes{static_cast<uint8_t>(q % 2)});
  const Bytes every_other = pack_distinct(alternating);
  EXPECT_LE(every_other.size(), 2u * 1000 + 16);
  ASSERT_TRUE(DistinctValues::decode(every_other, 1000, &d));
  EXPECT_EQ(d.of_rank(999), std::string(1, '\1'));
  EXPECT_EQ(d.ranks_with(0), 500);
  // Refused: another count, a cut, an index past the table, more distinct
  // values than ranks, a value no rank wrote, runs of no rank or past P.
  EXPECT_FALSE(DistinctValues::decode(packed, 4095, &d));
  Bytes cut = packed;
  cut.pop_back();
  EXPECT_FALSE(DistinctValues::decode(cut, 4096, &d));
  EXPECT_FALSE(DistinctValues::decode(Bytes{1, 1, 1, 'a', 1, 1}, 1, &d));
  EXPECT_FALSE(DistinctValues::decode(Bytes{1, 2, 1, 'a', 1, 'b', 0, 1}, 1, &d));
  EXPECT_FALSE(DistinctValues::decode(Bytes{2, 2, 1, 'a', 1, 'b', 0, 2}, 2, &d))
      << "'b' is no rank's";
  EXPECT_FALSE(DistinctValues::decode(Bytes{2, 1, 1, 'a', 0, 0, 0, 2}, 2, &d));
  EXPECT_FALSE(DistinctValues::decode(Bytes{2, 1, 1, 'a', 0, 3}, 2, &d));
  EXPECT_TRUE(DistinctValues::decode(Bytes{2, 1, 1, 'a', 0, 1, 0, 1}, 2, &d))
      << "two runs of one value: the same as one";
  EXPECT_EQ(d.ranks_with(0), 2);
}

// Above 512 ranks, while ranks are still arriving (the count moves), a
// waiting rank does not ask which of the P keys are absent: every waiting
// rank asking once a second was O(P^2) at the store. Once the count stops
// moving, it asks, and the judge hears who is missing. (Before: a look of
// every key a second after the gather began, with the count still moving.)
TEST(StoreExchange, AtThousandsOfRanksWhoIsMissingIsAskedOnlyOnceTheCountStalls) {
  constexpr int kRanks = 1000;
  MemoryStore store;
  const StoreExchange x(store, "settings/", kRanks);
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());
  std::atomic<int> checks_while_arriving{-1};
  std::thread others([&] {
    // Ranks 1..799 arrive over about 1.6 s; 800..999 never do.
    for (int q = 1; q < 800; ++q) {
      (void)x.publish(q, Bytes{1});
      std::this_thread::sleep_for(2ms);
    }
    checks_while_arriving = store.checks;
  });
  std::vector<int> missing;
  auto all = x.gather(Deadline::after(6s), [&](const std::vector<int>& m) {
    missing = m;
    return Status(ErrorCode::kAborted, "judged");
  });
  others.join();
  ASSERT_EQ(all.ended, StoreExchange::Gathered::Ended::kJudged) << all.status.to_string();
  EXPECT_EQ(checks_while_arriving, 0) << "no key looked up while the count still moved";
  ASSERT_EQ(missing.size(), 200u);
  EXPECT_EQ(missing.front(), 800);
}

// A judge that says "go on" sees who is missing, looked up at most once a second.
TEST(StoreExchange, WhoIsMissingIsLookedUpAtMostOnceASecond) {
  MemoryStore store;
  const StoreExchange x(store, "tune/0/", 4);
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());
  int judged = 0;
  auto all = x.gather(Deadline::after(300ms), [&](const std::vector<int>&) { ++judged; return Status(); }, 10ms);
  EXPECT_EQ(all.ended, StoreExchange::Gathered::Ended::kTimedOut);
  EXPECT_GE(judged, 10);
  // One look at the start and one when the deadline passed, of the 4 and then the 3 missing.
  EXPECT_LE(store.checks, 4 + 3);
}

// A store that answers nothing is the store's failure, not every rank missing.
TEST(StoreExchange, AStalledStoreIsNotMissingRanks) {
  MemoryStore store;
  const StoreExchange x(store, "recovery/2/ledger/", 3);
  ASSERT_TRUE(x.publish(0, Bytes{1}).ok());
  store.stalled = true;
  auto all = x.gather(Deadline::after(100ms), [](const std::vector<int>&) { return Status(); }, 20ms);
  EXPECT_EQ(all.ended, StoreExchange::Gathered::Ended::kStoreFailed);
  EXPECT_NE(all.status.message().find("did not answer"), std::string::npos) << all.status.message();
}

TEST(StoreNotices, FatalNoticeRoundTripsAndMalformedOnesAreRefused) {
  const store::FatalNotice f{ErrorCode::kDesync, 2, 1, "allreduce seq 7: ranks ran different ops\nsecond line"};
  const auto back = store::decode_fatal(store::encode(f));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->code, ErrorCode::kDesync);
  EXPECT_EQ(back->peer, 2);
  EXPECT_EQ(back->reporter, 1);
  EXPECT_EQ(back->message, f.message);
  for (const char* bad : {"", "7", "7\n2", "x\n2\n1\nmsg", "7\n2\n1", "999\n2\n1\nmsg", "0\n2\n1\nmsg", "7\n-\n1\nmsg"}) {
    EXPECT_FALSE(store::decode_fatal(bad).has_value()) << bad;
  }
}

TEST(StoreNotices, BallotRoundTrips) {
  const store::Ballot b{2, true, "rank 1: NCCL failed 3 times within 60 s"};
  const auto back = store::decode_ballot(store::encode(b));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->transport, 2);
  EXPECT_TRUE(back->drop_nccl);
  EXPECT_EQ(back->why, b.why);
  const auto keep = store::decode_ballot(store::encode(store::Ballot{1, false, ""}));
  ASSERT_TRUE(keep.has_value());
  EXPECT_FALSE(keep->drop_nccl);
  EXPECT_FALSE(store::decode_ballot(Bytes{}).has_value());
}

}  // namespace
}  // namespace rcoll
