// The TCP transport alone, ranks as threads over loopback: receives posted
// with post_background_recv (completion credits) are matched in order with a
// peer's other receives and complete while the rank waits on other peers;
// an epoch connects each rank's partners only, and the other peers connect on
// first use, both sides dialling at once included.
#include "transports/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "rcoll/store.h"
#include "tests/thread_ranks.h"
#include "transports/tcp/mesh.h"
#include "transports/tcp/on_demand_links.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;

// Runs body(transport) on `size` connected TCP transports, one thread each,
// polling for `spin` before a wait sleeps; `adjust` may change a rank's
// connect parameters first.
void run_transports(int size, const std::function<void(Transport&)>& body,
                    std::chrono::microseconds spin = std::chrono::microseconds(50),
                    const std::function<void(TcpConnectParams&)>& adjust = {}) {
  testing_support::run_thread_ranks(size, [&](int r, std::shared_ptr<Store> store) {
    TcpConnectParams p;
    p.rank = r;
    p.size = size;
    p.store = std::move(store);
    p.ifname_spec = "=lo";
    p.deadline = Deadline::after(5000ms);
    p.spin = spin;
    if (adjust) adjust(p);
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

// The partners an epoch connects at once: symmetric (else one side would wait
// for a dial that never comes), never the rank itself, the ring neighbours and
// the dissemination barrier's rank +- 2^k, and at most 3 ceil(log2 P) of them.
TEST(EagerPartners, AreSymmetricRingBarrierAndDoublingPartnersOnly) {
  auto power_of_two = [](int x) { return x > 0 && (x & (x - 1)) == 0; };
  for (int p = 1; p <= 300; ++p) {
    int log2p = 0;
    while ((1 << log2p) < p) ++log2p;
    for (int r = 0; r < p; ++r) {
      const std::vector<bool> mine = eager_partners(r, p);
      ASSERT_EQ(mine.size(), static_cast<size_t>(p));
      EXPECT_FALSE(mine[static_cast<size_t>(r)]) << r << " of " << p;
      int count = 0;
      for (int q = 0; q < p; ++q) {
        const bool barrier = power_of_two((q - r + p) % p) || power_of_two((r - q + p) % p);
        if (q != r && barrier)
          EXPECT_TRUE(mine[static_cast<size_t>(q)]) << r << " -> " << q << " of " << p;
        if (!mine[static_cast<size_t>(q)]) continue;
        ++count;
        EXPECT_TRUE(eager_partners(q, p)[static_cast<size_t>(r)])
            << r << " -> " << q << " of " << p;
        EXPECT_TRUE(barrier || power_of_two(r ^ q)) << r << " -> " << q << " of " << p;
      }
      EXPECT_LE(count, 3 * log2p) << r << " of " << p;
    }
  }
}

// The sockets this process holds (every rank is a thread of it).
int open_sockets() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

// Sends to every other rank and receives from every other rank, all posted
// at once, and waits at `posted` before moving any byte: pairs that are not
// partners have both dialled each other before either reads a hello. Checks
// every byte.
void exchange_with_everyone(Transport& t, uint16_t round, std::barrier<>& posted) {
  const int p = t.size(), r = t.rank();
  auto byte = [&](int from, int to, size_t i) {
    return static_cast<char>(from * 31 + to * 7 + static_cast<int>(i) + round);
  };
  const size_t n =
      3000 + static_cast<size_t>(round) * 20000;  // inline, then straight to the buffer
  std::vector<std::vector<char>> out(static_cast<size_t>(p)), in(static_cast<size_t>(p));
  std::vector<Request> sends(static_cast<size_t>(p)), recvs(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    in[q].assign(n, 0);
    t.post_recv(q, frame(round, n), in[q].data(), &recvs[q]);
  }
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    out[q].resize(n);
    for (size_t i = 0; i < n; ++i) out[q][i] = byte(r, q, i);
    t.post_send(q, frame(round, n), out[q].data(), &sends[q]);
  }
  posted.arrive_and_wait();
  const Deadline give_up = Deadline::after(10000ms);
  for (;;) {
    bool all = true;
    for (int q = 0; q < p; ++q)
      all = all && (q == r || (sends[q].finished() && recvs[q].finished()));
    if (all || give_up.expired()) break;
    t.progress(Deadline::after(100ms));
  }
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    ASSERT_TRUE(sends[q].finished() && recvs[q].finished()) << "rank " << r << " with rank " << q;
    ASSERT_FALSE(sends[q].failed()) << sends[q].status.to_string();
    ASSERT_FALSE(recvs[q].failed()) << recvs[q].status.to_string();
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(in[q][i], byte(q, r, i)) << "from " << q << " byte " << i;
  }
}

// 8 ranks: the epoch opens with each rank's partners connected only (the
// sockets counted), the first exchange with everyone connects exactly the
// missing pairs, with both sides of each dialling at once, and a second
// exchange reuses them.
TEST(TcpTransportOnDemand, EveryPairConnectsOnFirstUseEvenWhenBothDialAtOnce) {
  constexpr int kRanks = 8;
  std::barrier sync(kRanks);
  std::atomic<int> at_start{0}, after_first{0}, after_second{0};
  int missing_pairs = 0;
  for (int r = 0; r < kRanks; ++r)
    for (int q = r + 1; q < kRanks; ++q) missing_pairs += eager_partners(r, kRanks)[q] ? 0 : 1;
  ASSERT_GT(missing_pairs, 0);
  run_transports(kRanks, [&](Transport& t) {
    sync.arrive_and_wait();
    if (t.rank() == 0) at_start = open_sockets();
    sync.arrive_and_wait();
    exchange_with_everyone(t, 1, sync);
    sync.arrive_and_wait();
    if (t.rank() == 0) after_first = open_sockets();
    sync.arrive_and_wait();
    exchange_with_everyone(t, 2, sync);
    sync.arrive_and_wait();
    if (t.rank() == 0) after_second = open_sockets();
    sync.arrive_and_wait();
  });
  // A connection within this process is two sockets, one per side.
  EXPECT_EQ(after_first - at_start, 2 * missing_pairs);
  EXPECT_EQ(after_second, after_first);
}

// A peer that only receives is reached by the sender's dial while it waits,
// whether its wait polls or sleeps in ppoll (the listener wakes it).
TEST(TcpTransportOnDemand, APeerThatOnlyReceivesIsReachedWhileItSleeps) {
  constexpr int kRanks = 8;
  ASSERT_FALSE(eager_partners(0, kRanks)[5]);
  std::barrier sync(kRanks);
  run_transports(kRanks, [&](Transport& t) {
    std::vector<char> data(100000);
    Request req;
    if (t.rank() == 0) {
      t.post_recv(5, frame(3, data.size()), data.data(), &req);
      ASSERT_TRUE(wait_all(t, {&req}));
      EXPECT_FALSE(req.failed()) << req.status.to_string();
      for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<char>(i * 5)) << i;
    } else if (t.rank() == 5) {
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 5);
      std::this_thread::sleep_for(300ms);  // rank 0 sleeps in ppoll by now
      t.post_send(0, frame(3, data.size()), data.data(), &req);
      ASSERT_TRUE(wait_all(t, {&req}));
      EXPECT_FALSE(req.failed()) << req.status.to_string();
    }
    sync.arrive_and_wait();
  });
}

