#include "transports/tcp/tcp_transport.h"

#include <boost/asio.hpp>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "rcoll/types.h"
#include "runtime/log.h"
#include "transports/tcp/interfaces.h"
#include "transports/tcp/mesh.h"

namespace rcoll {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// Asio's transfer_all moves at most 64 KiB per read/write call, each a trip
// through the reactor: a 128 KiB frame took 2+ wake-ups per side and capped a
// loopback stream near 2 GB/s. This lets one call move everything the socket
// buffer holds.
struct TransferAll {
  size_t operator()(const error_code& ec, size_t) const { return ec ? 0 : size_t{1} << 30; }
};

std::string endpoint_string(const tcp::socket& s) {
  error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "?";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, uint32_t epoch, std::chrono::microseconds spin)
      : rank_(rank), size_(size), epoch_(epoch), spin_(spin), work_(asio::make_work_guard(io_)), peers_(size) {}

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
    if (completions_ == before && spin_.count() > 0) {
      // Poll a little first: waking from epoll costs more than a short frame
      // takes to arrive. Yield between polls: on an oversubscribed host the
      // peer we wait for needs this core.
      const auto spin_until = std::chrono::steady_clock::now() + spin_;
      while (completions_ == before && std::chrono::steady_clock::now() < spin_until) {
        sched_yield();
        io_.poll();
      }
    }
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
    asio::async_write(*pr.socket, bufs, TransferAll{}, [this, peer](const error_code& ec, size_t n) {
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
    asio::async_read(*pr.socket, asio::buffer(pr.rx), TransferAll{}, [this, peer](const error_code& ec, size_t) {
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
    asio::async_read(*pr.socket, asio::buffer(item.dst, h.payload_bytes), TransferAll{},
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
    return match_frame(want, got, ctx);
  }

  Status io_status(int peer, const error_code& ec, const char* what) const {
    // A closed connection is not proof of a dead process (the peer may have
    // aborted, or the link failed): the liveness channel tells which.
    const bool closed = ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
    const ErrorCode code = ec == asio::error::operation_aborted ? ErrorCode::kAborted : ErrorCode::kTransport;
    return Status(code, context(peer),
                  std::string(what) + " rank " + std::to_string(peer) + " (" + peers_[peer].address +
                      ") failed: " + ec.message() + (closed ? "; the connection was closed by the peer or the network" : ""));
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
      RCOLL_LOG(kInfo, "%s", why.to_string().c_str());
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
  std::chrono::microseconds spin_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::vector<Peer> peers_;
  uint64_t completions_ = 0;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  bool closed_ = false;
  bool aborting_ = false;

};

}  // namespace

// Builds the full mesh for one epoch (transports/tcp/mesh.h): every pair
// connected, each connection's hello (rank, world size, epoch, job-token hash)
// checked, strangers and ranks of another job or epoch refused.
Status TcpTransport::establish(const TcpConnectParams& p, const NetInterface& iface) {
  MeshParams m;
  m.rank = rank_;
  m.size = size_;
  m.epoch = epoch_;
  m.store = p.store;
  m.key_prefix = "tcp/" + std::to_string(p.epoch) + "/";
  m.ifname_spec = p.ifname_spec;
  m.prefer_loopback = p.prefer_loopback;
  m.route_address = p.route_address;
  m.job_token = p.job_token;
  m.socket_buffer_bytes = p.socket_buffer_bytes;
  // On loopback BBR paces each flow at the rate it last measured, which a
  // bursty, application-limited stream keeps underestimating; reno sends what
  // the window allows. Measured (bench/tcp_congestion.sh, 2 ranks): allreduce
  // 1.38-1.47x and broadcast 1.50-2.01x busbw at 16-64 MiB with reno, allgather
  // 1.03x; 4 ranks 1.15-1.64x from 4 MiB.
  if (p.congestion == "auto") {
    m.congestion = iface.loopback ? "reno" : "";
  } else if (p.congestion != "default") {
    m.congestion = p.congestion;
  }
  m.deadline = p.deadline;
  m.purpose = "epoch " + std::to_string(p.epoch);
  auto socks = build_tcp_mesh(io_, m, iface);
  if (!socks.ok()) return socks.status();
  for (int peer = 0; peer < size_; ++peer) {
    auto& sock = socks.value()[peer];
    if (!sock) continue;
    peers_[peer].address = endpoint_string(*sock);
    peers_[peer].socket = std::move(sock);
  }
  return Status();
}

Result<std::unique_ptr<Transport>> connect_tcp_transport(const TcpConnectParams& p) {
  auto t = std::make_unique<TcpTransport>(p.rank, p.size, p.epoch, p.spin);
  if (p.size > 1) {
    auto all = list_interfaces();
    auto iface = select_interface(all, p.ifname_spec, p.prefer_loopback, p.route_address);
    if (!iface.ok()) {
      return Status(iface.status().code(), ErrorContext{p.rank, -1, 0, p.epoch, "tcp"},
                    iface.status().message());
    }
    if (Status s = t->establish(p, iface.value()); !s.ok()) return s;
  }
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace rcoll
