#include "transports/tcp/mesh.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "base/log.h"
#include "base/store_exchange.h"
#include "transports/frame.h"

namespace rcoll {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

struct AppliedOptions {
  std::string congestion;  // as the kernel reports it for the socket
  int congestion_errno = 0;  // why the requested one was refused, or 0
  int rto_max_ms = 0;        // the retransmission timeout's cap, as set (0: the kernel's 120 s)
};

AppliedOptions set_socket_options(int fd, const MeshParams& p) {
  AppliedOptions applied;
  const int on = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  if (p.socket_buffer_bytes > 0) {
    const int bytes = static_cast<int>(p.socket_buffer_bytes);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
  if (!p.congestion.empty() && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, p.congestion.data(),
                                          static_cast<socklen_t>(p.congestion.size())) != 0) {
    applied.congestion_errno = errno;
  }
  char name[32] = {};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0) {
    applied.congestion.assign(name, strnlen(name, len));
  }
  if (setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &kTcpRtoMaxMs, sizeof(kTcpRtoMaxMs)) == 0) {
    applied.rto_max_ms = kTcpRtoMaxMs;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kTcpUserTimeoutMs,
                     sizeof(kTcpUserTimeoutMs));
  }
  return applied;
}

// The address exchange's combined value: only that every rank published.
Bytes all_published(const std::vector<Bytes>&) { return Bytes{}; }

// One rank's address, read from the store on a first dial to a rank whose
// address did not come with the combined value (the first few such ranks).
constexpr Millis kFetchAddressFor{1000};
AddressBook::FetchOne fetch_address(const MeshParams& p) {
  return [store = p.store, prefix = p.key_prefix, size = p.size](int q) -> Result<std::string> {
    const StoreExchange x = address_exchange(*store, prefix, size);
    auto v = store->get(x.key(q), kFetchAddressFor);
    if (!v.ok()) return v.status();
    return std::string(v.value().begin(), v.value().end());
  };
}

// Every rank's address, read from the store once a rank has dialled more
// ranks than it read one by one (once per mesh at most).
constexpr Millis kFetchAddressesFor{5000};
AddressBook::FetchAll fetch_addresses(const MeshParams& p) {
  return [store = p.store, prefix = p.key_prefix, size = p.size]() -> Result<PackedValues> {
    const StoreExchange x = address_exchange(*store, prefix, size);
    auto packed = x.read_more(Deadline::after(kFetchAddressesFor));
    if (!packed.ok()) return packed.status();
    PackedValues all;
    if (!PackedValues::decode(std::move(packed).value(), size, &all)) {
      return Status(ErrorCode::kStore, "every rank's address under " + prefix +
                                           " does not decode: is another program using the "
                                           "store's keys?");
    }
    return all;
  };
}

// Builds one mesh: listens and publishes this rank's address, dials every
// rank below and accepts every rank above (of p.connect_now, where given),
// all as handlers on `io`, which run() drives until those are connected or
// the deadline passes. The handlers point at the builder, so it tears down
// whatever is still in flight before it returns.
class MeshBuilder {
 public:
  MeshBuilder(asio::io_context& io, const MeshParams& p, const NetInterface& iface)
      : io_(io),
        p_(p),
        iface_(iface),
        purpose_(p.purpose.c_str()),
        socks_(static_cast<size_t>(p.size)),
        acceptor_(io),
        expected_token_(job_token_hash(p.job_token)),
        last_error_(static_cast<size_t>(p.size)),
        partial_(!p.connect_now.empty()),
        exchange_(address_exchange(*p.store, p.key_prefix, p.size)) {
    for (int q = 0; q < p.size; ++q) {
      if (q == p.rank || !now(q)) continue;
      ++pending_;
      if (q > p.rank) ++to_accept_;
    }
  }

  // The connections made, and (for a partial mesh) the listener and the
  // addresses.
  Result<PartialMesh> build_partial();

