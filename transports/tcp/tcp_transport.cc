#include "transports/tcp/tcp_transport.h"

#include <boost/asio.hpp>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "rcoll/types.h"
#include "runtime/log.h"
#include "transports/tcp/interfaces.h"

namespace rcoll {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

uint64_t token_hash(const std::string& token) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : token) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string endpoint_string(const tcp::socket& s) {
  error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "?";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, uint32_t epoch)
      : rank_(rank), size_(size), epoch_(epoch), work_(asio::make_work_guard(io_)), peers_(size) {}

  ~TcpTransport() override { shutdown(Status(ErrorCode::kClosed, "transport destroyed"), false); }

  const char* name() const override { return "tcp"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint32_t epoch() const override { return epoch_; }
  uint64_t bytes_sent() const override { return bytes_sent_; }
  uint64_t bytes_received() const override { return bytes_received_; }

  Status establish(const TcpConnectParams& p, const NetInterface& iface);

  void post_send(int peer, const FrameHeader& header, const void* data, Request* req) override {
    req->state = Request::State::kPending;
    if (Status s = check_peer(peer); !s.ok()) return fail_request(req, std::move(s));
    Peer& pr = peers_[peer];
    pr.sendq.push_back(SendItem{encode(header), data, header.payload_bytes, req});
    if (!pr.writing) start_write(peer);
  }

  void post_recv(int peer, const FrameHeader& expected, void* dst, Request* req) override {
    req->state = Request::State::kPending;
    if (Status s = check_peer(peer); !s.ok()) return fail_request(req, std::move(s));
    Peer& pr = peers_[peer];
    pr.recvq.push_back(RecvItem{expected, dst, req});
    if (!pr.reading) start_read(peer);
  }

  void progress(Deadline until) override {
    const uint64_t before = completions_;
    if (io_.stopped()) io_.restart();
    // Run everything that is ready without blocking, then block for more only
    // while nothing has completed.
    io_.poll();
    while (completions_ == before && !until.expired()) {
      if (io_.stopped()) io_.restart();
      if (until.is_never()) {
        io_.run_one();
      } else {
        io_.run_one_until(until.time());
      }
    }
  }

  void abort(const Status& why) override { shutdown(why, true); }

  void break_link(int peer) override {
    if (peer < 0 || peer >= size_ || !peers_[peer].socket) return;
    fail_peer(peer, Status(ErrorCode::kTransport, context(peer),
                           "link to rank " + std::to_string(peer) + " closed by fault injection"));
  }

 private:
  struct SendItem {
    FrameBytes header;
    const void* data;
    size_t bytes;
    Request* req;
  };
  struct RecvItem {
    FrameHeader expected;
    void* dst;
    Request* req;
  };
  struct Peer {
    std::unique_ptr<tcp::socket> socket;
    std::string address;
    std::deque<SendItem> sendq;
    std::deque<RecvItem> recvq;
    bool writing = false;
    bool reading = false;
    FrameBytes rx{};
    FrameHeader rx_header;
    Status error;  // set once: every later request on this peer fails with it
  };

  ErrorContext context(int peer) const {
    return ErrorContext{rank_, peer, 0, static_cast<int64_t>(epoch_), "tcp"};
  }

  Status check_peer(int peer) {
    if (peer < 0 || peer >= size_ || peer == rank_ || !peers_[peer].socket) {
      return Status(ErrorCode::kInternal, context(peer), "no connection to rank " + std::to_string(peer));
    }
    if (!peers_[peer].error.ok()) return peers_[peer].error;
    return Status();
  }

  void fail_request(Request* req, Status s) {
    req->status = std::move(s);
    req->state = Request::State::kFailed;
    ++completions_;
  }

  void complete_request(Request* req) {
    req->state = Request::State::kDone;
    ++completions_;
  }

  void start_write(int peer) {
    Peer& pr = peers_[peer];
    pr.writing = true;
    SendItem& item = pr.sendq.front();
    std::array<asio::const_buffer, 2> bufs{asio::buffer(item.header),
                                           asio::buffer(item.data, item.bytes)};
    asio::async_write(*pr.socket, bufs, [this, peer](const error_code& ec, size_t n) {
      Peer& pr = peers_[peer];
      if (!pr.error.ok()) return;  // failed meanwhile; queues already drained
      if (ec) return fail_peer(peer, io_status(peer, ec, "sending to"));
      bytes_sent_ += n;
      complete_request(pr.sendq.front().req);
      pr.sendq.pop_front();
      pr.writing = false;
      if (!pr.sendq.empty()) start_write(peer);
    });
  }

  void start_read(int peer) {
    Peer& pr = peers_[peer];
    pr.reading = true;
    asio::async_read(*pr.socket, asio::buffer(pr.rx), [this, peer](const error_code& ec, size_t) {
      Peer& pr = peers_[peer];
      if (!pr.error.ok()) return;
      if (ec) return fail_peer(peer, io_status(peer, ec, "receiving from"));
      on_header(peer);
    });
  }

  void on_header(int peer) {
    Peer& pr = peers_[peer];
    auto decoded = decode_frame_header(pr.rx.data(), pr.rx.size());
    if (!decoded.ok()) {
      return fail_peer(peer, Status(ErrorCode::kTransport, context(peer),
                                    "corrupt frame from rank " + std::to_string(peer) + " (" +
                                        pr.address + "): " + decoded.status().message() +
                                        "; closing the connection"));
    }
    const FrameHeader& h = decoded.value();
    RecvItem& item = pr.recvq.front();
    if (h.type == FrameType::kAbort) {
      return fail_peer(peer, Status(ErrorCode::kAborted, context(peer),
                                    "rank " + std::to_string(peer) + " aborted epoch " +
                                        std::to_string(h.epoch)));
    }
    if (Status s = match(peer, item.expected, h); !s.ok()) return fail_peer(peer, std::move(s));
    pr.rx_header = h;
    if (h.payload_bytes == 0) return finish_recv(peer);
    asio::async_read(*pr.socket, asio::buffer(item.dst, h.payload_bytes),
                     [this, peer](const error_code& ec, size_t n) {
                       Peer& pr = peers_[peer];
                       if (!pr.error.ok()) return;
                       if (ec) return fail_peer(peer, io_status(peer, ec, "receiving from"));
                       bytes_received_ += n;
                       finish_recv(peer);
                     });
  }

  void finish_recv(int peer) {
    Peer& pr = peers_[peer];
    bytes_received_ += kFrameHeaderBytes;
    complete_request(pr.recvq.front().req);
    pr.recvq.pop_front();
    pr.reading = false;
    if (!pr.recvq.empty()) start_read(peer);
  }

  // Does the arriving frame belong where the receiver expects it?
  Status match(int peer, const FrameHeader& want, const FrameHeader& got) const {
    ErrorContext ctx = context(peer);
    ctx.op_seq = want.op_seq;
    const std::string me = "rank " + std::to_string(rank_);
    const std::string them = "rank " + std::to_string(peer);
    if (got.type != FrameType::kData || got.epoch != epoch_) {
      return Status(ErrorCode::kTransport, ctx,
                    "unexpected frame from " + them + ": " + describe_frame(got) +
                        "; closing the connection");
    }
    if (!got.same_op(want)) {
      if (want.op_kind == OpKind::kSendRecv && got.op_kind == OpKind::kSendRecv &&
          want.op_seq == got.op_seq) {
        return Status(ErrorCode::kInvalidArgument, ctx,
                      me + " posted recv of " + to_string(static_cast<DataType>(want.dtype)) + " x " +
                          std::to_string(want.count) + " from " + them + ", which sent " +
                          to_string(static_cast<DataType>(got.dtype)) + " x " +
                          std::to_string(got.count) + " (p2p seq " + std::to_string(got.op_seq) +
                          "); counts and dtypes of a send and its recv must match");
      }
      // Collective sequence numbers are equal on every rank, so a peer that is
      // already past this op sent its frames for it: they were lost. The same
      // holds within the send/recv sequence. A different op at the same
      // sequence number is a desync.
      const bool same_sequence_space = (got.op_kind == OpKind::kSendRecv) == (want.op_kind == OpKind::kSendRecv);
      if (same_sequence_space && got.op_seq != want.op_seq) {
        return Status(ErrorCode::kTransport, ctx,
                      "frames lost: " + me + " still waits for " + describe_frame(want) + " but " + them +
                          " sent " + describe_frame(got) + "; frames of one of these ops never arrived");
      }
      return Status(ErrorCode::kDesync, ctx,
                    me + " is at " + describe_op(want) + " but " + them + " sent data for " + describe_op(got) +
                        "; every rank must issue the same collectives in the same order");
    }
    if (!got.same_position(want)) {
      return Status(ErrorCode::kTransport, ctx,
                    "frames lost: " + me + " expected " + describe_frame(want) + " from " + them + " but got " +
                        describe_frame(got) + "; the stream to this rank lost data");
    }
    return Status();
  }

  Status io_status(int peer, const error_code& ec, const char* what) const {
    ErrorCode code = ErrorCode::kTransport;
    if (ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::broken_pipe) {
      code = ErrorCode::kPeerDead;
    } else if (ec == asio::error::operation_aborted) {
      code = ErrorCode::kAborted;
    }
    return Status(code, context(peer),
                  std::string(what) + " rank " + std::to_string(peer) + " (" +
                      peers_[peer].address + ") failed: " + ec.message() +
                      (code == ErrorCode::kPeerDead ? "; the peer closed its connection" : ""));
  }

  // A failure this side detected (not an I/O error from the peer) is announced
  // with an abort frame first, so the peer reports "rank X aborted" rather than
  // a dead process. Best effort and non-blocking; skipped mid-frame.
  void send_abort_notice(Peer& pr) {
    if (!pr.socket || pr.writing) return;
    FrameHeader notice;
    notice.type = FrameType::kAbort;
    notice.epoch = epoch_;
    notice.root = rank_;
    const FrameBytes bytes = encode(notice);
    error_code ignored;
    pr.socket->non_blocking(true, ignored);
    pr.socket->write_some(asio::buffer(bytes), ignored);
  }

  void fail_peer(int peer, Status why) {
    Peer& pr = peers_[peer];
    if (!pr.error.ok()) return;
    if (!aborting_) {
      RCOLL_LOG(kWarn, "%s", why.to_string().c_str());
    }
    const bool peer_went_away = why.code() == ErrorCode::kPeerDead || why.code() == ErrorCode::kAborted;
    if (!peer_went_away && !aborting_) send_abort_notice(pr);
    pr.error = why;
    if (pr.socket) {
      error_code ignored;
      pr.socket->shutdown(tcp::socket::shutdown_both, ignored);
      pr.socket->close(ignored);
    }
    for (auto& s : pr.sendq) fail_request(s.req, why);
    for (auto& r : pr.recvq) fail_request(r.req, why);
    pr.sendq.clear();
    pr.recvq.clear();
    pr.writing = pr.reading = false;
  }

  void shutdown(const Status& why, bool log) {
    if (closed_) return;
    closed_ = true;
    aborting_ = !log;
    // fail_peer announces the abort to every peer still connected.
    for (int p = 0; p < size_; ++p) {
      if (peers_[p].socket) fail_peer(p, why);
    }
    // Let the cancelled handlers run; they find the peers failed and do nothing.
    io_.restart();
    io_.poll();
  }

  int rank_;
  int size_;
  uint32_t epoch_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::vector<Peer> peers_;
  uint64_t completions_ = 0;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  bool closed_ = false;
  bool aborting_ = false;

};

