// The TCP transport alone, ranks as threads over loopback: receives posted
// with post_background_recv (completion credits) are matched in order with a
// peer's other receives and complete while the rank waits on other peers.
#include "transports/tcp/tcp_transport.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "rcoll/store.h"
#include "tests/thread_ranks.h"
#include "transports/tcp/mesh.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;

// Runs body(transport) on `size` connected TCP transports, one thread each,
// polling for `spin` before a wait sleeps.
void run_transports(int size, const std::function<void(Transport&)>& body,
                    std::chrono::microseconds spin = std::chrono::microseconds(50)) {
  testing_support::run_thread_ranks(size, [&](int r, std::shared_ptr<Store> store) {
    TcpConnectParams p;
    p.rank = r;
    p.size = size;
    p.store = std::move(store);
    p.ifname_spec = "=lo";
    p.deadline = Deadline::after(5000ms);
    p.spin = spin;
    auto t = connect_tcp_transport(p);
    if (!t.ok()) {
      ADD_FAILURE() << "rank " << r << ": " << t.status().to_string();
      return;
    }
    body(*t.value());
  });
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

// Rank 0 waits on rank 1's data frame (sent 200 ms late) while rank 2's
// credit frame, posted as a background receive, comes in at once: the credit
// completes first, both when a wait sleeps in ppoll (after 50 us of polling)
// and when it never sleeps (it polls for 10 s), where only every 32nd poll
// reads rank 2.
void check_background_while_awaiting(std::chrono::microseconds spin) {
  run_transports(
      3,
      [&](Transport& t) {
        std::vector<char> data(4096);
        Request send, recv, credit;
        if (t.rank() == 0) {
          t.post_background_recv(2, frame(kCredit, 0), &credit);
          t.post_recv(1, frame(kData, data.size()), data.data(), &recv);
          const Deadline give_up = Deadline::after(5000ms);
          bool credit_first = false;
          while (!(credit.finished() && recv.finished()) && !give_up.expired()) {
            t.progress(Deadline::after(100ms));
            if (credit.finished() && !recv.finished()) credit_first = true;
          }
          ASSERT_TRUE(credit.finished() && recv.finished())
              << "credit " << credit.finished() << ", data " << recv.finished();
          EXPECT_TRUE(credit_first) << "the credit was read only once the awaited frame came";
          EXPECT_FALSE(credit.failed()) << credit.status.to_string();
          EXPECT_FALSE(recv.failed()) << recv.status.to_string();
          for (size_t i = 0; i < data.size(); ++i)
            ASSERT_EQ(data[i], static_cast<char>(i * 7)) << i;
        } else if (t.rank() == 1) {
          for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
          std::this_thread::sleep_for(200ms);
          t.post_send(0, frame(kData, data.size()), data.data(), &send);
          ASSERT_TRUE(wait_all(t, {&send}));
          EXPECT_FALSE(send.failed()) << send.status.to_string();
        } else {
          t.post_send(0, frame(kCredit, 0), nullptr, &send);
          ASSERT_TRUE(wait_all(t, {&send}));
          EXPECT_FALSE(send.failed()) << send.status.to_string();
        }
        // Every rank stays until rank 0 has both, so no connection closes early.
        std::this_thread::sleep_for(300ms);
      },
      spin);
}

TEST(TcpTransportTest, BackgroundReceiveCompletesWhileAnotherPeerIsAwaited) {
  check_background_while_awaiting(std::chrono::microseconds(50));
}

TEST(TcpTransportTest, BackgroundReceiveCompletesWhileAWaitPollsWithoutSleeping) {
  check_background_while_awaiting(std::chrono::microseconds(10'000'000));
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

// Does this kernel take TCP_RTO_MAX_MS (Linux 6.15)?
bool kernel_caps_retransmission_timeout() {
  const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  if (probe < 0) return false;
  const int ms = kTcpRtoMaxMs;
  const bool allowed = setsockopt(probe, IPPROTO_TCP, TCP_RTO_MAX_MS, &ms, sizeof(ms)) == 0;
  ::close(probe);
  return allowed;
}

// Every connection caps its retransmission timeout at 1 s where the kernel
// allows it (TCP_RTO_MAX_MS, Linux 6.15), and the transport says so: a
// segment dropped while a receiver was not reading is sent again within a
// second of the receiver draining its queue, not after a timeout doubled to
// seconds, and the stall judge waits that long before it calls a quiet link
// hung.
TEST(TcpTransport, EveryLinkCapsItsRetransmissionTimeout) {
  if (!kernel_caps_retransmission_timeout())
    GTEST_SKIP() << "this kernel has no TCP_RTO_MAX_MS (before Linux 6.15)";
  run_transports(3,
                 [](Transport& t) { EXPECT_EQ(t.retransmission_wait(), Clock::duration(1000ms)); });
}

// The mesh's sockets, as the kernel reports them: the retransmission timeout
// capped at 1 s, and the give-up time for unacknowledged data set back to 15
// minutes (capped alone, the kernel would give up after 14.4 s).
TEST(TcpTransport, MeshSocketsCapTheTimeoutAndKeepTheGiveUpTime) {
  if (!kernel_caps_retransmission_timeout())
    GTEST_SKIP() << "this kernel has no TCP_RTO_MAX_MS (before Linux 6.15)";
  testing_support::run_thread_ranks(2, [&](int r, std::shared_ptr<Store> store) {
    MeshParams p;
    p.rank = r;
    p.size = 2;
    p.store = std::move(store);
    p.key_prefix = "mesh/";
    p.ifname_spec = "=lo";
    p.deadline = Deadline::after(5000ms);
    p.purpose = "test";
    boost::asio::io_context io;
    auto socks = build_tcp_mesh(io, p);
    ASSERT_TRUE(socks.ok()) << socks.status().to_string();
    const int fd = socks.value()[static_cast<size_t>(1 - r)]->native_handle();
    int rto_max = 0;
    unsigned user_timeout = 0;
    socklen_t len = sizeof(rto_max);
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &rto_max, &len), 0);
    len = sizeof(user_timeout);
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, &len), 0);
    EXPECT_EQ(rto_max, kTcpRtoMaxMs);
    EXPECT_EQ(user_timeout, kTcpUserTimeoutMs);
  });
}

}  // namespace
}  // namespace rcoll