 private:
  // Dial lower ranks, retrying until the deadline (a rank may publish before
  // its peers have started listening on a new interface, or be slow to start).
  struct Dial {
    int peer;
    tcp::endpoint ep;
    std::string ifname;
    std::unique_ptr<tcp::socket> sock;
    asio::steady_timer retry;
    FrameBytes out;
    FrameBytes in;
  };
  // Accept higher ranks; refuse strangers.
  struct Incoming {
    std::unique_ptr<tcp::socket> sock;
    FrameBytes in;
    FrameBytes out;
  };

  static constexpr Millis kCancelPoll{20};

  // Listens; the address is published with the wait for the others'
  // (dial_lower_ranks).
  Status listen_here();
  bool is_cancelled();
  Status cancelled_status() const;
  Status dial_lower_ranks();
  Status add_dial(int peer, const std::string& addr);
  void attempt(Dial* d);
  void on_connect(Dial* d, const error_code& ec);
  void on_hello_sent(Dial* d, const error_code& ec);
  void on_hello_ack(Dial* d, const error_code& ec);
  void accept_next();
  void on_accept(Incoming* in, const error_code& ec);
  void on_hello(Incoming* in, const error_code& ec);
  // `quiet`: a debug line only (a dial on first use given up by its rank).
  void refuse(Incoming* in, const std::string& from, const std::string& why, bool quiet = false);
  void on_ack_sent(Incoming* in, int peer, const error_code& ec);
  void connected(int peer, std::unique_ptr<tcp::socket> sock);
  // Whether `peer` is one to connect now.
  bool now(int peer) const {
    return !partial_ || (static_cast<size_t>(peer) < p_.connect_now.size() && p_.connect_now[peer]);
  }
  void run();
  void tear_down();
  Result<MeshSockets> report_connected();
  Status report_missing() const;

  ErrorContext context(int peer) const {
    return ErrorContext{p_.rank, peer, 0, p_.epoch, p_.transport};
  }

  asio::io_context& io_;
  const MeshParams& p_;
  const NetInterface& iface_;
  const char* purpose_;
  MeshSockets socks_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  const uint64_t expected_token_;
  std::vector<std::string> last_error_;
  const bool partial_;      // p.connect_now given: the listener outlives the build
  int pending_ = 0;         // peers to connect now, not connected yet
  AppliedOptions applied_;  // as applied to the last socket; a refusal is kept
  std::vector<std::unique_ptr<Dial>> dials_;
  std::vector<std::unique_ptr<Incoming>> incoming_;
  int to_accept_ = 0;  // peers above this rank to connect now, not accepted yet
  int early_ = 0;      // peers not to connect now that dialled in anyway
  bool cancelled_ = false;
  AddressBook addresses_;         // connect_now's, and the rest once dialled
  std::string my_address_;        // as published
  const StoreExchange exchange_;  // the ranks' addresses
};

Result<PartialMesh> MeshBuilder::build_partial() {
  if (Status s = listen_here(); !s.ok()) return s;
  accept_next();  // served while the addresses are awaited, too
  if (Status s = dial_lower_ranks(); !s.ok()) {
    tear_down();  // the accepts and the dials already started
    return s;
  }
  run();
  // A partial mesh keeps its listener: its address is the one published.
  error_code ec;
  int listen_fd = partial_ ? acceptor_.release(ec) : -1;
  if (ec) listen_fd = -1;
  tear_down();
  MeshListener listener(listen_fd, my_address_);
  if (pending_ > 0) {
    if (cancelled_) return cancelled_status();
    return report_missing();
  }
  if (partial_ && !listener.valid()) {
    return Status(
        ErrorCode::kTransport, context(-1),
        p_.purpose + ": could not keep the listener for the connections to come: " + ec.message());
  }
  auto sockets = report_connected();
  if (!sockets.ok()) return sockets.status();
  return PartialMesh{std::move(sockets).value(), std::move(listener), std::move(addresses_),
                     iface_.name};
}