// Rank 1 of 8 is held in its build (its cancel hook sleeps), so rank 3, its
// partner, is still building (its dial of rank 1 unanswered) when rank 6,
// which is no partner of rank 3 and has finished its own build, sends to it:
// rank 6's dial reaches rank 3's build, which takes it along with its
// partners' connections (or, closed at the build's end before its ack, it is
// dialled again); the frame arrives once rank 3 runs.
TEST(TcpTransportOnDemand, ABuildStillRunningTakesTheDialsOfOtherPeers) {
  constexpr int kRanks = 8, kHeld = 1, kBuilding = 3, kSender = 6;
  ASSERT_TRUE(eager_partners(kBuilding, kRanks)[kHeld]);
  ASSERT_FALSE(eager_partners(kBuilding, kRanks)[kSender]);
  ASSERT_FALSE(eager_partners(kHeld, kRanks)[kSender]);
  std::atomic<bool> dialled{false};
  auto hold_rank_1 = [&dialled](TcpConnectParams& p) {
    p.deadline = Deadline::after(10000ms);
    if (p.rank != kHeld) return;
    p.cancelled = [&dialled] {
      const Deadline give_up = Deadline::after(3000ms);
      while (!dialled && !give_up.expired()) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(100ms);  // rank 3's build reads the hello meanwhile
      return false;
    };
  };
  run_transports(
      kRanks,
      [&](Transport& tr) {
        const int r = tr.rank();
        std::vector<char> data(5000);
        if (r == kSender) {
          for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 3);
          Request req;
          tr.post_send(kBuilding, frame(6, data.size()), data.data(), &req);
          tr.progress(Deadline::after(20ms));  // the dial's hello goes out
          dialled = true;
          ASSERT_TRUE(wait_all(tr, {&req}));
          EXPECT_FALSE(req.failed()) << req.status.to_string();
        } else if (r == kBuilding) {
          Request req;
          tr.post_recv(kSender, frame(6, data.size()), data.data(), &req);
          ASSERT_TRUE(wait_all(tr, {&req}));
          ASSERT_FALSE(req.failed()) << req.status.to_string();
          for (size_t i = 0; i < data.size(); ++i)
            ASSERT_EQ(data[i], static_cast<char>(i * 3)) << i;
        }
        std::this_thread::sleep_for(300ms);  // no rank closes while another still reads
      },
      std::chrono::microseconds(50), hold_rank_1);
}

