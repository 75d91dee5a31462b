// libFuzzer target: the built-in TCP store's wire protocol
// (runtime/store/tcp_store_protocol.h) and the server that speaks it.
//
// 1. The pure decoders: request and response frames, the header alone, and the
//    counter parser. A frame that decodes must be valid and re-encode to the
//    same bytes; every failure is an error with a message.
// 2. The server: the same bytes go to a real TcpStoreServer in this process
//    over loopback, as a hostile client would send them. The server must
//    answer or close that connection, never crash, hang or grow without
//    bound (ASan/UBSan watch it; -rss_limit_mb and -malloc_limit_mb bound
//    memory), and must still serve a well-behaved client afterwards.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "rcoll/store.h"
#include "runtime/store/tcp_store_protocol.h"

namespace {

using namespace rcoll;

constexpr const char* kToken = "fuzz-token";
// A fresh server now and then: keys a fuzzed client sets stay in the server.
constexpr int kExecsPerServer = 2000;

std::unique_ptr<TcpStoreServer> g_server;
int g_execs = 0;

TcpStoreServer& server() {
  if (!g_server || ++g_execs % kExecsPerServer == 0) {
    if (g_server) g_server->stop();
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.token = kToken;
    auto s = start_tcp_store_server(o);
    if (!s.ok()) std::abort();
    g_server = std::move(s).value();
  }
  return *g_server;
}

void check_decoders(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  auto q = store_wire::decode_request(bytes);
  if (q.ok()) {
    if (!store_wire::validate(q.value()).ok()) std::abort();
    Bytes again = store_wire::encode_request(q.value());
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  } else if (q.status().message().empty()) {
    std::abort();
  }
  auto r = store_wire::decode_response(bytes);
  if (r.ok()) {
    Bytes again = store_wire::encode_response(r.value());
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  }
  if (size >= store_wire::kHeaderBytes) {
    auto h = store_wire::decode_header(bytes, store_wire::kRequestMagic);
    if (h.ok() && h.value().body_length > store_wire::kMaxBodyLength) std::abort();
  }
  int64_t counter = 0;
  (void)store_wire::parse_counter(Bytes(data, data + std::min<size_t>(size, 32)), counter);
}

// Sends the bytes as a client, then reads whatever comes back until the server
// closes or goes quiet for a moment (a parked get/wait, say).
void send_to_server(uint16_t port, const uint8_t* data, size_t size) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = -1;
  // A refused connection is retried briefly; a server that stays unreachable died.
  for (int attempt = 0; fd < 0; ++attempt) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) std::abort();
    // Close with a reset: tens of thousands of connections a minute must not
    // leave the ephemeral ports in TIME_WAIT (the harness ran out of them).
    linger no_wait{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &no_wait, sizeof(no_wait));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) break;
    ::close(fd);
    fd = -1;
    if (attempt == 50) std::abort();
    ::usleep(10000);
  }
  size_t off = 0;
  while (off < size) {
    ssize_t n = ::send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed on a bad message: fine
    off += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  uint8_t buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) break;
    if (::recv(fd, buf, sizeof(buf), 0) <= 0) break;
  }
  ::close(fd);
}

// A well-behaved client still gets served: the server survived the input.
void check_server_alive(uint16_t port) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = kToken;
  o.connect_timeout = std::chrono::milliseconds(5000);
  auto c = connect_tcp_store(o);
  if (!c.ok()) std::abort();
  if (!c.value()->set("alive", Bytes{'1'}).ok()) std::abort();
  auto v = c.value()->get("alive", std::chrono::milliseconds(1000));
  if (!v.ok() || v.value() != Bytes{'1'}) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_decoders(data, size);
  TcpStoreServer& s = server();
  send_to_server(s.port(), data, size);
  if (g_execs % 500 == 0) check_server_alive(s.port());
  return 0;
}
