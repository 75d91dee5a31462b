// The rendezvous stores: one test body over {TCP, file, prefix over TCP}, then
// what only the TCP store has (connect failures, tokens, server stop, hostile
// clients) and the wire decoder on truncated, oversized and random input.
// Loopback (127.0.0.1) only.
#include "rcoll/store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/store/tcp_store_protocol.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

long ms_since(Clock::time_point t) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
}

std::unique_ptr<TcpStoreServer> start_server(const std::string& token = "") {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.token = token;
  auto s = start_tcp_store_server(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

Result<std::shared_ptr<Store>> connect_to(uint16_t port, const std::string& token = "",
                                          std::chrono::milliseconds timeout = 3000ms) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = token;
  o.connect_timeout = timeout;
  return connect_tcp_store(o);
}

std::string make_temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "rcoll_store_test.XXXXXX").string();
  char* dir = ::mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

// ---- One body over every store ---------------------------------------------

// A store under test: `store` and a second, independent client of the same
// data (another connection / another handle), as a second rank would have.
struct Fixture {
  std::unique_ptr<TcpStoreServer> server;
  std::string dir;
  std::function<std::shared_ptr<Store>()> new_client;
};

enum class Kind { kTcp, kFile, kPrefixTcp };

std::string kind_name(const testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kTcp:
      return "Tcp";
    case Kind::kFile:
      return "File";
    case Kind::kPrefixTcp:
      return "PrefixOverTcp";
  }
  return "Unknown";
}

class StoreTest : public testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    switch (GetParam()) {
      case Kind::kTcp:
      case Kind::kPrefixTcp: {
        fx_.server = start_server();
        uint16_t port = fx_.server->port();
        bool prefixed = GetParam() == Kind::kPrefixTcp;
        fx_.new_client = [port, prefixed]() -> std::shared_ptr<Store> {
          auto c = connect_to(port);
          EXPECT_TRUE(c.ok()) << c.status().to_string();
          if (!c.ok()) return nullptr;
          auto s = std::move(c).value();
          return prefixed ? make_prefix_store(s, "comm7/epoch3") : s;
        };
        break;
      }
      case Kind::kFile: {
        fx_.dir = make_temp_dir();
        std::string dir = fx_.dir;
        fx_.new_client = [dir]() -> std::shared_ptr<Store> {
          auto s = open_file_store(dir);
          EXPECT_TRUE(s.ok()) << s.status().to_string();
          return s.ok() ? std::move(s).value() : nullptr;
        };
        break;
      }
    }
    store_ = fx_.new_client();
    other_ = fx_.new_client();
    ASSERT_TRUE(store_ && other_);
  }

  void TearDown() override {
    store_.reset();
    other_.reset();
    fx_.server.reset();
    if (!fx_.dir.empty()) std::filesystem::remove_all(fx_.dir);
  }

  Fixture fx_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> other_;
};

TEST_P(StoreTest, SetGetRoundTrip) {
  ASSERT_TRUE(store_->set("small", to_bytes("hello")).ok());
  ASSERT_TRUE(store_->set("empty", Bytes{}).ok());
  Bytes big(1 << 20);
  std::mt19937 rng(42);
  for (auto& b : big) b = static_cast<uint8_t>(rng());
  ASSERT_TRUE(store_->set("big", big).ok());

  auto small = other_->get("small", 1000ms);
  ASSERT_TRUE(small.ok()) << small.status().to_string();
  EXPECT_EQ(small.value(), to_bytes("hello"));
  auto empty = other_->get("empty", 1000ms);
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE(empty.value().empty());
  auto got_big = other_->get("big", 1000ms);
  ASSERT_TRUE(got_big.ok()) << got_big.status().to_string();
  EXPECT_EQ(got_big.value(), big);

  // Overwrite, and keys with characters a file name cannot hold.
  ASSERT_TRUE(store_->set("small", to_bytes("again")).ok());
  EXPECT_EQ(other_->get("small", 1000ms).value(), to_bytes("again"));
  std::string odd = "a/b/../c d%\n\x01\xff";
  ASSERT_TRUE(store_->set(odd, to_bytes("odd")).ok());
  EXPECT_EQ(other_->get(odd, 1000ms).value(), to_bytes("odd"));
  EXPECT_FALSE(other_->check("a").value());
  std::string long_key(3000, 'x');
  long_key += "/tail";
  ASSERT_TRUE(store_->set(long_key, to_bytes("long")).ok());
  EXPECT_EQ(other_->get(long_key, 1000ms).value(), to_bytes("long"));
}

TEST_P(StoreTest, RejectsOversizedKeyAndValue) {
  auto s = store_->set(std::string(5000, 'k'), to_bytes("v"));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  // The store keeps working afterwards.
  ASSERT_TRUE(store_->set("after", to_bytes("ok")).ok());
  EXPECT_EQ(store_->get("after", 1000ms).value(), to_bytes("ok"));
}

