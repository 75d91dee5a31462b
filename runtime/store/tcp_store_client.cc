// The client of the built-in TCP store, on plain POSIX sockets: every socket is
// non-blocking and every send/recv waits in poll() against a Deadline, so no
// call outlives its timeout. A blocking get/wait is parked on the server (which
// answers at the timeout) and guarded here by a deadline kGuardSlack longer.
//
// Thread safety: calls check a connection out of a small pool and return it
// afterwards, so a thread parked in get() never holds up a set() from another
// thread of the same process (one shared connection would deadlock that).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/deadline.h"
#include "base/log.h"
#include "base/store_exchange.h"
#include "base/unique_fd.h"
#include "rcoll/store.h"
#include "runtime/store/call_deadline.h"
#include "runtime/store/store_text.h"
#include "runtime/store/tcp_store_protocol.h"

namespace rcoll {
// The client's names, kept out of rcoll's own (rcoll::Op is an op; here Op is
// a store request's), in a build of one file or of several as one (unity).
namespace tcp_store_client {
namespace {

using store::errno_text;
using store::host_port;
using store::key_text;
using store_wire::Op;
using store_wire::Reply;
using store_wire::Request;
using store_wire::Response;

// How much longer than a get/wait's own timeout the client waits for the
// server's answer before it gives up on the connection.
constexpr Millis kGuardSlack{2000};
// Budget of a non-blocking request (set/add/check/erase) and of reading a
// response body once its header has arrived.
constexpr Millis kRequestTimeout{30000};
// Idle connections kept for reuse.
constexpr size_t kMaxIdle = 8;
// Backoff between connection attempts.
constexpr Millis kFirstBackoff{10};
constexpr Millis kMaxBackoff{500};

std::string key_list(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 16;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i) out += ", ";
    out += key_text(keys[i]);
  }
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

int poll_ms(const Deadline& d) {
  auto ms = d.remaining_ms().count();
  // Round up so a sub-millisecond remainder still waits instead of spinning.
  if (ms == 0 && !d.expired()) ms = 1;
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// Why an I/O step failed: timed out, cancelled, or the connection broke.
struct IoFailure {
  bool timed_out = false;
  std::string what;
  bool cancelled = false;
};

// Set on a thread while it watches a key (TcpStoreClient::watch): its waits
// look at it every 20 ms and give up when it says so.
thread_local const std::function<bool()>* t_cancelled = nullptr;
constexpr int kCancelLookMs = 20;

// Sets t_cancelled for a scope, however it is left.
class CancelScope {
 public:
  explicit CancelScope(const std::function<bool()>& cancelled) : outer_(t_cancelled) {
    t_cancelled = &cancelled;
  }
  ~CancelScope() { t_cancelled = outer_; }
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const std::function<bool()>* outer_;
};

// Waits for `events` on fd; false (and `failure`) on timeout, cancel or error.
bool wait_for(int fd, short events, const Deadline& d, IoFailure& failure) {
  for (;;) {
    if (d.expired()) {
      failure = {true, "timed out"};
      return false;
    }
    if (t_cancelled != nullptr && (*t_cancelled)()) {
      failure = {false, "cancelled", true};
      return false;
    }
    pollfd p{fd, events, 0};
    const int ms = t_cancelled != nullptr ? std::min(poll_ms(d), kCancelLookMs) : poll_ms(d);
    int n = ::poll(&p, 1, ms);
    if (n > 0) return true;  // readiness or an error: the next syscall reports it
    if (n < 0 && errno != EINTR) {
      failure = {false, "poll failed: " + errno_text(errno)};
      return false;
    }
  }
}

bool send_all(int fd, const uint8_t* data, size_t size, const Deadline& d, IoFailure& failure) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, d, failure)) return false;
      continue;
    }
    failure = {false, "send failed: " + errno_text(errno)};
    return false;
  }
  return true;
}

bool recv_exact(int fd, uint8_t* data, size_t size, const Deadline& d, IoFailure& failure) {
  while (size > 0) {
    ssize_t n = ::recv(fd, data, size, 0);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      failure = {false, "the store closed the connection"};
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLIN, d, failure)) return false;
      continue;
    }
    failure = {false, "recv failed: " + errno_text(errno)};
    return false;
  }
  return true;
}

