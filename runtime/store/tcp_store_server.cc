// The built-in TCP store server. One io_context thread owns every piece of
// state (the key-value map, the parked waiters, the sessions), so nothing here
// takes a lock. Each connection is a Session that reads one request at a time;
// a get/wait whose keys are missing parks as a Waiter on one missing key, with a
// steady_timer for its timeout, and is re-examined whenever that key is written.
// While a request is parked the session keeps a header read outstanding: that
// read is how a client that disconnects is noticed (and a client that sends a
// second request before the answer has broken the protocol).

// <utility> first: Boost 1.74's awaitable.hpp uses std::exchange without including it.
// clang-format off
#include <utility>
#include <boost/asio.hpp>
// clang-format on

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/store_exchange.h"
#include "rcoll/store.h"
#include "runtime/store/store_text.h"
#include "runtime/store/tcp_store_protocol.h"

namespace rcoll {
// The server's names, kept out of rcoll's own (rcoll::Op is an op; here Op is
// a store request's), in a build of one file or of several as one (unity).
namespace tcp_store_server {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using store::host_port;
using store_wire::Op;
using store_wire::Reply;
using store_wire::Request;
using store_wire::Response;

// A body is read in chunks that start small and double, so memory follows the
// bytes that actually arrived, not what a header claims.
constexpr size_t kFirstBodyChunk = size_t{64} << 10;
constexpr size_t kMaxBodyChunk = size_t{4} << 20;

std::string endpoint_string(const tcp::endpoint& ep) {
  return host_port(ep.address().to_string(), ep.port());
}

// Compares the tokens in time independent of where they differ.
bool same_token(const std::string& expected, const Bytes& got) {
  if (expected.size() != got.size()) return false;
  uint8_t diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) diff |= static_cast<uint8_t>(expected[i]) ^ got[i];
  return diff == 0;
}

class ServerImpl;
class Session;

struct Waiter {
  explicit Waiter(asio::io_context& io) : timer(io) {}
  std::shared_ptr<Session> session;
  Op op = Op::kGet;
  std::vector<std::string> keys;
  std::string parked_on;  // the missing key it is registered under
  size_t slot = 0;        // its place in that key's list (unregistered in O(1))
  int64_t integer = 0;    // carried into its answer (a publish's count)
  asio::steady_timer timer;
  bool done = false;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ServerImpl& server, tcp::socket socket, std::string peer)
      : server_(server), socket_(std::move(socket)), peer_(std::move(peer)), hello_timer_(socket_.get_executor()) {}

  // Starts reading; a client that has not said hello within `hello_timeout` is closed.
  void start(std::chrono::milliseconds hello_timeout);
  const std::string& peer() const { return peer_; }

  // Queues a response; close_after closes the connection once it is written.
  void send(const Response& response, bool close_after = false);
  // Called by the server when the parked request is answered or dropped.
  void unpark() { parked_ = nullptr; }
  // Ends the connection; `why` is logged when not empty.
  void close(const std::string& why);

 private:
  void read_header();
  void read_body();
  void on_frame();
  void write_next();

  ServerImpl& server_;
  tcp::socket socket_;
  std::string peer_;
  std::array<uint8_t, store_wire::kHeaderBytes> header_{};
  store_wire::FrameHeader frame_;
  Bytes body_;
  bool authenticated_ = false;
  Waiter* parked_ = nullptr;
  std::deque<Bytes> out_;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool closed_ = false;
  asio::steady_timer hello_timer_;
};

class ServerImpl final : public TcpStoreServer {
 public:
  explicit ServerImpl(const TcpStoreOptions& options) : options_(options), acceptor_(io_) {}
  ~ServerImpl() override { stop(); }