TEST_P(StoreTest, GetBlocksUntilAnotherClientSets) {
  std::atomic<int64_t> set_done_ns{0};
  std::thread setter([&] {
    std::this_thread::sleep_for(300ms);
    ASSERT_TRUE(other_->set("late", to_bytes("here")).ok());
    set_done_ns = Clock::now().time_since_epoch().count();
  });
  auto start = Clock::now();
  auto r = store_->get("late", 10000ms);
  auto returned = Clock::now();
  setter.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value(), to_bytes("here"));
  EXPECT_GE(ms_since(start), 250);
  auto lag = std::chrono::duration_cast<std::chrono::milliseconds>(
      returned.time_since_epoch() - Clock::duration(set_done_ns.load()));
  EXPECT_LT(lag.count(), 100) << "get returned " << lag.count() << " ms after the set";
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  auto start = Clock::now();
  auto r = store_->get("never/set", 300ms);
  long took = ms_since(start);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTimeout) << r.status().to_string();
  EXPECT_NE(r.status().message().find("never/set"), std::string::npos) << r.status().to_string();
  EXPECT_GE(took, 280);
  EXPECT_LT(took, 300 + 1000);
  // Zero timeout: a single look.
  auto zero = store_->get("never/set", 0ms);
  EXPECT_EQ(zero.status().code(), ErrorCode::kTimeout);
}

TEST_P(StoreTest, ConcurrentAddsSumExactly) {
  constexpr int kThreads = 4;
  constexpr int kAdds = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // Two threads share one client (thread safety), two use the other.
    Store* s = (t % 2 == 0) ? store_.get() : other_.get();
    threads.emplace_back([s] {
      for (int i = 0; i < kAdds; ++i) {
        auto r = s->add("counter", 1);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
      }
    });
  }
  for (auto& t : threads) t.join();
  auto total = store_->add("counter", 0);
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(total.value(), kThreads * kAdds);
  EXPECT_EQ(other_->get("counter", 1000ms).value(), to_bytes(std::to_string(kThreads * kAdds)));
  EXPECT_EQ(store_->add("counter", -4001).value(), -1);
  ASSERT_TRUE(store_->set("text", to_bytes("not a number")).ok());
  auto bad = store_->add("text", 1);
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument) << bad.status().to_string();
}

TEST_P(StoreTest, SharedClientGetDoesNotBlockSetFromAnotherThread) {
  // One client object, two threads: a parked get must not hold up the set.
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(store_->set("shared", to_bytes("x")).ok());
  });
  auto start = Clock::now();
  auto r = store_->get("shared", 5000ms);
  setter.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_LT(ms_since(start), 1000);
}

TEST_P(StoreTest, WaitOnSeveralKeys) {
  ASSERT_TRUE(store_->set("w/a", to_bytes("1")).ok());
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(other_->set("w/b", to_bytes("2")).ok());
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(other_->add("w/c", 5).ok());
  });
  auto start = Clock::now();
  Status s = store_->wait({"w/a", "w/b", "w/c"}, 5000ms);
  setter.join();
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_GE(ms_since(start), 150);

  auto t0 = Clock::now();
  Status missing = store_->wait({"w/a", "w/missing1", "w/b", "w/missing2"}, 200ms);
  EXPECT_EQ(missing.code(), ErrorCode::kTimeout) << missing.to_string();
  EXPECT_NE(missing.message().find("w/missing1"), std::string::npos) << missing.to_string();
  EXPECT_NE(missing.message().find("w/missing2"), std::string::npos) << missing.to_string();
  EXPECT_EQ(missing.message().find("\"w/a\""), std::string::npos) << missing.to_string();
  EXPECT_LT(ms_since(t0), 200 + 1000);
  EXPECT_TRUE(store_->wait({}, 0ms).ok());
}

TEST_P(StoreTest, CheckAndErase) {
  EXPECT_FALSE(store_->check("ce").value());
  ASSERT_TRUE(store_->set("ce", to_bytes("v")).ok());
  EXPECT_TRUE(other_->check("ce").value());
  ASSERT_TRUE(other_->erase("ce").ok());
  EXPECT_FALSE(store_->check("ce").value());
  EXPECT_EQ(store_->get("ce", 50ms).status().code(), ErrorCode::kTimeout);
  EXPECT_TRUE(store_->erase("ce").ok());  // erasing a missing key is fine
}

