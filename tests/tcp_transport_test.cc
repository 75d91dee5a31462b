// The TCP transport alone, ranks as threads over loopback: receives posted
// with post_background_recv (completion credits) are matched in order with a
// peer's other receives and complete while the rank waits on other peers.
#include "transports/tcp/tcp_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "rcoll/store.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;

// Runs body(transport) on `size` connected TCP transports, one thread each.
void run_transports(int size, const std::function<void(Transport&)>& body) {
  TcpStoreOptions server_opts;
  server_opts.host = "127.0.0.1";
  server_opts.port = 0;
  auto server = start_tcp_store_server(server_opts);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const uint16_t port = server.value()->port();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      TcpStoreOptions so;
      so.host = "127.0.0.1";
      so.port = port;
      so.connect_timeout = 5000ms;
      auto store = connect_tcp_store(so);
      if (!store.ok()) {
        ADD_FAILURE() << "rank " << r << ": " << store.status().to_string();
        return;
      }
      TcpConnectParams p;
      p.rank = r;
      p.size = size;
      p.store = store.value();
      p.ifname_spec = "=lo";
      p.deadline = Deadline::after(5000ms);
      auto t = connect_tcp_transport(p);
      if (!t.ok()) {
        ADD_FAILURE() << "rank " << r << ": " << t.status().to_string();
        return;
      }
      body(*t.value());
    });
  }
  for (auto& t : threads) t.join();
}

FrameHeader frame(uint16_t step, uint64_t payload) {
  FrameHeader h;
  h.op_kind = OpKind::kBroadcast;
  h.op_seq = 7;
  h.count = 1024;
  h.root = 0;
  h.step = step;
  h.payload_bytes = payload;
  return h;
}

// Progresses until every request in `reqs` finished or 5 s passed.
bool wait_all(Transport& t, std::initializer_list<Request*> reqs) {
  const Deadline give_up = Deadline::after(5000ms);
  for (;;) {
    bool all = true;
    for (Request* r : reqs) all = all && r->finished();
    if (all) return true;
    if (give_up.expired()) return false;
    t.progress(Deadline::after(100ms));
  }
}

constexpr uint16_t kCredit = 0xFFFE, kData = 0;

// Rank 0 waits on rank 1's data frame (sent 50 ms late) while rank 2's credit
// frame, posted as a background receive, comes in at once: both complete.
TEST(TcpTransportTest, BackgroundReceiveCompletesWhileAnotherPeerIsAwaited) {
  std::atomic<bool> credit_done_first{false};
  run_transports(3, [&](Transport& t) {
    std::vector<char> data(4096);
    Request send, recv, credit;
    if (t.rank() == 0) {
      t.post_background_recv(2, frame(kCredit, 0), &credit);
      t.post_recv(1, frame(kData, data.size()), data.data(), &recv);
      ASSERT_TRUE(wait_all(t, {&credit, &recv}))
          << "credit " << credit.finished() << ", data " << recv.finished();
      EXPECT_FALSE(credit.failed()) << credit.status.to_string();
      EXPECT_FALSE(recv.failed()) << recv.status.to_string();
      for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<char>(i * 7)) << i;
    } else if (t.rank() == 1) {
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
      std::this_thread::sleep_for(50ms);
      t.post_send(0, frame(kData, data.size()), data.data(), &send);
      ASSERT_TRUE(wait_all(t, {&send}));
      EXPECT_FALSE(send.failed()) << send.status.to_string();
    } else {
      t.post_send(0, frame(kCredit, 0), nullptr, &send);
      ASSERT_TRUE(wait_all(t, {&send}));
      EXPECT_FALSE(send.failed()) << send.status.to_string();
    }
    // Every rank stays until rank 0 has both, so no connection closes early.
    std::this_thread::sleep_for(200ms);
  });
}

// A background receive and a later ordinary one from the same peer match the
// peer's frames in post order, the second's payload landing where it should;
// a frame that is not the awaited credit fails the background receive.
TEST(TcpTransportTest, BackgroundReceiveMatchesInOrderWithThePeersOtherReceives) {
  run_transports(2, [&](Transport& t) {
    std::vector<char> data(6000);
    Request s1, s2, credit, recv;
    if (t.rank() == 0) {
      t.post_background_recv(1, frame(kCredit, 0), &credit);
      t.post_recv(1, frame(kData, data.size()), data.data(), &recv);
      ASSERT_TRUE(wait_all(t, {&credit, &recv}));
      EXPECT_FALSE(credit.failed()) << credit.status.to_string();
      EXPECT_FALSE(recv.failed()) << recv.status.to_string();
      for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<char>(i * 3)) << i;
      // The next frame is data, where a credit is expected.
      Request wrong;
      t.post_background_recv(1, frame(kCredit, 0), &wrong);
      ASSERT_TRUE(wait_all(t, {&wrong}));
      EXPECT_TRUE(wrong.failed()) << "a data frame matched a background receive for a credit";
    } else {
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 3);
      t.post_send(0, frame(kCredit, 0), nullptr, &s1);
      t.post_send(0, frame(kData, data.size()), data.data(), &s2);
      ASSERT_TRUE(wait_all(t, {&s1, &s2}));
      Request s3;
      t.post_send(0, frame(kData, data.size()), data.data(), &s3);
      ASSERT_TRUE(wait_all(t, {&s3}));
    }
    std::this_thread::sleep_for(200ms);
  });
}

}  // namespace
}  // namespace rcoll