// A link closed before its first use fails the requests queued on it, as a
// connected link's closing does (close-link fault injection on a peer not
// connected yet).
TEST(TcpTransportOnDemand, ALinkBrokenBeforeItsFirstUseFailsItsRequests) {
  constexpr int kRanks = 8;
  ASSERT_FALSE(eager_partners(0, kRanks)[3]);
  std::barrier sync(kRanks);
  run_transports(kRanks, [&](Transport& t) {
    if (t.rank() == 0) {
      std::vector<char> data(64);
      Request queued, later;
      t.post_send(3, frame(4, data.size()), data.data(), &queued);
      t.break_link(3);
      EXPECT_TRUE(queued.failed());
      EXPECT_EQ(queued.status.code(), ErrorCode::kTransport) << queued.status.to_string();
      t.post_send(3, frame(4, data.size()), data.data(), &later);
      EXPECT_TRUE(later.failed()) << "a send on a broken link was taken";
    }
    sync.arrive_and_wait();
  });
}

// A dial to a peer that has left the epoch (its transport closed, and with it
// the listener) fails as a broken link does, with kTransport (which the
// runtime recovers from; kPeerUnreachable would end the communicator),
// naming the peer and the address.
TEST(TcpTransportOnDemand, ADialToAPeerThatLeftTheEpochFailsNamingIt) {
  constexpr int kRanks = 8;
  std::barrier sync(kRanks);
  run_transports(kRanks, [&](Transport& t) {
    if (t.rank() == 6) t.abort(Status(ErrorCode::kAborted, "rank 6 leaves the epoch"));
    sync.arrive_and_wait();
    if (t.rank() == 1) {
      ASSERT_FALSE(eager_partners(1, kRanks)[6]);
      std::vector<char> data(64);
      Request req;
      t.post_send(6, frame(5, data.size()), data.data(), &req);
      ASSERT_TRUE(wait_all(t, {&req}));
      ASSERT_TRUE(req.failed());
      EXPECT_EQ(req.status.code(), ErrorCode::kTransport) << req.status.to_string();
      EXPECT_NE(req.status.message().find("first use to rank 6 (127.0.0.1:"), std::string::npos)
          << req.status.to_string();
    }
    sync.arrive_and_wait();
  });
}