TEST_P(StoreTest, PrefixIsolation) {
  auto p1 = make_prefix_store(store_, "comm1");
  auto p2 = make_prefix_store(other_, "comm2");
  ASSERT_TRUE(p1->set("k", to_bytes("one")).ok());
  ASSERT_TRUE(p2->set("k", to_bytes("two")).ok());
  EXPECT_EQ(p1->get("k", 1000ms).value(), to_bytes("one"));
  EXPECT_EQ(p2->get("k", 1000ms).value(), to_bytes("two"));
  EXPECT_FALSE(store_->check("k").value());
  EXPECT_EQ(other_->get("comm1/k", 1000ms).value(), to_bytes("one"));
  EXPECT_EQ(p1->add("n", 3).value(), 3);
  EXPECT_FALSE(p2->check("n").value());
  ASSERT_TRUE(p2->erase("k").ok());
  EXPECT_TRUE(p1->check("k").value());
  auto t = p2->get("k", 50ms);
  EXPECT_EQ(t.status().code(), ErrorCode::kTimeout);
  EXPECT_NE(t.status().message().find("comm2/k"), std::string::npos) << t.status().to_string();
}

// What setup and recovery do at every step: one request each with the TCP
// store, the single calls elsewhere; the same results everywhere.
TEST_P(StoreTest, SetAndAddSetsTheKeyThenCounts) {
  EXPECT_EQ(store_->set_and_add("x/0", to_bytes("zero"), "x/n", 1).value(), 1);
  EXPECT_EQ(other_->set_and_add("x/1", to_bytes("one"), "x/n", 1).value(), 2);
  EXPECT_EQ(other_->get("x/0", 1000ms).value(), to_bytes("zero"));
  EXPECT_EQ(store_->get("x/1", 1000ms).value(), to_bytes("one"));
  EXPECT_EQ(store_->add("x/n", 0).value(), 2);
  // A counter that is not one: the value is set, the add refused.
  ASSERT_TRUE(store_->set("x/text", to_bytes("abc")).ok());
  EXPECT_FALSE(store_->set_and_add("x/2", to_bytes("two"), "x/text", 1).ok());
}

TEST_P(StoreTest, MultiGetWaitsForEveryKeyAndAnswersInKeyOrder) {
  ASSERT_TRUE(store_->set("m/b", to_bytes("B")).ok());
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(other_->set("m/a", to_bytes("A")).ok());
    ASSERT_TRUE(other_->set("m/empty", Bytes{}).ok());
  });
  auto got = store_->multi_get({"m/a", "m/empty", "m/b", "m/a"}, 5000ms);
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got.value().size(), 4u);
  EXPECT_EQ(got.value()[0], to_bytes("A"));
  EXPECT_TRUE(got.value()[1].empty());
  EXPECT_EQ(got.value()[2], to_bytes("B"));
  EXPECT_EQ(got.value()[3], to_bytes("A"));
  auto missing = store_->multi_get({"m/a", "m/never"}, 100ms);
  EXPECT_EQ(missing.status().code(), ErrorCode::kTimeout) << missing.status().to_string();
  EXPECT_NE(missing.status().message().find("m/never"), std::string::npos)
      << missing.status().to_string();
}

// An exchange's publish and its wait in one call: the count comes back in
// every answer; the rank that completes the count waits for nothing; the
// others wait for the keys (a timeout an answer, not an error).
TEST_P(StoreTest, PublishAndWaitCountsThenWaitsUnlessItCompletedTheCount) {
  auto first = store_->publish_and_wait("p/0", to_bytes("zero"), "p/n", 3, {"p/all", "p/1"}, 50ms);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first.value().count, 1);
  EXPECT_TRUE(first.value().timed_out);
  EXPECT_FALSE(first.value().completed);
  Result<Store::Published> second = Status();
  std::thread waiting([&] {
    second = other_->publish_and_wait("p/1", to_bytes("one"), "p/n", 3, {"p/all", "p/0"}, 5000ms);
  });
  std::this_thread::sleep_for(100ms);
  auto last = store_->publish_and_wait("p/2", to_bytes("two"), "p/n", 3, {"p/all"}, 5000ms);
  ASSERT_TRUE(last.ok()) << last.status().to_string();
  EXPECT_EQ(last.value().count, 3);
  EXPECT_TRUE(last.value().completed) << "it completed the count: nothing to wait for";
  EXPECT_TRUE(last.value().values.empty());
  ASSERT_TRUE(store_->set("p/all", to_bytes("everyone")).ok());  // as its combine would
  waiting.join();
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second.value().count, 2);
  EXPECT_FALSE(second.value().timed_out);
  ASSERT_EQ(second.value().values.size(), 2u);
  EXPECT_EQ(second.value().values[0], to_bytes("everyone"));
  EXPECT_EQ(second.value().values[1], to_bytes("zero"));
  EXPECT_EQ(store_->get("p/2", 1000ms).value(), to_bytes("two"));
  // A counter that is not one: refused, as set_and_add's.
  ASSERT_TRUE(store_->set("p/text", to_bytes("abc")).ok());
  EXPECT_FALSE(store_->publish_and_wait("p/3", to_bytes("x"), "p/text", 3, {"p/all"}, 50ms).ok());
}