  Status bind() {
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec) {
      return Status(ErrorCode::kStore, "cannot start the rcoll store on " +
                                           host_port(options_.host, options_.port) +
                                           ": cannot resolve the host: " + ec.message());
    }
    std::string last_error = "no address to bind";
    for (const auto& entry : results) {
      boost::system::error_code e;
      tcp::acceptor acceptor(io_);
      acceptor.open(entry.endpoint().protocol(), e);
      if (!e) acceptor.set_option(tcp::acceptor::reuse_address(true), e);
      if (!e) acceptor.bind(entry.endpoint(), e);
      if (!e) acceptor.listen(asio::socket_base::max_listen_connections, e);
      if (e) {
        last_error = e.message();
        continue;
      }
      acceptor_ = std::move(acceptor);
      port_ = acceptor_.local_endpoint(e).port();
      address_ = host_port(options_.host, port_);
      return Status();
    }
    return Status(ErrorCode::kStore, "cannot start the rcoll store on " +
                                         host_port(options_.host, options_.port) + ": " +
                                         last_error);
  }

  void start() {
    accept_next();
    thread_ = std::thread([this] { run(); });
    RCOLL_LOG(kInfo, "rcoll store serving on %s", address_.c_str());
  }

  uint16_t port() const override { return port_; }
  std::string address() const override { return address_; }

  void stop() override {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    // Stop the loop first: once the thread is joined, this thread owns all the
    // state and can close everything without racing a handler.
    io_.stop();
    if (thread_.joinable()) thread_.join();
    boost::system::error_code ec;
    acceptor_.close(ec);
    // Closing a session cancels its parked waiter; clients see the connection end.
    auto sessions = std::move(sessions_);
    for (auto& [ptr, weak] : sessions) {
      if (auto s = weak.lock()) s->close("");
    }
    for (auto& [key, list] : waiters_) {
      for (auto& w : list) {
        w->done = true;
        w->timer.cancel();
        w->session.reset();
      }
    }
    waiters_.clear();
    RCOLL_LOG(kInfo, "rcoll store on %s stopped after %llu requests; %zu keys dropped",
              address_.c_str(), static_cast<unsigned long long>(requests_), data_.size());
  }

  const std::string& token() const { return options_.token; }
  asio::io_context& io() { return io_; }

  // Runs one request from an authenticated session; the response is sent
  // now or, for a parked get/wait, when its keys appear or its timer fires.
  void handle(const std::shared_ptr<Session>& session, Request&& q, Waiter*& parked);
  void cancel(Waiter* w);
  void forget(Session* s) { sessions_.erase(s); }

 private:
  void run() {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        // A handler threw (e.g. bad_alloc): log it and keep serving the others.
        RCOLL_LOG(kError, "rcoll store on %s: request handler failed: %s; continuing",
                  address_.c_str(), e.what());
      }
    }
  }

  void accept_next() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
        // Out of descriptors and the like: back off briefly rather than spin.
        RCOLL_LOG(kWarn, "rcoll store on %s: accept failed: %s; retrying in 50 ms",
                  address_.c_str(), ec.message().c_str());
        auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(50));
        timer->async_wait([this, timer](const boost::system::error_code& e) {
          if (!e) accept_next();
        });
        return;
      }
      boost::system::error_code e;
      socket.set_option(tcp::no_delay(true), e);
      auto remote = socket.remote_endpoint(e);
      std::string peer = e ? std::string("unknown peer") : endpoint_string(remote);
      auto session = std::make_shared<Session>(*this, std::move(socket), std::move(peer));
      sessions_[session.get()] = session;
      session->start(options_.hello_timeout);
      accept_next();
    });
  }

  void complete(Waiter* w);
  // The kOk answer to a get, wait or multi_get whose keys are all there.
  void answer(Op op, const std::vector<std::string>& keys, Response& r);
  void expire(const std::shared_ptr<Waiter>& w);
  void notify(const std::string& key);
  void park_on(const std::shared_ptr<Waiter>& w, const std::string& key);
  bool add(const std::string& key, int64_t delta, Response& r);
  Waiter* wait_or_answer(const std::shared_ptr<Session>& session, Op op,
                         std::vector<std::string> keys, int64_t timeout_ms, Response& r);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  void unregister(Waiter* w);

  // Declared first: destroyed last, after everything that holds its handlers.
  asio::io_context io_;
  TcpStoreOptions options_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::string address_;
  uint64_t requests_ = 0;  // served (the server's thread only), logged at stop
  std::thread thread_;
  std::mutex stop_mu_;
  bool stopped_ = false;

  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> waiters_;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions_;
};

// ---- Session ----------------------------------------------------------------

