// Only peers of the same job get in. The store and every TCP mesh (data plane
// of each epoch, liveness channel) check a per-job token on connect (rcoll-run
// hands every rank RCOLL_JOB_TOKEN); a stranger connecting to a listening port
// is refused, the refusal is logged with its address, and the job goes on.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "rcoll/store.h"
#include "base/deadline.h"
#include "transports/frame.h"
#include "transports/tcp/mesh.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A raw TCP connection, as a stranger would open one.
class Stranger {
 public:
  Stranger(const std::string& ip, uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Stranger() { ::close(fd_); }
  bool connected() const { return connected_; }
  void send(const uint8_t* p, size_t n) { (void)::send(fd_, p, n, MSG_NOSIGNAL); }
  void send(const Bytes& b) { send(b.data(), b.size()); }
  // True when the other side closed the connection within `timeout`.
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    const Deadline d = Deadline::after(timeout);
    uint8_t buf[256];
    while (!d.expired()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      if (::recv(fd_, buf, sizeof(buf), 0) <= 0) return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

struct Store {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<rcoll::Store> client;
};

Store start_store(const std::string& token, std::chrono::milliseconds hello_timeout = 10000ms) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.token = token;
  o.hello_timeout = hello_timeout;
  auto server = start_tcp_store_server(o);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  o.port = server.value()->port();
  auto client = connect_tcp_store(o);
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  return Store{std::move(server).value(), client.ok() ? client.value() : nullptr};
}

MeshParams mesh_params(int rank, const std::shared_ptr<rcoll::Store>& store, const std::string& token,
                       std::chrono::milliseconds budget) {
  MeshParams p;
  p.rank = rank;
  p.size = 2;
  p.epoch = 3;
  p.store = store;
  p.key_prefix = "security/";
  p.ifname_spec = "=lo";
  p.job_token = token;
  p.deadline = Deadline::after(budget);
  p.purpose = "epoch 3";
  return p;
}

// The listener rank 0 published, as "IP PORT IFNAME".
std::pair<std::string, uint16_t> published(const std::shared_ptr<rcoll::Store>& store) {
  auto v = store->get("security/0", 5000ms);
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  const std::string s(v.value().begin(), v.value().end());
  const size_t a = s.find(' '), b = s.find(' ', a + 1);
  return {s.substr(0, a), static_cast<uint16_t>(std::stoi(s.substr(a + 1, b - a - 1)))};
}

TEST(Security, StrangersOnAMeshListenerAreRefusedLoggedAndTheMeshStillForms) {
  Store st = start_store("job-secret");
  ASSERT_NE(st.client, nullptr);
  testing::internal::CaptureStderr();
  boost::asio::io_context io0;  // outlives the sockets the mesh returns
  Result<MeshSockets> rank0 = Status(ErrorCode::kInternal, "not run");
  std::thread t0([&] { rank0 = build_tcp_mesh(io0, mesh_params(0, st.client, "job-secret", 10000ms)); });
  const auto [ip, port] = published(st.client);

  {  // Not rcoll at all.
    Stranger s(ip, port);
    ASSERT_TRUE(s.connected());
    const std::string http = "GET / HTTP/1.1\r\nHost: rank0\r\n\r\n" + std::string(20, ' ');
    s.send(to_bytes(http));
    EXPECT_TRUE(s.closed_by_peer(3000ms));
  }
  // A hello as rank 1 of 2 would send it, for `epoch` and a job whose token is `token`.
  auto hello_is_refused = [&](uint32_t epoch, const std::string& token) {
    Stranger s(ip, port);
    FrameHeader h;
    h.type = FrameType::kHello;
    h.epoch = epoch;
    h.root = 1;
    h.count = 2;
    h.op_seq = job_token_hash(token);
    const FrameBytes b = encode(h);
    s.send(b.data(), b.size());
    return s.closed_by_peer(3000ms);
  };
  EXPECT_TRUE(hello_is_refused(3, "another-job")) << "an rcoll hello of another job (its token hashes differently)";
  EXPECT_TRUE(hello_is_refused(2, "job-secret")) << "the right job, a stale epoch";
  EXPECT_TRUE(hello_is_refused(4, "job-secret")) << "the right job, a later epoch";
  // The real rank 1 still gets in.
  boost::asio::io_context io1;
  auto rank1 = build_tcp_mesh(io1, mesh_params(1, st.client, "job-secret", 10000ms));
  t0.join();
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(rank1.ok()) << rank1.status().to_string() << "\n" << log;
  ASSERT_TRUE(rank0.ok()) << rank0.status().to_string() << "\n" << log;
  EXPECT_NE(rank0.value()[1], nullptr);
  EXPECT_TRUE(contains(log, "epoch 3: rank 0 refused connection from 127.0.0.1:")) << log;
  EXPECT_TRUE(contains(log, "bad frame magic")) << log;
  EXPECT_TRUE(contains(log, "job token mismatch (a process of another job?)")) << log;
  // An earlier epoch's dial is expected (it waited in the backlog of a
  // listener kept from epoch to epoch): refused without a warning. A later
  // epoch's is not.
  EXPECT_FALSE(contains(log, "hello for epoch 2, this is epoch 3")) << log;
  EXPECT_TRUE(contains(log, "hello for epoch 4, this is epoch 3")) << log;
}

TEST(Security, ARankWithAnotherJobsTokenNeverJoinsTheMesh) {
  Store st = start_store("");  // the store is shared; the mesh token still differs
  ASSERT_NE(st.client, nullptr);
  testing::internal::CaptureStderr();
  boost::asio::io_context io0;
  Result<MeshSockets> rank0 = Status(ErrorCode::kInternal, "not run");
  std::thread t0([&] { rank0 = build_tcp_mesh(io0, mesh_params(0, st.client, "job-A", 2500ms)); });
  boost::asio::io_context io1;
  const auto t = Clock::now();
  auto rank1 = build_tcp_mesh(io1, mesh_params(1, st.client, "job-B", 2500ms));
  t0.join();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(rank0.ok());
  ASSERT_FALSE(rank1.ok());
  EXPECT_EQ(rank0.status().code(), ErrorCode::kPeerUnreachable);
  EXPECT_EQ(rank1.status().code(), ErrorCode::kPeerUnreachable);
  EXPECT_TRUE(contains(rank1.status().message(), "wrong job token or epoch?")) << rank1.status().to_string();
  EXPECT_TRUE(contains(log, "job token mismatch")) << log;
  EXPECT_LT(took, 2500 + 2000) << "bounded by the connect deadline";
}

TEST(Security, StoreRefusesAndLogsStrangers) {
  Store st = start_store("job-secret", 500ms);
  ASSERT_NE(st.client, nullptr);
  const uint16_t port = st.server->port();
  testing::internal::CaptureStderr();
  {  // Wrong token: refused.
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.token = "guess";
    o.connect_timeout = 2000ms;
    auto c = connect_tcp_store(o);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), ErrorCode::kStore) << c.status().to_string();
    EXPECT_TRUE(contains(c.status().message(), "job token mismatch")) << c.status().to_string();
  }
  {  // Not rcoll: closed at the first bytes.
    Stranger s("127.0.0.1", port);
    s.send(to_bytes("SSH-2.0-OpenSSH_9.2\r\n"));
    EXPECT_TRUE(s.closed_by_peer(2000ms));
  }
  {  // Connects and says nothing: closed after the hello timeout.
    Stranger s("127.0.0.1", port);
    const auto t = Clock::now();
    EXPECT_TRUE(s.closed_by_peer(5000ms));
    EXPECT_GE(Clock::now() - t, 400ms);
  }
  // The job's own clients are unaffected.
  ASSERT_TRUE(st.client->set("k", to_bytes("v")).ok());
  EXPECT_EQ(st.client->get("k", 1000ms).value(), to_bytes("v"));
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(log, "refused a client from 127.0.0.1:")) << log;
  EXPECT_TRUE(contains(log, "wrong job token")) << log;
  EXPECT_TRUE(contains(log, "bad magic")) << log;
  EXPECT_TRUE(contains(log, "no hello within 500 ms of connecting")) << log;
}

}  // namespace
}  // namespace rcoll