TEST_P(StoreTest, EraseManyErasesEveryKeyAndIgnoresAbsentOnes) {
  ASSERT_TRUE(store_->set("e/1", to_bytes("1")).ok());
  ASSERT_TRUE(store_->set("e/2", to_bytes("2")).ok());
  ASSERT_TRUE(store_->set("e/3", to_bytes("3")).ok());
  ASSERT_TRUE(other_->erase_many({"e/1", "e/absent", "e/3"}).ok());
  EXPECT_FALSE(store_->check("e/1").value());
  EXPECT_TRUE(store_->check("e/2").value());
  EXPECT_FALSE(store_->check("e/3").value());
}

// How a waiting rank names who is missing: one request with the TCP store.
TEST_P(StoreTest, AbsentNamesTheMissingKeysInTheOrderAsked) {
  ASSERT_TRUE(store_->set("ab/1", to_bytes("1")).ok());
  ASSERT_TRUE(other_->add("ab/3", 1).ok());
  auto absent = other_->absent({"ab/0", "ab/1", "ab/2", "ab/3", "ab/4"});
  ASSERT_TRUE(absent.ok()) << absent.status().to_string();
  EXPECT_EQ(absent.value(), (std::vector<std::string>{"ab/0", "ab/2", "ab/4"}));
  auto none = store_->absent({"ab/1", "ab/3"});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none.value().empty());
}

// The epoch watch: woken by another client's set, ended by a cancel long
// before its timeout, false at the timeout.
TEST_P(StoreTest, WatchWakesOnASetAndEndsOnACancel) {
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(other_->set("watch/k", to_bytes("failed")).ok());
  });
  auto seen = store_->watch("watch/k", 10000ms, [] { return false; });
  setter.join();
  ASSERT_TRUE(seen.ok()) << seen.status().to_string();
  EXPECT_TRUE(seen.value());
  EXPECT_FALSE(store_->watch("watch/other", 50ms, [] { return false; }).value());

  std::atomic<bool> stop{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    stop = true;
  });
  const auto t0 = Clock::now();
  auto cancelled = store_->watch("watch/other", 20000ms, [&] { return stop.load(); });
  canceller.join();
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().to_string();
  EXPECT_FALSE(cancelled.value());
  EXPECT_LT(ms_since(t0), 10000) << "the cancel, not the timeout, ended the watch";
  // The client is still usable after a cancel.
  ASSERT_TRUE(other_->set("watch/other", to_bytes("x")).ok());
  EXPECT_TRUE(store_->watch("watch/other", 1000ms, [] { return false; }).value());
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest,
                         testing::Values(Kind::kTcp, Kind::kFile, Kind::kPrefixTcp), kind_name);

// ---- TCP store only ---------------------------------------------------------

// A port on 127.0.0.1 with nothing listening: bind one, note it, close it.
uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// More keys than one request may name (4,096): the client splits them.
TEST(TcpStore, MultiGetAbsentAndEraseManyTakeMoreKeysThanOneRequestNames) {
  auto server = start_server();
  auto c = connect_to(server->port());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::shared_ptr<Store> store = std::move(c).value();
  std::vector<std::string> keys;
  for (int i = 0; i < 5000; ++i) {
    keys.push_back("many/" + std::to_string(i));
    ASSERT_TRUE(store->set(keys.back(), to_bytes(std::to_string(i * 7))).ok());
  }
  auto got = store->multi_get(keys, 5000ms);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got.value().size(), keys.size());
  for (int i = 0; i < 5000; ++i)
    EXPECT_EQ(got.value()[static_cast<size_t>(i)], to_bytes(std::to_string(i * 7)));
  ASSERT_TRUE(store->erase(keys[4500]).ok());
  ASSERT_TRUE(store->erase(keys[10]).ok());
  auto absent = store->absent(keys);
  ASSERT_TRUE(absent.ok()) << absent.status().to_string();
  EXPECT_EQ(absent.value(), (std::vector<std::string>{keys[10], keys[4500]}));
  ASSERT_TRUE(store->erase_many(keys).ok());
  EXPECT_FALSE(store->check("many/0").value());
  EXPECT_FALSE(store->check("many/4999").value());
}

// An answer over the 64 MiB a value may hold is refused, sized before the
// server copies anything (4,096 names of one 64 MiB key would be 256 GiB).
TEST(TcpStore, AMultiGetAnswerOverTheValueLimitIsRefusedAndTheStoreServesOn) {
  auto server = start_server();
  auto c = connect_to(server->port());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::shared_ptr<Store> store = std::move(c).value();
  ASSERT_TRUE(store->set("big", Bytes(size_t{40} << 20, 7)).ok());
  auto twice = store->multi_get({"big", "big"}, 1000ms);
  EXPECT_EQ(twice.status().code(), ErrorCode::kInvalidArgument) << twice.status().to_string();
  EXPECT_NE(twice.status().message().find("over the limit"), std::string::npos)
      << twice.status().to_string();
  auto once = store->multi_get({"big"}, 1000ms);
  ASSERT_TRUE(once.ok()) << once.status().to_string();
  EXPECT_EQ(once.value()[0].size(), size_t{40} << 20);
}