void Session::start(std::chrono::milliseconds hello_timeout) {
  auto self = shared_from_this();
  hello_timer_.expires_after(hello_timeout);
  hello_timer_.async_wait([self, hello_timeout](const boost::system::error_code& ec) {
    if (ec || self->closed_ || self->authenticated_) return;
    self->close("no hello within " + std::to_string(hello_timeout.count()) +
                " ms of connecting (not an rcoll client?)");
  });
  read_header();
}

void Session::read_header() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(header_),
                   [self](const boost::system::error_code& ec, size_t) {
                     if (self->closed_) return;
                     if (ec) {
                       // A clean EOF between requests is a normal goodbye.
                       if (self->parked_ != nullptr) {
                         // A watch (Store::watch) is cancelled by leaving:
                         // every recovery and every close does so, quietly.
                         const bool wait = self->parked_->op == Op::kWait;
                         self->close(wait ? ""
                                          : "the client left while its get was parked (" +
                                                ec.message() + "); dropping the wait");
                       } else {
                         bool quiet = ec == asio::error::eof;
                         self->close(quiet ? "" : "connection lost: " + ec.message());
                       }
                       return;
                     }
                     if (self->parked_ != nullptr) {
                       self->close("sent a request while its get/wait was still parked");
                       return;
                     }
                     auto h = store_wire::decode_header(self->header_, store_wire::kRequestMagic);
                     if (!h.ok()) {
                       self->close(h.status().message());
                       return;
                     }
                     self->frame_ = h.value();
                     self->body_.clear();
                     self->read_body();
                   });
}

void Session::read_body() {
  size_t have = body_.size();
  if (have == frame_.body_length) {
    on_frame();
    return;
  }
  size_t chunk =
      std::min(frame_.body_length - have, std::clamp(have, kFirstBodyChunk, kMaxBodyChunk));
  body_.resize(have + chunk);
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(body_.data() + have, chunk),
                   [self](const boost::system::error_code& ec, size_t) {
                     if (self->closed_) return;
                     if (ec) {
                       self->close("connection lost in the middle of a request: " + ec.message());
                       return;
                     }
                     self->read_body();
                   });
}

void Session::on_frame() {
  auto q = store_wire::decode_request_body(frame_.kind, body_);
  Bytes().swap(body_);  // release a large body now, not at the next request
  if (!q.ok()) {
    close(q.status().message());
    return;
  }
  Request& req = q.value();
  if (!authenticated_) {
    if (req.op != Op::kHello) {
      close(std::string("sent ") + store_wire::to_string(req.op) + " before hello");
      return;
    }
    if (!server_.token().empty() && !same_token(server_.token(), req.value)) {
      RCOLL_LOG(kWarn, "rcoll store on %s: refused a client from %s: wrong job token (another job, or not an rcoll process); closing that connection",
                server_.address().c_str(), peer_.c_str());
      Response r;
      r.reply = Reply::kRefused;
      std::string why = "job token mismatch";
      r.value.assign(why.begin(), why.end());
      send(r, /*close_after=*/true);
      return;  // no further reads: the connection ends after the refusal
    }
    authenticated_ = true;
    hello_timer_.cancel();
    send(Response{});
    read_header();
    return;
  }
  if (req.op == Op::kHello) {
    close("sent a second hello");
    return;
  }
  server_.handle(shared_from_this(), std::move(req), parked_);
  // Keep a read outstanding even while parked: it notices a client that leaves.
  if (!closed_) read_header();
}

void Session::send(const Response& response, bool close_after) {
  if (closed_) return;
  out_.push_back(store_wire::encode_response(response));
  if (close_after) close_after_write_ = true;
  if (!writing_) write_next();
}

void Session::write_next() {
  if (out_.empty()) {
    writing_ = false;
    if (close_after_write_) close("");
    return;
  }
  writing_ = true;
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(out_.front()),
                    [self](const boost::system::error_code& ec, size_t) {
                      if (self->closed_) return;
                      if (ec) {
                        self->close("cannot send the response: " + ec.message());
                        return;
                      }
                      self->out_.pop_front();
                      self->write_next();
                    });
}