// One request/response exchange. `header_deadline` bounds the wait for the
// answer to start; the body then gets kRequestTimeout of its own.
Result<Response> exchange(int fd, const Bytes& frame, const Deadline& header_deadline,
                          IoFailure& failure, bool& sent) {
  sent = false;
  if (!send_all(fd, frame.data(), frame.size(), header_deadline, failure)) {
    return Status(ErrorCode::kStore, failure.what);
  }
  sent = true;
  std::array<uint8_t, store_wire::kHeaderBytes> header{};
  if (!recv_exact(fd, header.data(), header.size(), header_deadline, failure)) {
    return Status(ErrorCode::kStore, failure.what);
  }
  auto h = store_wire::decode_header(header, store_wire::kResponseMagic);
  if (!h.ok()) {
    failure = {false, "it answered badly: " + h.status().message()};
    return h.status();
  }
  Bytes body(h.value().body_length);
  Deadline body_deadline = Deadline::after(kRequestTimeout);
  if (!recv_exact(fd, body.data(), body.size(), body_deadline, failure)) {
    return Status(ErrorCode::kStore, failure.what);
  }
  auto r = store_wire::decode_response_body(h.value().kind, body);
  if (!r.ok()) failure = {false, "it answered badly: " + r.status().message()};
  return r;
}

// One TCP connection attempt (every address the host resolves to), no retry.
Result<UniqueFd> connect_once(const std::string& host, uint16_t port, const Deadline& d) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    return Status(ErrorCode::kPeerUnreachable,
                  std::string("cannot resolve the host: ") + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(list, &::freeaddrinfo);
  std::string last = "no address";
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = "socket() failed: " + errno_text(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = errno_text(errno);
        continue;
      }
      IoFailure f;
      if (!wait_for(fd.get(), POLLOUT, d, f)) {
        last = f.timed_out ? "connection attempt timed out" : f.what;
        continue;
      }
      socklen_t len = sizeof(err);
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        last = errno_text(err);
        continue;
      }
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
  }
  return Status(ErrorCode::kPeerUnreachable, last);
}

// Keys in parts of at most kMaxKeys, the most one request may name.
std::vector<std::vector<std::string>> in_parts(const std::vector<std::string>& keys) {
  std::vector<std::vector<std::string>> parts;
  for (size_t from = 0; from < keys.size(); from += store_wire::kMaxKeys) {
    const size_t to = std::min(keys.size(), from + store_wire::kMaxKeys);
    parts.emplace_back(keys.begin() + static_cast<std::ptrdiff_t>(from),
                       keys.begin() + static_cast<std::ptrdiff_t>(to));
  }
  return parts;
}

class TcpStoreClient final : public Store {
 public:
  explicit TcpStoreClient(TcpStoreOptions options)
      : options_(std::move(options)), address_(host_port(options_.host, options_.port)) {}

  // Connects, retrying refused and failed attempts with backoff until
  // `budget` (retry = false: one attempt), and says hello.
  Result<UniqueFd> open(Millis budget, bool retry) {
    Deadline deadline = Deadline::after(budget);
    Millis backoff = kFirstBackoff;
    std::string last;
    for (;;) {
      auto fd = connect_once(options_.host, options_.port, deadline);
      if (fd.ok()) {
        Status s = hello(fd.value().get(), deadline);
        if (s.ok()) return std::move(fd).value();
        if (s.code() != ErrorCode::kPeerUnreachable) return s;  // refused: retrying won't help
        last = s.message();
      } else {
        last = fd.status().message();
      }
      if (!retry || deadline.expired()) break;
      if (t_cancelled != nullptr && (*t_cancelled)()) break;
      auto pause = std::min<Clock::duration>(backoff, deadline.remaining());
      std::this_thread::sleep_for(pause);
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
    return Status(ErrorCode::kPeerUnreachable, "cannot reach the rcoll store at " + address_ +
                                                   " within " + std::to_string(budget.count()) +
                                                   " ms: " + last +
                                                   "; check RCOLL_STORE_ADDR / MASTER_ADDR");
  }

  Status set(const std::string& key, const Bytes& value) override {
    Request q{Op::kSet, {key}, value, 0};
    auto r = call(q, Deadline::after(kRequestTimeout), /*idempotent=*/true,
                  "set(" + key_text(key) + ")");
    return r.status();
  }

  Result<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
    int64_t ms = clamp_timeout(timeout);
    Request q{Op::kGet, {key}, {}, ms};
    auto r = call(q, Deadline::after(Millis(ms) + kGuardSlack), true, "get(" + key_text(key) + ")");
    if (!r.ok()) return r.status();
    if (r.value().reply == Reply::kTimeout) {
      return Status(ErrorCode::kTimeout, "timed out after " + std::to_string(ms) +
                                             " ms waiting for store key " + key_text(key) + " at " +
                                             address_);
    }
    return std::move(r.value().value);
  }