TEST(TcpStore, ConnectToClosedPortFailsWithinTimeout) {
  uint16_t port = closed_port();
  auto start = Clock::now();
  auto r = connect_to(port, "", 800ms);
  long took = ms_since(start);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kPeerUnreachable) << r.status().to_string();
  std::string addr = "127.0.0.1:" + std::to_string(port);
  EXPECT_NE(r.status().message().find(addr), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("RCOLL_STORE_ADDR"), std::string::npos);
  EXPECT_GE(took, 700);  // it retried, not gave up at the first refusal
  EXPECT_LT(took, 800 + 1000);
}

TEST(TcpStore, ConnectRetriesUntilTheServerComesUp) {
  // Bind a server to a port picked now, but start it only after the client began.
  auto probe = start_server();
  uint16_t port = probe->port();
  probe.reset();
  std::unique_ptr<TcpStoreServer> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    auto s = start_tcp_store_server(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    late = std::move(s).value();
  });
  auto c = connect_to(port, "", 5000ms);
  starter.join();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_TRUE(c.value()->set("k", to_bytes("v")).ok());
}

TEST(TcpStore, RejectsBadOptions) {
  EXPECT_EQ(connect_to(0).status().code(), ErrorCode::kInvalidArgument);
  TcpStoreOptions o;
  o.host = "";
  EXPECT_EQ(start_tcp_store_server(o).status().code(), ErrorCode::kInvalidArgument);
}

TEST(TcpStore, TokenMismatchIsRefused) {
  auto server = start_server("job-secret");
  auto wrong = connect_to(server->port(), "other-job", 2000ms);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), ErrorCode::kStore) << wrong.status().to_string();
  EXPECT_NE(wrong.status().message().find("job token mismatch"), std::string::npos);
  EXPECT_NE(wrong.status().message().find(server->address()), std::string::npos)
      << wrong.status().to_string();
  auto none = connect_to(server->port(), "", 2000ms);
  EXPECT_EQ(none.status().code(), ErrorCode::kStore) << none.status().to_string();
  auto right = connect_to(server->port(), "job-secret", 2000ms);
  ASSERT_TRUE(right.ok()) << right.status().to_string();
  EXPECT_TRUE(right.value()->set("k", to_bytes("v")).ok());
}

TEST(TcpStore, ServerStopWhileClientIsParkedInGet) {
  auto server = start_server();
  auto c = connect_to(server->port(), "", 1000ms);
  ASSERT_TRUE(c.ok());
  auto store = c.value();
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    server->stop();
  });
  auto start = Clock::now();
  auto r = store->get("never", 30000ms);
  long took = ms_since(start);
  stopper.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kStore) << r.status().to_string();
  EXPECT_NE(r.status().message().find(server->address()), std::string::npos)
      << r.status().to_string();
  EXPECT_LT(took, 3000);
  // Later calls fail too, and promptly enough (bounded by connect_timeout).
  auto after = store->set("k", to_bytes("v"));
  EXPECT_FALSE(after.ok());
}

TEST(TcpStore, ServerDestroyedWithParkedAndIdleClients) {
  auto server = start_server();
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(connect_to(server->port()).value());
  std::vector<std::thread> parked;
  std::atomic<int> errors{0};
  for (int i = 0; i < 4; ++i) {
    parked.emplace_back([&, i] {
      if (!clients[i]->wait({"a", "b"}, 20000ms).ok()) ++errors;
    });
  }
  std::this_thread::sleep_for(200ms);
  server.reset();
  for (auto& t : parked) t.join();
  EXPECT_EQ(errors.load(), 4);
}