// A rank played by the test over raw sockets, for the handshake's races.
class FakeRank {
 public:
  explicit FakeRank(const MeshParams& p) : p_(p) {
    auto l = listen_for_mesh(p_);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    if (l.ok()) listener_ = std::move(l).value();
  }
  const std::string& address() const { return listener_.address(); }
  // Takes the next connection at its listener (waits up to 2 s).
  int accept_one() {
    pollfd pf{listener_.valid() ? fd_of_listener() : -1, POLLIN, 0};
    if (::poll(&pf, 1, 2000) != 1) return -1;
    return ::accept(pf.fd, nullptr, nullptr);
  }
  // Dials "IP PORT IFNAME" and sends this rank's hello.
  int dial(const std::string& address) {
    const size_t a = address.find(' ');
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(a + 1))));
    inet_pton(AF_INET, address.substr(0, a).c_str(), &to.sin_addr);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) return -1;
    send_header(fd, mesh_hello(FrameType::kHello, p_));
    return fd;
  }
  void send_header(int fd, const FrameHeader& h) {
    const FrameBytes b = encode(h);
    ASSERT_EQ(::send(fd, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
  }
  // The next header on `fd` (waits up to 2 s); not ok at EOF or a timeout.
  static Result<FrameHeader> read_header(int fd) {
    FrameBytes b{};
    size_t got = 0;
    while (got < b.size()) {
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, 2000) != 1) return Status(ErrorCode::kTimeout, "no header within 2 s");
      const ssize_t k = ::recv(fd, b.data() + got, b.size() - got, 0);
      if (k <= 0) return Status(ErrorCode::kClosed, "closed");
      got += static_cast<size_t>(k);
    }
    return decode_frame_header(b.data(), b.size());
  }

 private:
  int fd_of_listener() {
    if (fd_ < 0) fd_ = listener_.release();
    return fd_;
  }
  MeshParams p_;
  MeshListener listener_;
  int fd_ = -1;
};

MeshParams two_rank_mesh(int rank) {
  MeshParams p;
  p.rank = rank;
  p.size = 2;
  p.epoch = 4;
  p.job_token = "job";
  p.ifname_spec = "=lo";
  p.purpose = "epoch 4";
  return p;
}

// Polls `links` until it reports something (up to 2 s).
std::vector<OnDemandLinks::Event> poll_until_event(OnDemandLinks& links) {
  std::vector<OnDemandLinks::Event> events;
  const Deadline give_up = Deadline::after(2000ms);
  while (events.empty() && !give_up.expired()) {
    links.poll(true, &events);
    std::this_thread::sleep_for(1ms);
  }
  return events;
}

// Bytes written on `fd` arrive on `other`: the two are one connection's ends.
bool same_connection(int fd, int other) {
  const char ping[4] = {'p', 'i', 'n', 'g'};
  if (::send(fd, ping, sizeof(ping), MSG_NOSIGNAL) != 4) return false;
  char got[4] = {};
  pollfd pf{other, POLLIN, 0};
  if (::poll(&pf, 1, 2000) != 1) return false;
  return ::recv(other, got, sizeof(got), MSG_DONTWAIT) == 4 && std::memcmp(got, ping, 4) == 0;
}

// A rank whose address did not come with the epoch's exchange is read from
// the store on the first dial to it (AddressBook). A store that cannot give
// it fails that dial as a broken link would (kTransport, the runtime
// recovers), naming why; the next dial asks the store again.
TEST(TcpTransportOnDemand, AnAddressTheStoreCannotGiveFailsTheDialAsABrokenLink) {
  MeshParams mine = two_rank_mesh(0);
  auto listener = listen_for_mesh(mine);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  int asked = 0;
  AddressBook book(2, {{0, listener.value().address()}}, nullptr, [&](int q) {
    ++asked;
    return Result<std::string>(Status(
        ErrorCode::kTimeout, "rank " + std::to_string(q) + "'s key: the store did not answer"));
  });
  OnDemandLinks links(mine, std::move(book), listener.value().release(), {false, false});
  for (int attempt = 1; attempt <= 2; ++attempt) {
    links.want(1);
    const auto events = poll_until_event(links);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].peer, 1);
    EXPECT_EQ(events[0].error.code(), ErrorCode::kTransport) << events[0].error.to_string();
    EXPECT_NE(events[0].error.message().find("its address could not be read from the store"),
              std::string::npos)
        << events[0].error.message();
    EXPECT_NE(events[0].error.message().find("the store did not answer"), std::string::npos);
    EXPECT_EQ(asked, attempt);
    links.reset(1);
  }
}