  Result<int64_t> add(const std::string& key, int64_t delta) override {
    Request q{Op::kAdd, {key}, {}, delta};
    // Not idempotent: never re-sent once it may have reached the server.
    auto r = call(q, Deadline::after(kRequestTimeout), false, "add(" + key_text(key) + ")");
    if (!r.ok()) return r.status();
    return r.value().integer;
  }

  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    if (keys.empty()) return Status();
    int64_t ms = clamp_timeout(timeout);
    Request q{Op::kWait, keys, {}, ms};
    auto r = call(q, Deadline::after(Millis(ms) + kGuardSlack), true,
                  "wait(" + key_list(keys) + ")");
    if (!r.ok()) return r.status();
    if (r.value().reply == Reply::kTimeout) return missing(ms, r.value().keys, keys, keys.size());
    return Status();
  }

  Result<bool> check(const std::string& key) override {
    Request q{Op::kCheck, {key}, {}, 0};
    auto r = call(q, Deadline::after(kRequestTimeout), true, "check(" + key_text(key) + ")");
    if (!r.ok()) return r.status();
    return r.value().integer != 0;
  }

  Status erase(const std::string& key) override {
    Request q{Op::kErase, {key}, {}, 0};
    auto r = call(q, Deadline::after(kRequestTimeout), true, "erase(" + key_text(key) + ")");
    return r.status();
  }

  Result<int64_t> set_and_add(const std::string& key, const Bytes& value,
                              const std::string& counter, int64_t delta) override {
    Request q{Op::kSetAdd, {key, counter}, value, delta};
    // Not idempotent (the add): never re-sent once it may have reached the server.
    auto r = call(q, Deadline::after(kRequestTimeout), false,
                  "set_and_add(" + key_text(key) + ", " + key_text(counter) + ")");
    if (!r.ok()) return r.status();
    return r.value().integer;
  }

  // More than kMaxKeys keys go as several requests, each within what is left
  // of the timeout.
  Result<std::vector<Bytes>> multi_get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) override {
    const Deadline deadline = Deadline::after(Millis(clamp_timeout(timeout)));
    std::vector<Bytes> values;
    values.reserve(keys.size());
    for (const std::vector<std::string>& part : in_parts(keys)) {
      const int64_t ms = deadline.remaining_ms().count();
      Request q{Op::kMultiGet, part, {}, ms};
      auto r = call(q, Deadline::after(Millis(ms) + kGuardSlack), true,
                    "multi_get(" + key_list(part) + ")");
      if (!r.ok()) return r.status();
      if (r.value().reply == Reply::kTimeout) {
        return missing(clamp_timeout(timeout), r.value().keys, part, keys.size());
      }
      std::vector<Bytes> got;
      if (!decode_values(r.value().value, static_cast<int>(part.size()), &got)) {
        return Status(ErrorCode::kStore, "the store at " + address_ + " answered multi_get(" +
                                             key_list(part) + ") with a malformed value list");
      }
      for (Bytes& v : got) values.push_back(std::move(v));
    }
    return values;
  }

  // One request (kPublish); more wait keys than a request names go as the
  // two calls.
  Result<Published> publish_and_wait(const std::string& key, const Bytes& value,
                                     const std::string& counter, int64_t until,
                                     const std::vector<std::string>& wait_keys,
                                     std::chrono::milliseconds timeout) override {
    if (wait_keys.empty() || wait_keys.size() + 2 > store_wire::kMaxKeys || until < 1 ||
        until > INT32_MAX)
      return Store::publish_and_wait(key, value, counter, until, wait_keys, timeout);
    const int64_t ms = std::min<int64_t>(clamp_timeout(timeout), UINT32_MAX);
    std::vector<std::string> keys{key, counter};
    keys.insert(keys.end(), wait_keys.begin(), wait_keys.end());
    Request q{Op::kPublish, std::move(keys), value, store_wire::publish_integer(until, ms)};
    // Not idempotent (the add): never re-sent once it may have reached the
    // server. A set_and_add first: its answer is awaited as long as one's
    // (a stalled store host is waited out), then the wait's guard.
    auto r = call(q, Deadline::after(std::max(Millis(ms) + kGuardSlack, kRequestTimeout)), false,
                  "publish(" + key_text(key) + ", " + key_text(counter) + ")");
    if (!r.ok()) return r.status();
    Published p;
    p.count = r.value().integer;
    if (r.value().reply == Reply::kTimeout) {
      p.timed_out = true;
      return p;
    }
    if (p.count >= until) {
      p.completed = true;
      return p;
    }
    if (!decode_values(r.value().value, static_cast<int>(wait_keys.size()), &p.values)) {
      return Status(ErrorCode::kStore, "the store at " + address_ + " answered publish(" +
                                           key_text(key) + ") with a malformed value list");
    }
    return p;
  }

  Status erase_many(const std::vector<std::string>& keys) override {
    for (const std::vector<std::string>& part : in_parts(keys)) {
      Request q{Op::kEraseMany, part, {}, 0};
      auto r =
          call(q, Deadline::after(kRequestTimeout), true, "erase_many(" + key_list(part) + ")");
      if (!r.ok()) return r.status();
    }
    return Status();
  }

  // One parked wait. A cancel drops its connection (the server forgets the
  // wait when the connection closes).
  Result<bool> watch(const std::string& key, std::chrono::milliseconds timeout,
                     const std::function<bool()>& cancelled) override {
    const int64_t ms = clamp_timeout(timeout);
    Request q{Op::kWait, {key}, {}, ms};
    Result<Response> r = Status();
    {
      const CancelScope scope(cancelled);
      r = call(q, Deadline::after(Millis(ms) + kGuardSlack), true, "watch(" + key_text(key) + ")");
    }
    if (cancelled()) return false;
    if (!r.ok()) return r.status();
    return r.value().reply == Reply::kOk;
  }

  // A wait that does not wait: the server answers with the missing keys.
  Result<std::vector<std::string>> absent(const std::vector<std::string>& keys) override {
    std::vector<std::string> out;
    Status last;
    bool answered = keys.empty();
    for (const std::vector<std::string>& part : in_parts(keys)) {
      Request q{Op::kWait, part, {}, 0};
      auto r = call(q, Deadline::after(kRequestTimeout), true, "absent(" + key_list(part) + ")");
      if (!r.ok()) {  // these count as absent: an error only when none was answered
        last = r.status();
        out.insert(out.end(), part.begin(), part.end());
        continue;
      }
      answered = true;
      if (r.value().reply == Reply::kOk) continue;
      for (std::string& k : r.value().keys) out.push_back(std::move(k));
    }
    if (!answered) return last;
    return out;
  }

  void adopt(UniqueFd fd) { checkin(std::move(fd)); }

 private:
  static int64_t clamp_timeout(Millis timeout) {
    return std::clamp<int64_t>(timeout.count(), 0, store_wire::kMaxTimeoutMs);
  }

  // A wait (or multi_get) that ran out: the keys the server said were
  // missing (else all it asked about), of `total` asked for in all.
  Status missing(int64_t ms, const std::vector<std::string>& said,
                 const std::vector<std::string>& asked, size_t total) const {
    const auto& absent = said.empty() ? asked : said;
    return Status(ErrorCode::kTimeout, "timed out after " + std::to_string(ms) +
                                           " ms waiting for store key" +
                                           (absent.size() == 1 ? " " : "s ") + key_list(absent) +
                                           " (" + std::to_string(absent.size()) + " of " +
                                           std::to_string(total) + " missing) at " + address_);
  }

  Status hello(int fd, const Deadline& d) {
    Request q{Op::kHello, {}, Bytes(options_.token.begin(), options_.token.end()), 0};
    IoFailure failure;
    bool sent = false;
    // The hello must fit the connect budget but gets at least a second: a
    // server that accepted the connection is alive and answers quickly.
    Deadline hd = d.expired() ? Deadline::after(Millis(1000)) : d;
    auto r = exchange(fd, store_wire::encode_request(q), hd, failure, sent);
    if (!r.ok()) {
      return Status(ErrorCode::kPeerUnreachable, "no answer to hello: " + failure.what);
    }
    if (r.value().reply == Reply::kRefused) {
      return Status(ErrorCode::kStore,
                    "the store at " + address_ + " refused this client: job token mismatch");
    }
    if (r.value().reply != Reply::kOk) {
      return Status(ErrorCode::kStore,
                    "the store at " + address_ + " refused this client: " +
                        std::string(r.value().value.begin(), r.value().value.end()));
    }
    return Status();
  }

  // A pooled connection, or a new one (reused = false).
  Result<UniqueFd> checkout(const Deadline& d, bool& reused) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!idle_.empty()) {
        UniqueFd fd = std::move(idle_.back());
        idle_.pop_back();
        // An idle connection has nothing to read; if it has (EOF, reset), it is dead.
        pollfd p{fd.get(), POLLIN, 0};
        if (::poll(&p, 1, 0) == 0) {
          reused = true;
          return fd;
        }
      }
    }
    reused = false;
    auto budget = std::min(options_.connect_timeout, d.remaining_ms());
    return open(std::max(budget, Millis(1)), /*retry=*/true);
  }

  void checkin(UniqueFd fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(fd));
  }

  // Sends q and returns the server's answer (kOk or kTimeout); every other
  // outcome becomes an error naming the store address and the call.
  Result<Response> call(const Request& q, const Deadline& own_deadline, bool idempotent,
                        const std::string& what) {
    const Deadline d = own_deadline.earlier(ScopedStoreDeadline::current());
    if (Status s = store_wire::validate(q); !s.ok()) return s;
    Bytes frame = store_wire::encode_request(q);
    std::string first_failure;
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool reused = false;
      Result<UniqueFd> fd =
          attempt == 0
              ? checkout(d, reused)
              : open(std::max(std::min(options_.connect_timeout, d.remaining_ms()), Millis(1)),
                     /*retry=*/false);
      if (!fd.ok()) {
        if (attempt == 0) return fd.status();
        return Status(ErrorCode::kStore, "lost the connection to the rcoll store at " + address_ +
                                             " during " + what + ": " + first_failure +
                                             "; reconnecting failed: " + fd.status().message());
      }
      IoFailure failure;
      bool sent = false;
      auto r = exchange(fd.value().get(), frame, d, failure, sent);
      if (r.ok()) {
        const Response& resp = r.value();
        if (resp.reply == Reply::kOk || resp.reply == Reply::kTimeout) {
          checkin(std::move(fd).value());
          return r;
        }
        std::string reason(resp.value.begin(), resp.value.end());
        if (resp.reply == Reply::kError) {
          checkin(std::move(fd).value());
          return Status(ErrorCode::kInvalidArgument,
                        "the rcoll store at " + address_ + " rejected " + what + ": " + reason);
        }
        return Status(ErrorCode::kStore, "the rcoll store at " + address_ + " rejected " + what +
                                             " (" + store_wire::to_string(resp.reply) +
                                             "): " + reason);
      }
      // The connection is in an unknown state now: it is dropped (fd goes out of scope).
      if (failure.cancelled) return Status(ErrorCode::kClosed, what + " cancelled");
      if (failure.timed_out) {
        return Status(ErrorCode::kTimeout, "the rcoll store at " + address_ + " did not answer " +
                                               what + " in time; dropping that connection");
      }
      first_failure = failure.what;
      // A pooled connection may have gone stale (server restarted): retry once on a
      // fresh one, unless the request may already have run and is not idempotent.
      bool may_retry = reused && (idempotent || !sent) && !d.expired();
      if (!may_retry) break;
      RCOLL_LOG(kInfo, "store connection to %s broke during %s (%s); reconnecting once",
                address_.c_str(), what.c_str(), first_failure.c_str());
    }
    return Status(ErrorCode::kStore, "lost the connection to the rcoll store at " + address_ +
                                         " during " + what + ": " + first_failure);
  }

  TcpStoreOptions options_;
  std::string address_;
  std::mutex mu_;
  std::vector<UniqueFd> idle_;
};

}  // namespace
}  // namespace tcp_store_client

Result<std::shared_ptr<Store>> connect_tcp_store(const TcpStoreOptions& options) {
  if (options.host.empty()) {
    return Status(ErrorCode::kInvalidArgument, "the rcoll store address has no host");
  }
  if (options.port == 0) {
    return Status(ErrorCode::kInvalidArgument,
                  "the rcoll store address " + options.host + ":0 has no port");
  }
  if (options.token.size() > store_wire::kMaxKeyLength) {
    return Status(ErrorCode::kInvalidArgument, "the store job token is longer than " +
                                                   std::to_string(store_wire::kMaxKeyLength) +
                                                   " bytes");
  }
  auto client = std::make_shared<tcp_store_client::TcpStoreClient>(options);
  auto fd = client->open(std::max(options.connect_timeout, Millis(0)), /*retry=*/true);
  if (!fd.ok()) return fd.status();
  client->adopt(std::move(fd).value());
  return std::shared_ptr<Store>(std::move(client));
}

}  // namespace rcoll