// A raw TCP connection for speaking garbage to the server.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawClient() { ::close(fd_); }
  bool connected() const { return connected_; }
  void send(const Bytes& b) { (void)::send(fd_, b.data(), b.size(), MSG_NOSIGNAL); }
  // True when the server closed the connection within `timeout` (EOF or reset).
  bool closed_by_server(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    uint8_t buf[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

Bytes hello_frame(const std::string& token = "") {
  store_wire::Request q;
  q.op = store_wire::Op::kHello;
  q.value = to_bytes(token);
  return store_wire::encode_request(q);
}

TEST(TcpStore, HostileClientsAreDisconnectedAndOthersServed) {
  auto server = start_server();
  auto good = connect_to(server->port()).value();
  ASSERT_TRUE(good->set("before", to_bytes("1")).ok());

  {  // Plain garbage.
    RawClient raw(server->port());
    ASSERT_TRUE(raw.connected());
    raw.send(to_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_TRUE(raw.closed_by_server(2000ms));
  }
  {  // A valid magic with a 4 GiB body declared.
    RawClient raw(server->port());
    Bytes frame = hello_frame();
    frame[8] = frame[9] = frame[10] = frame[11] = 0xff;
    raw.send(frame);
    EXPECT_TRUE(raw.closed_by_server(2000ms));
  }
  {  // A request before hello.
    RawClient raw(server->port());
    store_wire::Request q;
    q.op = store_wire::Op::kSet;
    q.keys = {"sneaky"};
    raw.send(store_wire::encode_request(q));
    EXPECT_TRUE(raw.closed_by_server(2000ms));
    EXPECT_FALSE(good->check("sneaky").value());
  }
  {  // After hello: a set whose key declares 1 MiB inside a small body.
    RawClient raw(server->port());
    raw.send(hello_frame());
    store_wire::Request q;
    q.op = store_wire::Op::kSet;
    q.keys = {"k"};
    Bytes frame = store_wire::encode_request(q);
    frame[16] = 0x00;
    frame[17] = 0x00;
    frame[18] = 0x10;  // key length 0x100000
    raw.send(frame);
    EXPECT_TRUE(raw.closed_by_server(2000ms));
  }
  // A client that declares a 60 MiB body and then stalls after a few bytes:
  // it holds only its own connection; the server serves everyone else meanwhile.
  RawClient stalled(server->port());
  stalled.send(hello_frame());
  {
    store_wire::Request q;
    q.op = store_wire::Op::kSet;
    q.keys = {"huge"};
    q.value = Bytes(16, 7);
    Bytes frame = store_wire::encode_request(q);
    uint32_t declared = 60u << 20;
    for (int i = 0; i < 4; ++i) frame[8 + i] = static_cast<uint8_t>(declared >> (8 * i));
    frame.resize(frame.size() - 4);
    stalled.send(frame);
  }
  auto other = connect_to(server->port());
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  ASSERT_TRUE(other.value()->set("after", to_bytes("2")).ok());
  EXPECT_EQ(good->get("after", 1000ms).value(), to_bytes("2"));
  EXPECT_EQ(good->get("before", 1000ms).value(), to_bytes("1"));
  EXPECT_FALSE(good->check("huge").value());
}

TEST(TcpStore, ClientThatLeavesWhileParkedIsCleanedUp) {
  auto server = start_server();
  {
    RawClient raw(server->port());
    raw.send(hello_frame());
    store_wire::Request q;
    q.op = store_wire::Op::kGet;
    q.keys = {"parked"};
    q.integer = 60000;
    raw.send(store_wire::encode_request(q));
    std::this_thread::sleep_for(50ms);
  }  // disconnects while parked
  std::this_thread::sleep_for(50ms);
  auto c = connect_to(server->port()).value();
  ASSERT_TRUE(c->set("parked", to_bytes("v")).ok());  // wakes nobody, crashes nothing
  EXPECT_EQ(c->get("parked", 1000ms).value(), to_bytes("v"));
}

// Many waiters parked on one key, some running out (each leaves the key's
// list in O(1), the last one moved into its place) while the others stay:
// every one still parked is answered once the key is set, none twice.
TEST(TcpStore, WaitersThatRunOutLeaveTheOthersParkedOnTheSameKey) {
  auto server = start_server();
  constexpr int kWaiters = 12;
  std::vector<std::thread> waiters;
  std::atomic<int> timed_out{0}, answered{0}, wrong{0};
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      auto c = connect_to(server->port());
      if (!c.ok()) return (void)++wrong;
      // Every third one runs out first, from the middle of the list as well.
      auto got = c.value()->get("shared", i % 3 == 1 ? 100ms : 5000ms);
      if (got.ok()) {
        if (got.value() == to_bytes("v"))
          ++answered;
        else
          ++wrong;
      } else if (got.status().code() == ErrorCode::kTimeout) {
        ++timed_out;
      } else {
        ++wrong;
      }
    });
  }
  std::this_thread::sleep_for(400ms);  // the short ones ran out
  auto c = connect_to(server->port()).value();
  ASSERT_TRUE(c->set("shared", to_bytes("v")).ok());
  for (auto& t : waiters) t.join();
  EXPECT_EQ(timed_out, kWaiters / 3);
  EXPECT_EQ(answered, kWaiters - kWaiters / 3);
  EXPECT_EQ(wrong, 0);
}

TEST(TcpStore, LargestValueRoundTripsAndOneMoreByteIsRejected) {
  auto server = start_server();
  auto c = connect_to(server->port()).value();
  Bytes max(store_wire::kMaxValueLength, 0x5a);
  max.front() = 1;
  max.back() = 2;
  ASSERT_TRUE(c->set("max", max).ok());
  auto got = c->get("max", 5000ms);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(got.value() == max);
  max.push_back(0);
  EXPECT_EQ(c->set("max", max).code(), ErrorCode::kInvalidArgument);
}