Status MeshBuilder::listen_here() {
  error_code ec;
  tcp::endpoint listen_ep(asio::ip::make_address(iface_.address, ec), 0);
  if (p_.listen_fd >= 0) {
    if (!ec) acceptor_.assign(listen_ep.protocol(), p_.listen_fd, ec);
    if (ec) ::close(p_.listen_fd);
  } else {
    if (!ec) acceptor_.open(listen_ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(listen_ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    return Status(ErrorCode::kTransport, context(-1),
                  "cannot listen on interface " + iface_.name + " (" + iface_.address + ") for " +
                      p_.purpose + ": " + ec.message());
  }
  port_ = acceptor_.local_endpoint().port();
  const std::string my_addr = iface_.address + " " + std::to_string(port_) + " " + iface_.name;
  my_address_ = my_addr;
  if (!p_.addresses.empty()) {
    if (p_.addresses.size() != p_.size) {
      return Status(ErrorCode::kInternal, context(-1),
                    p_.purpose + ": given " + std::to_string(p_.addresses.size()) +
                        " addresses for " + std::to_string(p_.size) + " ranks");
    }
  }  // else published with the wait for every rank's (dial_lower_ranks)
  RCOLL_LOG(kInfo, "%s: listening on %s:%u (interface %s), connecting to %d peers%s", purpose_,
            iface_.address.c_str(), port_, iface_.name.c_str(), pending_,
            pending_ < p_.size - 1 ? " now (the others on first use)" : "");
  return Status();
}

bool MeshBuilder::is_cancelled() {
  if (!cancelled_ && p_.cancelled && p_.cancelled()) cancelled_ = true;
  return cancelled_;
}

Status MeshBuilder::cancelled_status() const {
  return Status(
      ErrorCode::kAborted, context(-1),
      p_.purpose + ": connect cancelled: the runtime gave up on it (a rank died or gave up)");
}

// Every rank's address from the store (one combined read), then a dial to
// each rank below this one. Between slices of the wait, the accepts (and
// refusals of strangers) that arrived meanwhile are served.
Status MeshBuilder::dial_lower_ranks() {
  auto serve = [this] {
    if (io_.stopped()) io_.restart();
    io_.poll();
    return is_cancelled() ? cancelled_status() : Status();
  };
  StoreExchange::Gathered got;
  // The peers to connect now, whose addresses come with the combined value;
  // where that is most ranks (a full mesh), everyone's in one read after it.
  constexpr size_t kMostPicked = 64;
  std::vector<int> pick;
  for (int q = 0; q < p_.size; ++q)
    if (q != p_.rank && now(q)) pick.push_back(q);
  const bool read_all = pick.size() > kMostPicked;
  if (read_all) pick.clear();
  if (!p_.addresses.empty()) {
    addresses_ = p_.addresses;
  } else {
    // Published and waited for in one request where the store can.
    got = exchange_.publish_and_gather(p_.rank, Bytes(my_address_.begin(), my_address_.end()),
                                       p_.deadline, {}, address_wait_slice(p_.size), serve, pick);
  }
  if (got.ended == StoreExchange::Gathered::Ended::kJudged) return got.status;  // cancelled
  if (!got.ok()) {
    const int peer = got.missing.empty() ? -1 : got.missing.front();
    if (got.ended != StoreExchange::Gathered::Ended::kTimedOut) {
      return Status(
          got.status.code(), context(peer),
          "reading the addresses for " + p_.purpose + " from the store: " + got.status.message());
    }
    const bool one = got.missing.size() == 1;
    return Status(
        ErrorCode::kPeerUnreachable, context(peer),
        (one ? "rank " : "ranks ") + rank_list(got.missing) +
            (one ? " never published its address for " : " never published their addresses for ") +
            p_.purpose);
  }
  if (p_.addresses.empty() && read_all) {
    auto all = fetch_addresses(p_)();
    if (!all.ok()) {
      return Status(all.status().code(), context(-1),
                    "reading every rank's address for " + p_.purpose +
                        " from the store: " + all.status().message());
    }
    addresses_ = AddressBook(std::move(all).value());
  } else if (p_.addresses.empty()) {
    if (got.picked.size() != pick.size()) {
      return Status(ErrorCode::kStore, context(-1),
                    "the addresses for " + p_.purpose + " came back " +
                        std::to_string(got.picked.size()) + " for " + std::to_string(pick.size()) +
                        " peers: is another program using the store's keys?");
    }
    std::vector<std::pair<int, std::string>> known{{p_.rank, my_address_}};
    for (size_t i = 0; i < pick.size(); ++i)
      known.emplace_back(pick[i], std::string(got.picked[i].begin(), got.picked[i].end()));
    addresses_ = AddressBook(p_.size, std::move(known), fetch_addresses(p_), fetch_address(p_));
  }
  for (int peer = 0; peer < p_.rank; ++peer) {
    // Taken already: a peer not to connect now that dialled in first.
    if (!now(peer) || socks_[peer]) continue;
    auto address = addresses_.at(peer);
    if (!address.ok()) {
      return Status(address.status().code(), context(peer),
                    "reading rank " + std::to_string(peer) + "'s address for " + p_.purpose + ": " +
                        address.status().message());
    }
    if (Status s = add_dial(peer, address.value()); !s.ok()) return s;
    attempt(dials_.back().get());
  }
  return Status();
}

// Parses the peer's "IP PORT IFNAME" into a new Dial.
Status MeshBuilder::add_dial(int peer, const std::string& addr) {
  const size_t a = addr.find(' ');
  const size_t b = a == std::string::npos ? a : addr.find(' ', a + 1);
  unsigned long port_num = 0;
  if (a != std::string::npos) {
    try {
      port_num = std::stoul(addr.substr(a + 1, b == std::string::npos ? b : b - a - 1));
    } catch (const std::exception&) {
      port_num = 0;
    }
  }
  error_code ec;
  auto ip = asio::ip::make_address(addr.substr(0, a), ec);
  if (ec || port_num == 0 || port_num > 65535) {
    return Status(ErrorCode::kStore, context(peer),
                  "rank " + std::to_string(peer) + " published a bad address '" + addr + "' for " +
                      p_.purpose);
  }
  const std::string ifname = b == std::string::npos ? "" : addr.substr(b + 1);
  dials_.push_back(
      std::unique_ptr<Dial>(new Dial{peer,
                                     tcp::endpoint(ip, static_cast<uint16_t>(port_num)),
                                     ifname,
                                     nullptr,
                                     asio::steady_timer(io_),
                                     {},
                                     {}}));
  return Status();
}

void MeshBuilder::attempt(Dial* d) {
  d->sock = std::make_unique<tcp::socket>(io_);
  d->sock->async_connect(d->ep, [this, d](const error_code& ec) { on_connect(d, ec); });
}

void MeshBuilder::on_connect(Dial* d, const error_code& ec) {
  if (ec == asio::error::operation_aborted) return;  // torn down: keep the real reason
  if (ec) {
    last_error_[d->peer] = "connect to " + d->ep.address().to_string() + ":" +
                           std::to_string(d->ep.port()) + " failed: " + ec.message();
    error_code ignored;
    d->sock->close(ignored);
    d->retry.expires_after(std::chrono::milliseconds(20));
    d->retry.async_wait([this, d](const error_code& tec) {
      if (!tec && !p_.deadline.expired()) attempt(d);
    });
    return;
  }
  d->out = encode(mesh_hello(FrameType::kHello, p_));
  asio::async_write(*d->sock, asio::buffer(d->out),
                    [this, d](const error_code& ec, size_t) { on_hello_sent(d, ec); });
}

void MeshBuilder::on_hello_sent(Dial* d, const error_code& ec) {
  if (ec == asio::error::operation_aborted) return;
  if (ec) {
    last_error_[d->peer] = "sending hello failed: " + ec.message();
    return;
  }
  asio::async_read(*d->sock, asio::buffer(d->in),
                   [this, d](const error_code& ec, size_t) { on_hello_ack(d, ec); });
}

void MeshBuilder::on_hello_ack(Dial* d, const error_code& ec) {
  if (ec == asio::error::operation_aborted) return;
  if (ec) {
    last_error_[d->peer] = "rank " + std::to_string(d->peer) +
                           " closed the connection during the hello (" + ec.message() +
                           "): wrong job token or epoch?";
    // Dialled again: on a listener kept from epoch to epoch, the peer's
    // earlier epoch may have taken the dial and refused it (a recovery
    // connects the next epoch before every rank has left the failed one).
    error_code ignored;
    d->sock->close(ignored);
    d->retry.expires_after(std::chrono::milliseconds(20));
    d->retry.async_wait([this, d](const error_code& tec) {
      if (!tec && !p_.deadline.expired()) attempt(d);
    });
    return;
  }
  auto h = decode_frame_header(d->in.data(), d->in.size());
  if (!h.ok() || h.value().type != FrameType::kHelloAck || h.value().root != d->peer ||
      h.value().epoch != p_.epoch) {
    last_error_[d->peer] = "bad hello ack from " + d->ep.address().to_string();
    return;
  }
  connected(d->peer, std::move(d->sock));
}

void MeshBuilder::accept_next() {
  // A partial mesh also takes the peers that connect on first use.
  if (to_accept_ == 0 && !partial_) return;
  incoming_.push_back(std::make_unique<Incoming>());
  Incoming* in = incoming_.back().get();
  in->sock = std::make_unique<tcp::socket>(io_);
  acceptor_.async_accept(*in->sock, [this, in](const error_code& ec) { on_accept(in, ec); });
}

void MeshBuilder::on_accept(Incoming* in, const error_code& ec) {
  if (ec) return;
  accept_next();
  asio::async_read(*in->sock, asio::buffer(in->in),
                   [this, in](const error_code& ec, size_t) { on_hello(in, ec); });
}

void MeshBuilder::on_hello(Incoming* in, const error_code& ec) {
  if (ec == asio::error::operation_aborted) return;  // torn down at the deadline
  const std::string from = remote_address(*in->sock);
  // A rank that dialled on first use may give the dial up (its link failed,
  // or it left the epoch) before its hello.
  if (ec) return refuse(in, from, "no hello (" + ec.message() + ")", partial_);
  auto h = decode_frame_header(in->in.data(), in->in.size());
  if (!h.ok()) return refuse(in, from, h.status().message());
  const FrameHeader& hello = h.value();
  if (hello.type != FrameType::kHello) return refuse(in, from, "first frame is not a hello");
  if (hello.op_seq != expected_token_) {
    return refuse(in, from, "job token mismatch (a process of another job?)");
  }
  if (hello.epoch != p_.epoch) {
    // An earlier epoch's dial (on first use, to a listener this rank kept
    // from epoch to epoch) waited in the backlog: expected, not a stranger.
    return refuse(in, from,
                  "hello for epoch " + std::to_string(hello.epoch) + ", this is epoch " +
                      std::to_string(p_.epoch),
                  hello.epoch < p_.epoch);
  }
  if (hello.count != static_cast<uint64_t>(p_.size)) {
    return refuse(
        in, from,
        "world size " + std::to_string(hello.count) + " differs from " + std::to_string(p_.size));
  }
  const int peer = hello.root;
  // A peer to connect now dials only if it is above this rank; any other peer
  // of a partial mesh may dial in first, ahead of its first frame.
  const bool expected = now(peer) ? peer > p_.rank : partial_ && peer != p_.rank;
  if (peer < 0 || peer >= p_.size || !expected || socks_[peer]) {
    return refuse(in, from, "unexpected rank " + std::to_string(peer));
  }
  if (now(peer)) --to_accept_;
  // The ack is written here, not queued: once written the dialler takes the
  // connection as made, so the build must own it from then on (a queued
  // write's handler could run after the build ended and closed the socket).
  // 48 bytes into a new connection's empty buffer do not block.
  in->out = encode(mesh_hello(FrameType::kHelloAck, p_));
  error_code ec2;
  asio::write(*in->sock, asio::buffer(in->out), ec2);
  on_ack_sent(in, peer, ec2);
}

void MeshBuilder::refuse(Incoming* in, const std::string& from, const std::string& why,
                         bool quiet) {
  if (quiet) {
    RCOLL_LOG(kDebug, "%s: closed connection from %s: %s", purpose_, from.c_str(), why.c_str());
  } else {
    RCOLL_LOG(
        kWarn,
        "%s: rank %d refused connection from %s: %s; closed it, still accepting the job's ranks",
        purpose_, p_.rank, from.c_str(), why.c_str());
  }
  error_code ignored;
  in->sock->close(ignored);
}

void MeshBuilder::on_ack_sent(Incoming* in, int peer, const error_code& ec) {
  if (ec == asio::error::operation_aborted) return;
  if (ec) {
    last_error_[peer] = "sending hello ack failed: " + ec.message();
    if (now(peer)) ++to_accept_;
    accept_next();
    return;
  }
  connected(peer, std::move(in->sock));
}

void MeshBuilder::connected(int peer, std::unique_ptr<tcp::socket> sock) {
  AppliedOptions applied = set_socket_options(sock->native_handle(), p_);
  if (applied_.congestion_errno == 0) applied_.congestion_errno = applied.congestion_errno;
  applied_.congestion = std::move(applied.congestion);
  applied_.rto_max_ms = applied.rto_max_ms;
  socks_[peer] = std::move(sock);
  if (now(peer)) {
    --pending_;
  } else {
    ++early_;
  }
}

void MeshBuilder::run() {
  while (pending_ > 0 && !p_.deadline.expired() && !is_cancelled()) {
    if (io_.stopped()) io_.restart();
    Clock::time_point until =
        p_.deadline.is_never() ? Clock::now() + std::chrono::hours(24) : p_.deadline.time();
    if (p_.cancelled) until = std::min(until, Clock::now() + kCancelPoll);
    io_.run_one_until(until);
  }
}

// Tear down whatever is still in flight and run the cancelled handlers now,
// before the locals they refer to go away.
void MeshBuilder::tear_down() {
  error_code ignored;
  acceptor_.close(ignored);
  for (auto& d : dials_) {
    d->retry.cancel();
    if (d->sock) d->sock->close(ignored);
  }
  for (auto& in : incoming_) {
    if (in->sock) in->sock->close(ignored);
  }
  io_.restart();
  io_.poll();
  // A connect that failed just before the close may have armed its retry timer
  // while those handlers ran: cancel once more so nothing is left pending.
  for (auto& d : dials_) d->retry.cancel();
  io_.restart();
  io_.poll();
}

Result<MeshSockets> MeshBuilder::report_connected() {
  if (applied_.congestion_errno != 0) {
    RCOLL_LOG(kWarn,
              "%s: TCP congestion control '%s' refused by the kernel (%s; see "
              "net.ipv4.tcp_allowed_congestion_control); this mesh keeps the kernel's default (%s)",
              purpose_, p_.congestion.c_str(), std::strerror(applied_.congestion_errno),
              applied_.congestion.empty() ? "?" : applied_.congestion.c_str());
  }
  const std::string cc =
      applied_.congestion.empty() ? "" : ", congestion control " + applied_.congestion;
  const std::string rto = applied_.rto_max_ms > 0 ? ", retransmission timeout at most " +
                                                        std::to_string(applied_.rto_max_ms) + " ms"
                                                  : ", retransmission timeout uncapped (the kernel "
                                                    "refused TCP_RTO_MAX_MS: before Linux 6.15)";
  int partners = 0;
  for (int q = 0; q < p_.size; ++q) partners += q != p_.rank && now(q) ? 1 : 0;
  if (partners == p_.size - 1) {
    RCOLL_LOG(kInfo, "%s: connected to all %d peers over %s (%s%s%s)", purpose_, partners,
              p_.transport.c_str(), iface_.name.c_str(), cc.c_str(), rto.c_str());
  } else {
    RCOLL_LOG(kInfo,
              "%s: connected to its %d partners of %d peers over %s (%s%s%s); %d more dialled in "
              "early, the rest connect on first use",
              purpose_, partners, p_.size - 1, p_.transport.c_str(), iface_.name.c_str(),
              cc.c_str(), rto.c_str(), early_);
  }
  return std::move(socks_);
}

Status MeshBuilder::report_missing() const {
  std::string missing;
  int first_missing = -1;
  for (int peer = 0; peer < p_.size; ++peer) {
    if (peer == p_.rank || socks_[peer] || !now(peer)) continue;
    if (first_missing < 0) first_missing = peer;
    missing += "\n  rank " + std::to_string(peer) + ": ";
    if (peer < p_.rank) {
      for (auto& d : dials_) {
        if (d->peer != peer) continue;
        missing += "dialling " + d->ep.address().to_string() + ":" + std::to_string(d->ep.port()) +
                   (d->ifname.empty() ? "" : " (its interface " + d->ifname + ")");
      }
      missing += last_error_[peer].empty() ? "; no answer" : "; " + last_error_[peer];
    } else {
      missing +=
          "never connected to this rank's listener " + iface_.address + ":" + std::to_string(port_);
    }
  }
  return Status(ErrorCode::kPeerUnreachable, context(first_missing),
                "rank " + std::to_string(p_.rank) + " (interface " + iface_.name + " " +
                    iface_.address + ") could not connect to " + std::to_string(pending_) +
                    " peer(s) within the connect deadline:" + missing +
                    "\n  check RCOLL_SOCKET_IFNAME and that the ranks can reach each other");
}

}  // namespace

void apply_mesh_socket_options(int fd, const MeshParams& p) { (void)set_socket_options(fd, p); }

FrameHeader mesh_hello(FrameType type, const MeshParams& p) {
  FrameHeader h;
  h.type = type;
  h.epoch = p.epoch;
  h.root = p.rank;
  h.count = static_cast<uint64_t>(p.size);
  h.op_seq = job_token_hash(p.job_token);
  return h;
}

std::string remote_address(const tcp::socket& s) {
  error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "?";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

MeshListener& MeshListener::operator=(MeshListener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    address_ = std::move(other.address_);
  }
  return *this;
}

MeshListener::~MeshListener() {
  if (fd_ >= 0) ::close(fd_);
}

int MeshListener::release() { return std::exchange(fd_, -1); }

Result<MeshListener> listen_for_mesh(const MeshParams& p) {
  auto iface =
      select_interface(list_interfaces(), p.ifname_spec, p.prefer_loopback, p.route_address);
  const ErrorContext at{p.rank, -1, 0, p.epoch, p.transport};
  if (!iface.ok()) return Status(iface.status().code(), at, iface.status().message());
  asio::io_context io;
  tcp::acceptor acceptor(io);
  error_code ec;
  tcp::endpoint listen_ep(asio::ip::make_address(iface.value().address, ec), 0);
  if (!ec) acceptor.open(listen_ep.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(listen_ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(ErrorCode::kTransport, at,
                  "cannot listen on interface " + iface.value().name + " (" +
                      iface.value().address + ") for " + p.purpose + ": " + ec.message());
  }
  const uint16_t port = acceptor.local_endpoint().port();
  return MeshListener(acceptor.release(), iface.value().address + " " + std::to_string(port) + " " +
                                              iface.value().name);
}

StoreExchange address_exchange(Store& store, const std::string& prefix, int size) {
  return StoreExchange(store, prefix, size, all_published, pack_values);
}

Result<PartialMesh> build_partial_tcp_mesh(asio::io_context& io, const MeshParams& p) {
  auto iface =
      select_interface(list_interfaces(), p.ifname_spec, p.prefer_loopback, p.route_address);
  if (!iface.ok()) {
    if (p.listen_fd >= 0) ::close(p.listen_fd);
    return Status(iface.status().code(), ErrorContext{p.rank, -1, 0, p.epoch, p.transport},
                  iface.status().message());
  }
  return build_partial_tcp_mesh(io, p, iface.value());
}

Result<MeshSockets> build_tcp_mesh(asio::io_context& io, const MeshParams& p) {
  auto built = build_partial_tcp_mesh(io, p);
  if (!built.ok()) return built.status();
  return std::move(built.value().sockets);
}

Result<PartialMesh> build_partial_tcp_mesh(asio::io_context& io, const MeshParams& p,
                                           const NetInterface& iface) {
  if (p.size <= 1) {  // no peers, no store needed
    PartialMesh none;
    none.sockets.resize(static_cast<size_t>(std::max(p.size, 0)));
    return none;
  }
  return MeshBuilder(io, p, iface).build_partial();
}

Result<MeshSockets> build_tcp_mesh(asio::io_context& io, const MeshParams& p,
                                   const NetInterface& iface) {
  auto built = build_partial_tcp_mesh(io, p, iface);
  if (!built.ok()) return built.status();
  return std::move(built.value().sockets);
}

}  // namespace rcoll