// Both ranks dial each other, and each reads the other's hello before any
// ack: the lower rank refuses the higher one's hello (an ack with count 0)
// and keeps its own dial; the higher rank takes the lower one's connection and
// drops its own dial. Either way both keep the lower rank's connection.
TEST(TcpTransportOnDemand, CrossedDialsKeepTheLowerRanksConnection) {
  for (int me : {0, 1}) {
    SCOPED_TRACE("this rank is rank " + std::to_string(me));
    const int other = 1 - me;
    FakeRank fake(two_rank_mesh(other));
    MeshParams mine = two_rank_mesh(me);
    auto listener = listen_for_mesh(mine);
    ASSERT_TRUE(listener.ok()) << listener.status().to_string();
    const std::string my_address = listener.value().address();
    std::vector<std::string> addresses(2);
    addresses[static_cast<size_t>(me)] = my_address;
    addresses[static_cast<size_t>(other)] = fake.address();
    OnDemandLinks links(mine, AddressBook(PackedValues(addresses)), listener.value().release(),
                        {false, false});

    links.want(other);
    std::vector<OnDemandLinks::Event> events;
    links.poll(false, &events);               // connects and sends the hello
    const int theirs_in = fake.accept_one();  // this rank's dial, at the fake
    ASSERT_GE(theirs_in, 0);
    auto hello = FakeRank::read_header(theirs_in);
    ASSERT_TRUE(hello.ok()) << hello.status().to_string();
    EXPECT_EQ(hello.value().type, FrameType::kHello);
    EXPECT_EQ(hello.value().root, me);
    const int theirs_out = fake.dial(my_address);  // the fake dials too, before any ack
    ASSERT_GE(theirs_out, 0);

    if (me == 0) {
      // The lower rank refuses the crossing hello and keeps its dial.
      events = {};
      const Deadline give_up = Deadline::after(2000ms);
      Result<FrameHeader> no = Status(ErrorCode::kTimeout, "not yet");
      while (!give_up.expired()) {
        links.poll(true, &events);
        pollfd pf{theirs_out, POLLIN, 0};
        if (::poll(&pf, 1, 1) == 1) {
          no = FakeRank::read_header(theirs_out);
          break;
        }
      }
      ASSERT_TRUE(no.ok()) << no.status().to_string();
      EXPECT_EQ(no.value().type, FrameType::kHelloAck);
      EXPECT_EQ(no.value().count, 0u) << "the lower rank took a crossing dial";
      EXPECT_TRUE(events.empty());
      fake.send_header(theirs_in, mesh_hello(FrameType::kHelloAck, two_rank_mesh(other)));
      events = poll_until_event(links);
      ASSERT_EQ(events.size(), 1u);
      EXPECT_TRUE(events[0].error.ok()) << events[0].error.to_string();
      EXPECT_EQ(events[0].peer, other);
      EXPECT_TRUE(same_connection(events[0].fd, theirs_in)) << "not the lower rank's connection";
      ::close(events[0].fd);
    } else {
      // The higher rank takes the lower rank's connection and drops its dial.
      events = poll_until_event(links);
      ASSERT_EQ(events.size(), 1u);
      EXPECT_TRUE(events[0].error.ok()) << events[0].error.to_string();
      auto ack = FakeRank::read_header(theirs_out);
      ASSERT_TRUE(ack.ok()) << ack.status().to_string();
      EXPECT_EQ(ack.value().type, FrameType::kHelloAck);
      EXPECT_EQ(ack.value().count, 2u);
      EXPECT_TRUE(same_connection(events[0].fd, theirs_out)) << "not the lower rank's connection";
      auto dropped = FakeRank::read_header(theirs_in);
      EXPECT_EQ(dropped.status().code(), ErrorCode::kClosed) << "its own dial stayed open";
      ::close(events[0].fd);
    }
    ::close(theirs_in);
    ::close(theirs_out);
  }
}