// A listening socket that never accepts: the kernel completes the handshake,
// nobody ever answers the hello.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  int fd() const { return fd_; }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(TcpStore, ServerThatNeverAnswersHelloIsUnreachable) {
  SilentListener silent;
  auto start = Clock::now();
  auto r = connect_to(silent.port(), "", 500ms);
  long took = ms_since(start);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kPeerUnreachable) << r.status().to_string();
  EXPECT_LT(took, 500 + 1500);
}

TEST(TcpStore, ClientGuardsAgainstAServerThatFreezesMidGet) {
  // A fake store: answers the hello, then reads requests and never answers them.
  SilentListener listener;
  std::atomic<bool> done{false};
  std::thread fake([&] {
    int conn = ::accept(listener.fd(), nullptr, nullptr);
    ASSERT_GE(conn, 0);
    uint8_t buf[4096];
    ssize_t n = ::recv(conn, buf, sizeof(buf), 0);  // the hello (small: one segment)
    EXPECT_GT(n, 0);
    Bytes ok = store_wire::encode_response(store_wire::Response{});
    ::send(conn, ok.data(), ok.size(), MSG_NOSIGNAL);
    while (!done) {
      pollfd p{conn, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0 && ::recv(conn, buf, sizeof(buf), 0) <= 0) break;
    }
    ::close(conn);
  });
  auto c = connect_to(listener.port(), "", 2000ms);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto start = Clock::now();
  auto r = c.value()->get("frozen", 200ms);
  long took = ms_since(start);
  done = true;
  fake.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTimeout) << r.status().to_string();
  EXPECT_NE(r.status().message().find("frozen"), std::string::npos) << r.status().to_string();
  EXPECT_GE(took, 200);
  EXPECT_LT(took, 200 + 2000 + 1000);
}

// ---- The wire decoder -------------------------------------------------------

using store_wire::Op;
using store_wire::Reply;
using store_wire::Request;
using store_wire::Response;

std::vector<Request> sample_requests() {
  std::vector<Request> out;
  out.push_back({Op::kHello, {}, to_bytes("token"), 0});
  out.push_back({Op::kSet, {"key"}, to_bytes("value"), 0});
  out.push_back({Op::kSet, {""}, {}, 0});
  out.push_back({Op::kGet, {"k"}, {}, 1500});
  out.push_back({Op::kAdd, {"n"}, {}, -42});
  out.push_back({Op::kWait, {"a", "bb", "ccc"}, {}, 100});
  out.push_back({Op::kCheck, {"c"}, {}, 0});
  out.push_back({Op::kErase, {"e"}, {}, 0});
  out.push_back({Op::kSetAdd, {"k/3", "k/n"}, to_bytes("v"), 1});
  out.push_back({Op::kMultiGet, {"k/0", "k/1"}, {}, 250});
  out.push_back({Op::kEraseMany, {"k/0", "k/1", "k/n"}, {}, 0});
  return out;
}

TEST(StoreWire, RequestsRoundTrip) {
  for (const auto& q : sample_requests()) {
    Bytes frame = store_wire::encode_request(q);
    auto d = store_wire::decode_request(frame);
    ASSERT_TRUE(d.ok()) << store_wire::to_string(q.op) << ": " << d.status().to_string();
    EXPECT_EQ(d.value().op, q.op);
    EXPECT_EQ(d.value().keys, q.keys);
    EXPECT_EQ(d.value().value, q.value);
    EXPECT_EQ(d.value().integer, q.integer);
  }
  Response r{Reply::kTimeout, {"x", "y"}, to_bytes("why"), -7};
  auto d = store_wire::decode_response(store_wire::encode_response(r));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value().reply, Reply::kTimeout);
  EXPECT_EQ(d.value().keys, r.keys);
  EXPECT_EQ(d.value().value, r.value);
  EXPECT_EQ(d.value().integer, -7);
}

TEST(StoreWire, EveryTruncationIsAnError) {
  for (const auto& q : sample_requests()) {
    Bytes frame = store_wire::encode_request(q);
    for (size_t n = 0; n < frame.size(); ++n) {
      auto d = store_wire::decode_request(std::span<const uint8_t>(frame.data(), n));
      EXPECT_FALSE(d.ok()) << "prefix of " << n << " bytes decoded";
      EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
    }
    // And every truncated body, with the header adjusted to match it.
    for (size_t n = store_wire::kHeaderBytes; n < frame.size(); ++n) {
      Bytes cut(frame.begin(), frame.begin() + static_cast<long>(n));
      uint32_t body = static_cast<uint32_t>(n - store_wire::kHeaderBytes);
      for (int i = 0; i < 4; ++i) cut[8 + i] = static_cast<uint8_t>(body >> (8 * i));
      EXPECT_FALSE(store_wire::decode_request(cut).ok()) << "body cut at " << n;
    }
    Bytes longer = frame;
    longer.push_back(0);
    EXPECT_FALSE(store_wire::decode_request(longer).ok());
  }
}