void set_socket_options(tcp::socket& s, size_t buffer_bytes) {
  error_code ignored;
  s.set_option(tcp::no_delay(true), ignored);
  s.set_option(asio::socket_base::keep_alive(true), ignored);
  if (buffer_bytes > 0) {
    s.set_option(asio::socket_base::send_buffer_size(static_cast<int>(buffer_bytes)), ignored);
    s.set_option(asio::socket_base::receive_buffer_size(static_cast<int>(buffer_bytes)), ignored);
  }
}

FrameHeader hello_header(FrameType type, const TcpConnectParams& p) {
  FrameHeader h;
  h.type = type;
  h.epoch = p.epoch;
  h.root = p.rank;
  h.count = static_cast<uint64_t>(p.size);
  h.op_seq = token_hash(p.job_token);
  return h;
}

}  // namespace

// Builds the full mesh for one epoch: every rank listens; rank r dials every
// rank below it and accepts every rank above it. Each new connection carries a
// hello (rank, world size, epoch, job-token hash) answered by an ack, so a
// stranger or a rank of another job or epoch is refused before any data moves.
Status TcpTransport::establish(const TcpConnectParams& p, const NetInterface& iface) {
  const std::string key_prefix = "tcp/" + std::to_string(p.epoch) + "/";
  ErrorContext ctx{rank_, -1, 0, static_cast<int64_t>(epoch_), "tcp"};
  error_code ec;
  tcp::acceptor acceptor(io_);
  tcp::endpoint listen_ep(asio::ip::make_address(iface.address, ec), 0);
  if (!ec) acceptor.open(listen_ep.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(listen_ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(ErrorCode::kTransport, ctx,
                  "cannot listen on interface " + iface.name + " (" + iface.address + "): " + ec.message());
  }
  const uint16_t port = acceptor.local_endpoint().port();
  const std::string my_addr = iface.address + " " + std::to_string(port) + " " + iface.name;
  if (Status s = p.store->set(key_prefix + std::to_string(rank_), Bytes(my_addr.begin(), my_addr.end()));
      !s.ok()) {
    return s;
  }
  RCOLL_LOG(kInfo, "epoch %u: listening on %s:%u (interface %s), connecting to %d peers", p.epoch,
            iface.address.c_str(), port, iface.name.c_str(), size_ - 1);

  const uint64_t expected_token = token_hash(p.job_token);
  std::vector<std::string> last_error(size_);
  int pending = size_ - 1;
  auto connected = [&](int peer, std::unique_ptr<tcp::socket> sock) {
    set_socket_options(*sock, p.socket_buffer_bytes);
    peers_[peer].address = endpoint_string(*sock);
    peers_[peer].socket = std::move(sock);
    --pending;
  };

  // Dial lower ranks.
  struct Dial {
    int peer;
    tcp::endpoint ep;
    std::string ifname;
    std::unique_ptr<tcp::socket> sock;
    asio::steady_timer retry;
    FrameBytes out;
    FrameBytes in;
  };
  std::vector<std::unique_ptr<Dial>> dials;
  std::function<void(Dial*)> attempt = [&](Dial* d) {
    d->sock = std::make_unique<tcp::socket>(io_);
    d->sock->async_connect(d->ep, [&, d](const error_code& ec) {
      if (ec) {
        last_error[d->peer] = "connect to " + d->ep.address().to_string() + ":" +
                              std::to_string(d->ep.port()) + " failed: " + ec.message();
        error_code ignored;
        d->sock->close(ignored);
        d->retry.expires_after(std::chrono::milliseconds(20));
        d->retry.async_wait([&, d](const error_code& tec) {
          if (!tec && !p.deadline.expired()) attempt(d);
        });
        return;
      }
      d->out = encode(hello_header(FrameType::kHello, p));
      asio::async_write(*d->sock, asio::buffer(d->out), [&, d](const error_code& ec, size_t) {
        if (ec) {
          last_error[d->peer] = "sending hello failed: " + ec.message();
          return;
        }
        asio::async_read(*d->sock, asio::buffer(d->in), [&, d](const error_code& ec, size_t) {
          if (ec) {
            last_error[d->peer] = "rank " + std::to_string(d->peer) +
                                  " closed the connection during the hello (" + ec.message() +
                                  "): wrong job token or epoch?";
            return;
          }
          auto h = decode_frame_header(d->in.data(), d->in.size());
          if (!h.ok() || h.value().type != FrameType::kHelloAck || h.value().root != d->peer ||
              h.value().epoch != p.epoch) {
            last_error[d->peer] = "bad hello ack from " + d->ep.address().to_string();
            return;
          }
          connected(d->peer, std::move(d->sock));
        });
      });
    });
  };
  for (int peer = 0; peer < rank_; ++peer) {
    auto value = p.store->get(key_prefix + std::to_string(peer), p.deadline.remaining_ms());
    if (!value.ok()) {
      return Status(ErrorCode::kPeerUnreachable, ErrorContext{rank_, peer, 0, epoch_, "tcp"},
                    "rank " + std::to_string(peer) + " never published its address for epoch " +
                        std::to_string(p.epoch) + ": " + value.status().message());
    }
    std::string addr(value.value().begin(), value.value().end());
    std::string host, ifname;
    unsigned port_num = 0;
    {
      size_t a = addr.find(' '), b = addr.find(' ', a + 1);
      host = addr.substr(0, a);
      port_num = static_cast<unsigned>(std::stoul(addr.substr(a + 1, b - a - 1)));
      ifname = b == std::string::npos ? "" : addr.substr(b + 1);
    }
    auto ip = asio::ip::make_address(host, ec);
    if (ec) return Status(ErrorCode::kStore, ctx, "rank " + std::to_string(peer) + " published a bad address '" + addr + "'");
    dials.push_back(std::unique_ptr<Dial>(new Dial{peer, tcp::endpoint(ip, static_cast<uint16_t>(port_num)),
                                                  ifname, nullptr, asio::steady_timer(io_), {}, {}}));
    attempt(dials.back().get());
  }

  // Accept higher ranks; refuse strangers.
  struct Incoming {
    std::unique_ptr<tcp::socket> sock;
    FrameBytes in;
    FrameBytes out;
  };
  std::vector<std::unique_ptr<Incoming>> incoming;
  int to_accept = size_ - 1 - rank_;
  std::function<void()> accept_next = [&]() {
    if (to_accept == 0) return;
    incoming.push_back(std::make_unique<Incoming>());
    Incoming* in = incoming.back().get();
    in->sock = std::make_unique<tcp::socket>(io_);
    acceptor.async_accept(*in->sock, [&, in](const error_code& ec) {
      if (ec) return;
      accept_next();
      asio::async_read(*in->sock, asio::buffer(in->in), [&, in](const error_code& ec, size_t) {
        const std::string from = endpoint_string(*in->sock);
        auto refuse = [&](const std::string& why) {
          RCOLL_LOG(kWarn, "epoch %u: refused connection from %s: %s", p.epoch, from.c_str(), why.c_str());
          error_code ignored;
          in->sock->close(ignored);
        };
        if (ec) return refuse("no hello (" + ec.message() + ")");
        auto h = decode_frame_header(in->in.data(), in->in.size());
        if (!h.ok()) return refuse(h.status().message());
        const FrameHeader& hello = h.value();
        if (hello.type != FrameType::kHello) return refuse("first frame is not a hello");
        if (hello.op_seq != expected_token) return refuse("job token mismatch (a process of another job?)");
        if (hello.epoch != p.epoch) return refuse("hello for epoch " + std::to_string(hello.epoch) + ", this is epoch " + std::to_string(p.epoch));
        if (hello.count != static_cast<uint64_t>(size_)) return refuse("world size " + std::to_string(hello.count) + " differs from " + std::to_string(size_));
        int peer = hello.root;
        if (peer <= rank_ || peer >= size_ || peers_[peer].socket) return refuse("unexpected rank " + std::to_string(peer));
        --to_accept;
        in->out = encode(hello_header(FrameType::kHelloAck, p));
        asio::async_write(*in->sock, asio::buffer(in->out), [&, in, peer](const error_code& ec, size_t) {
          if (ec) {
            last_error[peer] = "sending hello ack failed: " + ec.message();
            ++to_accept;
            accept_next();
            return;
          }
          connected(peer, std::move(in->sock));
        });
      });
    });
  };
  accept_next();

  while (pending > 0 && !p.deadline.expired()) {
    if (io_.stopped()) io_.restart();
    io_.run_one_until(p.deadline.is_never() ? Clock::now() + std::chrono::hours(24) : p.deadline.time());
  }
  // Tear down whatever is still in flight before the locals it references go away.
  error_code ignored;
  acceptor.close(ignored);
  for (auto& d : dials) {
    d->retry.cancel();
    if (d->sock) d->sock->close(ignored);
  }
  for (auto& in : incoming)
    if (in->sock) in->sock->close(ignored);
  io_.restart();
  io_.poll();

  if (pending == 0) {
    RCOLL_LOG(kInfo, "epoch %u: connected to all %d peers over tcp (%s)", p.epoch, size_ - 1, iface.name.c_str());
    return Status();
  }
  std::string missing;
  int first_missing = -1;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || peers_[peer].socket) continue;
    if (first_missing < 0) first_missing = peer;
    missing += "\n  rank " + std::to_string(peer) + ": ";
    if (peer < rank_) {
      for (auto& d : dials)
        if (d->peer == peer) missing += "dialling " + d->ep.address().to_string() + ":" + std::to_string(d->ep.port()) + (d->ifname.empty() ? "" : " (its interface " + d->ifname + ")");
      missing += last_error[peer].empty() ? "; no answer" : "; " + last_error[peer];
    } else {
      missing += "never connected to this rank's listener " + iface.address + ":" + std::to_string(port);
    }
  }
  return Status(ErrorCode::kPeerUnreachable, ErrorContext{rank_, first_missing, 0, epoch_, "tcp"},
                "rank " + std::to_string(rank_) + " (interface " + iface.name + " " + iface.address +
                    ") could not connect to " + std::to_string(pending) + " peer(s) within the connect deadline:" +
                    missing + "\n  check RCOLL_SOCKET_IFNAME and that the ranks can reach each other");
}

Result<std::unique_ptr<Transport>> connect_tcp_transport(const TcpConnectParams& p) {
  auto t = std::make_unique<TcpTransport>(p.rank, p.size, p.epoch);
  if (p.size > 1) {
    auto all = list_interfaces();
    auto iface = select_interface(all, p.ifname_spec, p.prefer_loopback);
    if (!iface.ok()) {
      return Status(iface.status().code(), ErrorContext{p.rank, -1, 0, p.epoch, "tcp"},
                    iface.status().message());
    }
    if (Status s = t->establish(p, iface.value()); !s.ok()) return s;
  }
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace rcoll