void Session::close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  if (!why.empty()) {
    RCOLL_LOG(kWarn, "rcoll store on %s: closing the connection from %s: %s",
              server_.address().c_str(), peer_.c_str(), why.c_str());
  }
  if (parked_ != nullptr) {
    Waiter* w = parked_;
    parked_ = nullptr;
    server_.cancel(w);
  }
  boost::system::error_code ec;
  hello_timer_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  out_.clear();
  server_.forget(this);
}

// ---- ServerImpl: requests and waiters ----------------------------------------

std::vector<std::string> ServerImpl::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (data_.find(k) == data_.end()) out.push_back(k);
  }
  return out;
}

void ServerImpl::handle(const std::shared_ptr<Session>& session, Request&& q, Waiter*& parked) {
  ++requests_;
  Response r;
  switch (q.op) {
    case Op::kSet: {
      const std::string& key = q.keys[0];
      data_[key] = std::move(q.value);
      session->send(r);
      notify(key);
      return;
    }
    case Op::kPublish: {
      // kSetAdd's set and add, then (below the count it completes) kMultiGet's wait.
      data_[q.keys[0]] = std::move(q.value);
      notify(q.keys[0]);
      if (!add(q.keys[1], 1, r)) {
        session->send(r);
        return;
      }
      if (r.integer >= store_wire::publish_until(q.integer)) {
        session->send(r);  // this request completed the count: nothing to wait for
        return;
      }
      const int64_t timeout = store_wire::publish_timeout_ms(q.integer);
      q.keys.erase(q.keys.begin(), q.keys.begin() + 2);
      parked = wait_or_answer(session, Op::kMultiGet, std::move(q.keys), timeout, r);
      return;
    }
    case Op::kAdd:
    case Op::kSetAdd: {
      if (q.op == Op::kSetAdd) {
        data_[q.keys[0]] = std::move(q.value);
        notify(q.keys[0]);
      }
      (void)add(q.keys.back(), q.integer, r);
      session->send(r);
      return;
    }
    case Op::kCheck:
      r.integer = data_.count(q.keys[0]) ? 1 : 0;
      session->send(r);
      return;
    case Op::kErase:
    case Op::kEraseMany:
      for (const std::string& key : q.keys) r.integer += static_cast<int64_t>(data_.erase(key));
      session->send(r);
      return;
    case Op::kGet:
    case Op::kWait:
    case Op::kMultiGet:
      parked = wait_or_answer(session, q.op, std::move(q.keys), q.integer, r);
      return;
    case Op::kHello:
      break;
  }
  session->close("unexpected op");
}

// Adds `delta` to the counter `key`: true and r.integer = its new value, or
// false and `r` a kError saying why (not an integer, an overflow).
bool ServerImpl::add(const std::string& key, int64_t delta, Response& r) {
  int64_t current = 0;
  auto it = data_.find(key);
  if (it != data_.end() && !store_wire::parse_counter(it->second, current)) {
    r.reply = Reply::kError;
    const std::string why = "the value of \"" + key + "\" is not an integer";
    r.value.assign(why.begin(), why.end());
    return false;
  }
  int64_t next = 0;
  if (__builtin_add_overflow(current, delta, &next)) {
    r.reply = Reply::kError;
    const std::string why = "adding " + std::to_string(delta) + " to \"" + key + "\" (" +
                            std::to_string(current) + ") overflows int64";
    r.value.assign(why.begin(), why.end());
    return false;
  }
  data_[key] = store_wire::format_counter(next);
  r.integer = next;
  notify(key);
  return true;
}

// Answers a get, wait or multi_get of `keys` now if they are all there (or
// the timeout is 0: kTimeout naming the missing ones), else parks it until
// they are or the timeout passes; the waiter parked, if one. `r` may carry
// an integer into the answer (a publish's count).
Waiter* ServerImpl::wait_or_answer(const std::shared_ptr<Session>& session, Op op,
                                   std::vector<std::string> keys, int64_t timeout_ms, Response& r) {
  auto absent = missing(keys);
  if (absent.empty()) {
    answer(op, keys, r);
    session->send(r);
    return nullptr;
  }
  if (timeout_ms <= 0) {
    r.reply = Reply::kTimeout;
    r.keys = std::move(absent);
    session->send(r);
    return nullptr;
  }
  auto w = std::make_shared<Waiter>(io_);
  w->session = session;
  w->op = op;
  w->keys = std::move(keys);
  w->integer = r.integer;
  w->timer.expires_after(
      std::chrono::milliseconds(std::min(timeout_ms, store_wire::kMaxTimeoutMs)));
  w->timer.async_wait([this, w](const boost::system::error_code& ec) {
    if (!ec) expire(w);
  });
  park_on(w, absent[0]);
  return w.get();
}