TEST(StoreWire, OversizedFieldsAreRejectedBeforeAllocation) {
  // Header declaring more than the body limit.
  Bytes frame = store_wire::encode_request({Op::kSet, {"k"}, {}, 0});
  Bytes header(frame.begin(), frame.begin() + store_wire::kHeaderBytes);
  for (int i = 8; i < 12; ++i) header[i] = 0xff;
  auto h = store_wire::decode_header(header, store_wire::kRequestMagic);
  EXPECT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("limit"), std::string::npos) << h.status().to_string();

  // A key longer than kMaxKeyLength (sent in full).
  std::string long_key(store_wire::kMaxKeyLength + 1, 'k');
  Request q{Op::kSet, {long_key}, {}, 0};
  EXPECT_FALSE(store_wire::validate(q).ok());
  EXPECT_FALSE(store_wire::decode_request(store_wire::encode_request(q)).ok());

  // Huge declared counts and lengths inside a small body.
  Bytes body = {0xff, 0xff, 0xff, 0xff};  // key_count = 4G
  EXPECT_FALSE(store_wire::decode_request_body(static_cast<uint8_t>(Op::kWait), body).ok());
  body = {0x10, 0x00, 0x00, 0x00};  // 16 keys, nothing after
  EXPECT_FALSE(store_wire::decode_request_body(static_cast<uint8_t>(Op::kWait), body).ok());
  // One key, then a value declared at 64 MiB + 1.
  body = {1, 0, 0, 0, 1, 0, 0, 0, 'k'};
  uint32_t too_big = static_cast<uint32_t>(store_wire::kMaxValueLength + 1);
  for (int i = 0; i < 4; ++i) body.push_back(static_cast<uint8_t>(too_big >> (8 * i)));
  auto d = store_wire::decode_request_body(static_cast<uint8_t>(Op::kSet), body);
  EXPECT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("limit"), std::string::npos) << d.status().to_string();

  // Values on ops that take none, wrong key counts, negative timeouts, unknown ops.
  EXPECT_FALSE(store_wire::validate({Op::kGet, {"k"}, to_bytes("x"), 0}).ok());
  EXPECT_FALSE(store_wire::validate({Op::kSet, {"a", "b"}, {}, 0}).ok());
  EXPECT_FALSE(store_wire::validate({Op::kGet, {"k"}, {}, -1}).ok());
  EXPECT_FALSE(store_wire::validate({Op::kWait, {}, {}, 0}).ok());
  Bytes good = store_wire::encode_request({Op::kCheck, {"k"}, {}, 0});
  good[4] = 99;
  EXPECT_FALSE(store_wire::decode_request(good).ok());
  good = store_wire::encode_request({Op::kCheck, {"k"}, {}, 0});
  good[0] ^= 1;
  EXPECT_FALSE(store_wire::decode_request(good).ok());
  good = store_wire::encode_request({Op::kCheck, {"k"}, {}, 0});
  good[5] = store_wire::kVersion + 1;  // version
  EXPECT_FALSE(store_wire::decode_request(good).ok());
}

TEST(StoreWire, RandomAndMutatedInputNeverCrashes) {
  std::mt19937_64 rng(1234);
  auto samples = sample_requests();
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    Bytes frame;
    if (iter % 2 == 0) {
      frame = store_wire::encode_request(samples[rng() % samples.size()]);
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) frame[rng() % frame.size()] = static_cast<uint8_t>(rng());
      if (rng() % 4 == 0) frame.resize(rng() % (frame.size() + 1));
    } else {
      frame.resize(rng() % 64);
      for (auto& b : frame) b = static_cast<uint8_t>(rng());
    }
    auto d = store_wire::decode_request(frame);
    if (d.ok()) {
      ++accepted;
      EXPECT_TRUE(store_wire::validate(d.value()).ok());
    }
    (void)store_wire::decode_response(frame);
  }
  // Mutations that only touch the value or integer still decode; that is fine.
  EXPECT_LT(accepted, 20000);
}

TEST(StoreWire, Counters) {
  int64_t v = 0;
  EXPECT_TRUE(store_wire::parse_counter(to_bytes("-9223372036854775808"), v));
  EXPECT_EQ(v, INT64_MIN);
  EXPECT_TRUE(store_wire::parse_counter(to_bytes("9223372036854775807"), v));
  EXPECT_EQ(v, INT64_MAX);
  EXPECT_FALSE(store_wire::parse_counter(to_bytes("9223372036854775808"), v));
  EXPECT_FALSE(store_wire::parse_counter(to_bytes("-"), v));
  EXPECT_FALSE(store_wire::parse_counter(to_bytes("1x"), v));
  EXPECT_TRUE(store_wire::parse_counter(Bytes{}, v));
  EXPECT_EQ(v, 0);
}

}  // namespace
}  // namespace rcoll