// A store that refuses every call: an epoch built on a kept listener asks it
// nothing.
class NoStore final : public Store {
 public:
  Status set(const std::string& key, const Bytes&) override { return no("set " + key); }
  Result<Bytes> get(const std::string& key, std::chrono::milliseconds) override {
    return no("get " + key);
  }
  Result<int64_t> add(const std::string& key, int64_t) override { return no("add " + key); }
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds) override {
    return no("wait " + keys.front());
  }
  Result<bool> check(const std::string& key) override { return no("check " + key); }
  Status erase(const std::string& key) override { return no("erase " + key); }
  Result<int64_t> set_and_add(const std::string& key, const Bytes&, const std::string&,
                              int64_t) override {
    return no("set_and_add " + key);
  }
  Result<std::vector<Bytes>> multi_get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds) override {
    return no("multi_get " + keys.front());
  }
  std::atomic<int> asked{0};

 private:
  Status no(const std::string& what) {
    ++asked;
    return Status(ErrorCode::kStore, "this store refuses everything (" + what + ")");
  }
};

// Epoch 0 fills each rank's kept listener (its socket and the addresses the
// ranks published); epoch 1, given it, listens on a duplicate of the socket
// and dials the kept addresses, asking its own store nothing, and reaches
// every peer (the partners at once, the others on first use, whose
// addresses the kept book reads from epoch 0's exchange). The kept socket
// outlives both epochs' transports.
TEST(TcpTransportKeptListener, ALaterEpochConnectsOnTheKeptListenerWithoutAnExchange) {
  constexpr int kRanks = 8;
  std::barrier sync(kRanks);
  auto no_store = std::make_shared<NoStore>();
  std::vector<int> kept_fds(kRanks, -1);
  testing_support::run_thread_ranks(kRanks, [&](int r, std::shared_ptr<Store> store) {
    auto kept = std::make_shared<KeptListener>();
    TcpConnectParams p;
    p.rank = r;
    p.size = kRanks;
    p.ifname_spec = "=lo";
    p.deadline = Deadline::after(5000ms);
    p.kept = kept;
    p.store = store;
    {
      auto t0 = connect_tcp_transport(p);
      ASSERT_TRUE(t0.ok()) << "rank " << r << ": " << t0.status().to_string();
      ASSERT_TRUE(kept->listener.valid());
      EXPECT_EQ(kept->epoch, 0u);
      EXPECT_EQ(kept->key_prefix, "tcp/0/");
      kept_fds[static_cast<size_t>(r)] = kept->listener.fd();
      exchange_with_everyone(*t0.value(), 1, sync);
      sync.arrive_and_wait();
      t0.value()->abort(Status(ErrorCode::kAborted, "epoch 0 ends"));
      sync.arrive_and_wait();
    }
    EXPECT_GE(::fcntl(kept->listener.fd(), F_GETFD), 0)
        << "epoch 0's teardown closed the kept socket";
    p.epoch = 1;
    p.store = no_store;
    p.deadline = Deadline::after(5000ms);
    auto t1 = connect_tcp_transport(p);
    ASSERT_TRUE(t1.ok()) << "rank " << r << ": " << t1.status().to_string();
    EXPECT_EQ(kept->epoch, 0u) << "epoch 1 published and kept its own";
    exchange_with_everyone(*t1.value(), 2, sync);
    sync.arrive_and_wait();
    t1.value().reset();
    EXPECT_GE(::fcntl(kept->listener.fd(), F_GETFD), 0)
        << "epoch 1's teardown closed the kept socket";
    sync.arrive_and_wait();
  });
  EXPECT_EQ(no_store->asked.load(), 0) << "epoch 1 asked the store";
  for (int fd : kept_fds)
    EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "a kept socket outlived its KeptListener";
}
}  // namespace
}  // namespace rcoll