void ServerImpl::park_on(const std::shared_ptr<Waiter>& w, const std::string& key) {
  w->parked_on = key;
  auto& list = waiters_[key];
  w->slot = list.size();
  list.push_back(w);
}

// O(1): thousands of ranks park on one key (an exchange's combined value),
// and each of them leaves the list once a slice, so a scan of the list each
// time was O(P^2) a slice (the scale harness at 8,192 ranks).
void ServerImpl::unregister(Waiter* w) {
  auto it = waiters_.find(w->parked_on);
  if (it == waiters_.end()) return;
  auto& list = it->second;
  if (w->slot >= list.size() || list[w->slot].get() != w) return;  // not parked there
  if (w->slot + 1 != list.size()) {
    list[w->slot] = std::move(list.back());
    list[w->slot]->slot = w->slot;
  }
  list.pop_back();
  if (list.empty()) waiters_.erase(it);
}

void ServerImpl::notify(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto list = std::move(it->second);
  waiters_.erase(it);
  for (auto& w : list) {
    if (w->done) continue;
    auto absent = missing(w->keys);
    if (absent.empty()) {
      complete(w.get());
    } else {
      park_on(w, absent[0]);
    }
  }
}

void ServerImpl::complete(Waiter* w) {
  w->done = true;
  w->timer.cancel();
  Response r;
  r.integer = w->integer;
  answer(w->op, w->keys, r);
  auto session = std::move(w->session);
  session->unpark();
  session->send(r);
}

void ServerImpl::answer(Op op, const std::vector<std::string>& keys, Response& r) {
  if (op == Op::kGet) r.value = data_[keys[0]];
  if (op != Op::kMultiGet) return;
  // Sized first: 4,096 names of one 64 MiB key must not be copied to find out.
  size_t total = 0;
  for (const std::string& key : keys) total += 4 + data_[key].size();
  if (total > store_wire::kMaxValueLength) {
    r.reply = Reply::kError;
    const std::string why = "multi_get of " + std::to_string(keys.size()) + " keys would answer " +
                            std::to_string(total) + " bytes, over the limit of " +
                            std::to_string(store_wire::kMaxValueLength);
    r.value.assign(why.begin(), why.end());
    return;
  }
  r.value.reserve(total);
  for (const std::string& key : keys) append_value(r.value, data_[key]);
}

void ServerImpl::expire(const std::shared_ptr<Waiter>& w) {
  if (w->done) return;
  w->done = true;
  unregister(w.get());
  Response r;
  r.reply = Reply::kTimeout;
  r.integer = w->integer;
  r.keys = missing(w->keys);
  auto session = std::move(w->session);
  session->unpark();
  session->send(r);
}

void ServerImpl::cancel(Waiter* w) {
  if (w->done) return;
  w->done = true;
  w->timer.cancel();
  // The session that parked it is closing and still alive on the caller's
  // stack; dropping the reference here cannot destroy it mid-call.
  auto session = std::move(w->session);
  unregister(w);
}

}  // namespace
}  // namespace tcp_store_server

Result<std::unique_ptr<TcpStoreServer>> start_tcp_store_server(const TcpStoreOptions& options) {
  if (options.host.empty()) {
    return Status(ErrorCode::kInvalidArgument, "the rcoll store needs a host to bind to");
  }
  if (options.token.size() > store_wire::kMaxKeyLength) {
    return Status(ErrorCode::kInvalidArgument, "the store job token is longer than " +
                                                   std::to_string(store_wire::kMaxKeyLength) +
                                                   " bytes");
  }
  auto server = std::make_unique<tcp_store_server::ServerImpl>(options);
  if (Status s = server->bind(); !s.ok()) return s;
  server->start();
  return std::unique_ptr<TcpStoreServer>(std::move(server));
}

}  // namespace rcoll
