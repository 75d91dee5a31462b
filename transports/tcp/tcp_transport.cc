#include "transports/tcp/tcp_transport.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/ring_queue.h"
#include "rcoll/types.h"
#include "transports/tcp/interfaces.h"
#include "transports/tcp/mesh.h"
#include "transports/tcp/on_demand_links.h"

namespace rcoll {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// Asio builds the mesh of this rank's partners (transports/tcp/mesh.h); the
// other peers connect on first use (transports/tcp/on_demand_links.h). The
// data path moves bytes with non-blocking sendmsg/recv on the connected
// sockets, driven by progress() on the one thread that owns the transport,
// and sleeps in ppoll only once polling found nothing for a while. Measured against the Asio
// reactor path it replaced (async_read/async_write, one epoll_wait per poll,
// header and payload read separately): see bench/RESULTS.md.
class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, uint32_t epoch, std::chrono::microseconds spin)
      : rank_(rank), size_(size), epoch_(epoch), spin_(spin), peers_(size) {}

  ~TcpTransport() override { shutdown(Status(ErrorCode::kClosed, "transport destroyed"), false); }

  const char* name() const override { return "tcp"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint32_t epoch() const override { return epoch_; }
  uint64_t bytes_sent() const override { return bytes_sent_; }
  uint64_t bytes_received() const override { return bytes_received_; }
  Clock::duration retransmission_wait() const override { return retransmission_wait_; }

  Status establish(const TcpConnectParams& p, const NetInterface& iface);

  void post_send(int peer, const FrameHeader& header, const void* data, Request* req) override {
    req->state = Request::State::kPending;
    if (Status s = check_peer(peer); !s.ok()) return fail_request(req, std::move(s));
    Peer& pr = peers_[peer];
    pr.sendq.push_back(SendItem{encode(header), static_cast<const char*>(data), header.payload_bytes, req});
    if (pr.fd < 0) {
      // Not connected yet: the frame waits for the dial's ack.
      if (links_) links_->want(peer);
      return;
    }
    // The frame leaves now if the socket has room: no wait for the next poll.
    if (pr.sendq.size() == 1) send_some(peer);
  }

  void post_recv(int peer, const FrameHeader& expected, void* dst, Request* req) override {
    queue_recv(peer, RecvItem{expected, static_cast<char*>(dst), req, false});
  }

  void post_background_recv(int peer, const FrameHeader& expected, Request* req) override {
    queue_recv(peer, RecvItem{expected, nullptr, req, true});
  }

  void progress(Deadline until) override {
    const uint64_t before = completions_;
    // Poll a little before sleeping: waking from ppoll costs more than a short
    // frame takes to arrive. Yield between polls: on an oversubscribed host
    // the peer we wait for needs this core.
    Clock::time_point spin_until = Clock::now() + spin_;
    for (;;) {
      const bool moved = move_bytes();
      if (completions_ != before) return;
      const Clock::time_point now = Clock::now();
      if (!until.is_never() && now >= until.time()) return;
      if (moved) {
        spin_until = now + spin_;
        continue;
      }
      if (now < spin_until) {
        sched_yield();
        continue;
      }
      sleep_until_ready(until);
    }
  }

  void abort(const Status& why) override { shutdown(why, true); }

  void break_link(int peer) override {
    // A peer not connected yet fails as well: its connection is the one lost.
    if (peer < 0 || peer >= size_ || peer == rank_) return;
    fail_peer(peer, Status(ErrorCode::kTransport, context(peer),
                           "link to rank " + std::to_string(peer) + " closed by fault injection"));
  }

 private:
  // Frames whose payload is at most this are read together with their header
  // (and whatever follows) into the peer's inbox in one call, then copied out;
  // larger payloads go straight from the socket into the caller's buffer.
  static constexpr size_t kInlinePayload = 8u << 10;
  static constexpr size_t kInboxBytes = 32u << 10;
  // Frames gathered into one sendmsg.
  static constexpr size_t kMaxSendFrames = 16;

  struct SendItem {
    FrameBytes header;
    const char* data;
    size_t bytes;
    Request* req;
  };
  struct RecvItem {
    FrameHeader expected;
    char* dst;
    Request* req;
    bool background;  // post_background_recv
  };
  struct Peer {
    int fd = -1;  // -1: not connected yet (error ok) or failed (error set)
    std::string address;
    RingQueue<SendItem> sendq;
    size_t sent = 0;  // bytes of the front frame (header included) already written
    RingQueue<RecvItem> recvq;
    size_t foreground_recvs = 0;  // of recvq, those not posted by post_background_recv
    // Bytes read but not yet consumed: [inbox_begin, inbox_end).
    std::vector<char> inbox;
    size_t inbox_begin = 0;
    size_t inbox_end = 0;
    bool in_payload = false;  // the front receive's header is in; its payload is arriving
    size_t payload_got = 0;
    Status error;  // set once: every later request on this peer fails with it
  };

  ErrorContext context(int peer) const {
    return ErrorContext{rank_, peer, 0, static_cast<int64_t>(epoch_), "tcp"};
  }

  Status check_peer(int peer) {
    if (peer < 0 || peer >= size_ || peer == rank_) {
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

  void queue_recv(int peer, RecvItem item) {
    item.req->state = Request::State::kPending;
    if (Status s = check_peer(peer); !s.ok()) return fail_request(item.req, std::move(s));
    if (!item.background) ++peers_[peer].foreground_recvs;
    peers_[peer].recvq.push_back(item);
  }

  // One pass over every peer with work queued; true if any bytes moved. A
  // peer whose receives are all background ones (completion credits, posted
  // a period or more before they are waited for) is read only on every
  // kBackgroundPollEvery-th pass and on the pass after a sleep: otherwise a
  // rank waiting on one peer would make a failing recv call on every other
  // peer with a credit pending, each pass. 4 ranks on 2 CPUs, TCP, 4 KiB
  // eager broadcasts back to back: ranks 1 and 2 of the chain made 2.4 and
  // 0.8 such calls per op, 0.2 and 0.1 with this (bench/RESULTS.md, stop 24).
  bool move_bytes() {
    const bool background = poll_background_ || ++passes_ % kBackgroundPollEvery == 0;
    poll_background_ = false;
    bool moved = false;
    // Handshakes of connections on first use, on every pass while one is under
    // way; the listener as often as background receives.
    if (links_ && (background || links_->busy())) moved |= move_links(background);
    for (int p = 0; p < size_; ++p) {
      Peer& pr = peers_[p];
      if (pr.fd < 0) continue;
      if (!pr.sendq.empty()) moved |= send_some(p);
      // A header already read into the inbox costs no call to take, and no
      // ppoll would wake for it.
      const bool buffered = pr.inbox_end - pr.inbox_begin >= kFrameHeaderBytes;
      if (!pr.recvq.empty() && (pr.foreground_recvs > 0 || background || buffered))
        moved |= recv_some(p);
    }
    return moved;
  }

  // Writes as much of the queued frames as the socket takes, several frames
  // per call; true if any bytes moved.
  bool send_some(int peer) {
    Peer& pr = peers_[peer];
    bool moved = false;
    while (!pr.sendq.empty()) {
      iovec iov[2 * kMaxSendFrames];
      size_t n = 0;
      size_t skip = pr.sent;
      for (size_t i = 0; i < pr.sendq.size(); ++i) {
        const SendItem& item = pr.sendq[i];
        if (n + 2 > std::size(iov)) break;
        auto add = [&](const void* p, size_t len) {
          if (skip >= len) {
            skip -= len;
            return;
          }
          iov[n++] = iovec{const_cast<char*>(static_cast<const char*>(p)) + skip, len - skip};
          skip = 0;
        };
        add(item.header.data(), item.header.size());
        if (item.bytes > 0) add(item.data, item.bytes);
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      const ssize_t k = ::sendmsg(pr.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        fail_peer(peer, io_status(peer, errno, "sending to"));
        return true;
      }
      moved = true;
      bytes_sent_ += static_cast<uint64_t>(k);
      size_t written = pr.sent + static_cast<size_t>(k);
      while (!pr.sendq.empty()) {
        const size_t frame = kFrameHeaderBytes + pr.sendq.front().bytes;
        if (written < frame) break;
        written -= frame;
        Request* done = pr.sendq.front().req;
        pr.sendq.pop_front();
        complete_request(done);
      }
      pr.sent = written;
    }
    return moved;
  }

  // Reads for the queued receives, in order, as far as the socket has bytes;
  // true if any bytes moved.
  bool recv_some(int peer) {
    Peer& pr = peers_[peer];
    bool moved = false;
    while (!pr.recvq.empty()) {
      RecvItem& item = pr.recvq.front();
      if (pr.in_payload) {
        const size_t want = item.expected.payload_bytes - pr.payload_got;
        const ssize_t k = ::recv(pr.fd, item.dst + pr.payload_got, want, MSG_DONTWAIT);
        if (const Read r = judge_read(peer, k); r != Read::kBytes) return moved || r == Read::kFailed;
        moved = true;
        pr.payload_got += static_cast<size_t>(k);
        if (pr.payload_got == item.expected.payload_bytes) finish_recv(peer);
        continue;
      }
      if (pr.inbox_end - pr.inbox_begin >= kFrameHeaderBytes) {
        if (!take_header(peer)) return true;
        continue;
      }
      // Not a whole header yet. A small frame is read with its header (and
      // whatever is behind it) in one call; for a large one, just the header.
      if (pr.inbox_begin > 0) {
        std::memmove(pr.inbox.data(), pr.inbox.data() + pr.inbox_begin, pr.inbox_end - pr.inbox_begin);
        pr.inbox_end -= pr.inbox_begin;
        pr.inbox_begin = 0;
      }
      const size_t room = item.expected.payload_bytes <= kInlinePayload ? pr.inbox.size() - pr.inbox_end
                                                                         : kFrameHeaderBytes - pr.inbox_end;
      const ssize_t k = ::recv(pr.fd, pr.inbox.data() + pr.inbox_end, room, MSG_DONTWAIT);
      if (const Read r = judge_read(peer, k); r != Read::kBytes) return moved || r == Read::kFailed;
      moved = true;
      pr.inbox_end += static_cast<size_t>(k);
    }
    return moved;
  }

  // What one recv did. kFailed: EOF or an error, and the peer is failed.
  enum class Read { kBytes, kNothing, kFailed };
  Read judge_read(int peer, ssize_t k) {
    if (k > 0) {
      bytes_received_ += static_cast<uint64_t>(k);
      return Read::kBytes;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Read::kNothing;
    fail_peer(peer, io_status(peer, k == 0 ? 0 : errno, "receiving from"));
    return Read::kFailed;
  }

  // Decodes the header at the front of the inbox for the front receive; false
  // if that failed the peer.
  bool take_header(int peer) {
    Peer& pr = peers_[peer];
    auto decoded = decode_frame_header(reinterpret_cast<const uint8_t*>(pr.inbox.data() + pr.inbox_begin),
                                       kFrameHeaderBytes);
    if (!decoded.ok()) {
      fail_peer(peer, Status(ErrorCode::kTransport, context(peer),
                             "corrupt frame from rank " + std::to_string(peer) + " (" + pr.address +
                                 "): " + decoded.status().message() + "; closing the connection"));
      return false;
    }
    pr.inbox_begin += kFrameHeaderBytes;
    const FrameHeader& h = decoded.value();
    RecvItem& item = pr.recvq.front();
    if (h.type == FrameType::kAbort) {
      fail_peer(peer, Status(ErrorCode::kAborted, context(peer),
                             "rank " + std::to_string(peer) + " aborted epoch " + std::to_string(h.epoch)));
      return false;
    }
    if (Status s = match(peer, item.expected, h); !s.ok()) {
      fail_peer(peer, std::move(s));
      return false;
    }
    // Whatever of the payload came in with the header.
    const size_t have = std::min<size_t>(pr.inbox_end - pr.inbox_begin, h.payload_bytes);
    if (have > 0) std::memcpy(item.dst, pr.inbox.data() + pr.inbox_begin, have);
    pr.inbox_begin += have;
    if (pr.inbox_begin == pr.inbox_end) pr.inbox_begin = pr.inbox_end = 0;
    if (have == h.payload_bytes) {
      finish_recv(peer);
    } else {
      pr.in_payload = true;
      pr.payload_got = have;
    }
    return true;
  }

  void finish_recv(int peer) {
    Peer& pr = peers_[peer];
    pr.in_payload = false;
    pr.payload_got = 0;
    Request* done = pr.recvq.front().req;
    if (!pr.recvq.front().background) --pr.foreground_recvs;
    pr.recvq.pop_front();
    complete_request(done);
  }

  // Takes the connections made on first use, or fails the peers that could
  // not be reached; true if anything moved.
  bool move_links(bool look_at_listener) {
    link_events_.clear();
    const bool moved = links_->poll(look_at_listener, &link_events_);
    for (OnDemandLinks::Event& e : link_events_) {
      if (e.fd < 0) {
        fail_peer(e.peer, std::move(e.error));
        continue;
      }
      Peer& pr = peers_[e.peer];
      if (!pr.error.ok()) {  // failed meanwhile (break_link)
        ::close(e.fd);
        continue;
      }
      adopt(e.peer, e.fd);
      if (!pr.sendq.empty()) send_some(e.peer);
    }
    return moved;
  }

  // `fd` (non-blocking, connected, its hello done) is the link to `peer` from now on.
  void adopt(int peer, int fd) {
    Peer& pr = peers_[peer];
    pr.fd = fd;
    pr.address = socket_peer_address(fd);
    pr.inbox.resize(kInboxBytes);
    // The mesh capped the retransmission timeout where the kernel allows it
    // (an uncapped one, 120 s, bounds nothing worth waiting for).
    int rto_max_ms = 0;
    socklen_t len = sizeof(rto_max_ms);
    if (getsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &rto_max_ms, &len) == 0 && rto_max_ms > 0 &&
        rto_max_ms <= kTcpRtoMaxMs)
      retransmission_wait_ = std::max(retransmission_wait_, Clock::duration(Millis(rto_max_ms)));
  }

  // Sleeps until a socket with work queued is ready, or `until`.
  void sleep_until_ready(Deadline until) {
    pollfds_.clear();
    for (const Peer& pr : peers_) {
      if (!pr.error.ok() || pr.fd < 0) continue;
      short events = 0;
      if (!pr.sendq.empty()) events |= POLLOUT;
      if (!pr.recvq.empty()) events |= POLLIN;
      if (events != 0) pollfds_.push_back(pollfd{pr.fd, events, 0});
    }
    if (links_) {
      links_->add_poll_fds(&pollfds_);
      until = links_->wake_by(until);
    }
    timespec ts{};
    timespec* timeout = nullptr;
    if (!until.is_never()) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until.remaining()).count();
      ts.tv_sec = static_cast<time_t>(left / 1000000000);
      ts.tv_nsec = static_cast<long>(left % 1000000000);
      timeout = &ts;
    }
    ::ppoll(pollfds_.data(), pollfds_.size(), timeout, nullptr);
    // It may have woken for a background receive's frame.
    poll_background_ = true;
  }

  // Does the arriving frame belong where the receiver expects it?
  Status match(int peer, const FrameHeader& want, const FrameHeader& got) const {
    // The op's number on this rank is the runtime's to fill in (AlgoContext::fail).
    return match_frame(want, got, context(peer));
  }

  // `err` 0: the peer closed the connection (EOF).
  Status io_status(int peer, int err, const char* what) const {
    // A closed connection is not proof of a dead process (the peer may have
    // aborted, or the link failed): the liveness channel tells which.
    const bool closed = err == 0 || err == ECONNRESET || err == EPIPE;
    const std::string reason = err == 0 ? "end of stream" : std::strerror(err);
    return Status(ErrorCode::kTransport, context(peer),
                  std::string(what) + " rank " + std::to_string(peer) + " (" + peers_[peer].address +
                      ") failed: " + reason + (closed ? "; the connection was closed by the peer or the network" : ""));
  }

  // A failure this side detected (not an I/O error from the peer) is announced
  // with an abort frame first, so the peer reports "rank X aborted" rather than
  // a dead process. Best effort and non-blocking; skipped mid-frame.
  void send_abort_notice(Peer& pr) {
    if (pr.fd < 0 || pr.sent > 0) return;
    FrameHeader notice;
    notice.type = FrameType::kAbort;
    notice.epoch = epoch_;
    notice.root = rank_;
    const FrameBytes bytes = encode(notice);
    [[maybe_unused]] ssize_t ignored = ::send(pr.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
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
    if (pr.fd >= 0) {
      ::shutdown(pr.fd, SHUT_RDWR);
      ::close(pr.fd);
    }
    pr.fd = -1;
    if (links_) links_->forget(peer);
    // Requests are completed after the queues are emptied: a completion may
    // let the caller post again.
    RingQueue<SendItem> sends;
    RingQueue<RecvItem> recvs;
    sends.swap(pr.sendq);
    recvs.swap(pr.recvq);
    pr.foreground_recvs = 0;
    pr.sent = 0;
    pr.in_payload = false;
    pr.inbox_begin = pr.inbox_end = 0;
    for (size_t i = 0; i < sends.size(); ++i) fail_request(sends[i].req, why);
    for (size_t i = 0; i < recvs.size(); ++i) fail_request(recvs[i].req, why);
  }

  void shutdown(const Status& why, bool log) {
    if (closed_) return;
    closed_ = true;
    // One line for the whole data plane, not one per peer (63 at 64 ranks).
    int open = 0;
    for (const Peer& pr : peers_) open += pr.fd >= 0 && pr.error.ok() ? 1 : 0;
    if (log && open > 0) {
      RCOLL_LOG(kInfo, "%s; closing the links to %d peer%s of epoch %u", why.to_string().c_str(),
                open, open == 1 ? "" : "s", epoch_);
    }
    // fail_peer announces the abort to every peer still connected (quietly:
    // aborting_, the line above said it), an abort a peer caused as well: a
    // peer told so knows that the failed epoch's key is in the store, or will
    // be, and sets it no more (CommunicatorImpl::announce), where an end of
    // stream (the connection closed with no frame) proves nothing.
    aborting_ = true;
    const bool announce = log && why.code() != ErrorCode::kPeerDead;
    if (links_) links_->close();
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      if (announce && peers_[p].error.ok()) send_abort_notice(peers_[p]);
      fail_peer(p, why);
    }
  }

  int rank_;
  int size_;
  uint32_t epoch_;
  std::chrono::microseconds spin_;
  static constexpr uint64_t kBackgroundPollEvery = 32;
  uint64_t passes_ = 0;
  bool poll_background_ = false;
  asio::io_context io_;  // builds the mesh; the data path does not use it
  std::vector<Peer> peers_;
  std::unique_ptr<OnDemandLinks> links_;  // null for a group of one
  std::vector<OnDemandLinks::Event> link_events_;
  std::vector<pollfd> pollfds_;
  uint64_t completions_ = 0;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  Clock::duration retransmission_wait_{};  // the connections' retransmission timeout cap, if set
  bool closed_ = false;
  bool aborting_ = false;
};

}  // namespace

// Connects this rank's partners for one epoch (transports/tcp/mesh.h), each
// connection's hello (rank, world size, epoch, job-token hash) checked,
// strangers and ranks of another job or epoch refused; the listener stays
// open for the peers that connect on first use.
Status TcpTransport::establish(const TcpConnectParams& p, const NetInterface& iface) {
  MeshParams m;
  m.rank = rank_;
  m.size = size_;
  m.epoch = epoch_;
  m.store = p.store;
  m.key_prefix = p.key_prefix.empty() ? "tcp/" + std::to_string(p.epoch) + "/" : p.key_prefix;
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
  m.cancelled = p.cancelled;
  m.purpose = "epoch " + std::to_string(p.epoch);
  m.connect_now = eager_partners(rank_, size_);
  m.connect_now[static_cast<size_t>(rank_)] = false;
  const bool reuse = p.kept && p.kept->listener.valid();
  if (reuse) {
    m.listen_fd = ::fcntl(p.kept->listener.fd(), F_DUPFD_CLOEXEC, 0);
    if (m.listen_fd < 0) {
      return Status(ErrorCode::kTransport, context(-1),
                    "epoch " + std::to_string(p.epoch) + ": cannot listen again on " +
                        p.kept->listener.address() + " (kept from epoch " +
                        std::to_string(p.kept->epoch) + "): " + std::strerror(errno));
    }
    m.addresses = p.kept->addresses;
    m.purpose += " (on epoch " + std::to_string(p.kept->epoch) + "'s listener and addresses)";
  }
  auto built = build_partial_tcp_mesh(io_, m, iface);
  if (!built.ok()) return built.status();
  if (p.kept && !reuse) {
    // Kept once the mesh is built: a rank whose build failed keeps none, and
    // the next recovery has every rank publish anew.
    const int fd = ::fcntl(built.value().listener.fd(), F_DUPFD_CLOEXEC, 0);
    if (fd >= 0) {
      p.kept->listener = MeshListener(fd, built.value().listener.address());
      p.kept->addresses = built.value().addresses;
      p.kept->key_prefix = m.key_prefix;
      p.kept->epoch = p.epoch;
    }
  }
  std::vector<bool> connected(static_cast<size_t>(size_), false);
  for (int peer = 0; peer < size_; ++peer) {
    auto& sock = built.value().sockets[peer];
    if (!sock) continue;
    error_code ec;
    const int fd = sock->release(ec);
    if (ec || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK) != 0) {
      const std::string why = ec ? ec.message() : std::strerror(errno);
      if (!ec) ::close(fd);
      return Status(
          ErrorCode::kTransport, context(peer),
          "cannot make the socket to rank " + std::to_string(peer) + " non-blocking: " + why);
    }
    adopt(peer, fd);
    connected[static_cast<size_t>(peer)] = true;
  }
  links_ = std::make_unique<OnDemandLinks>(m, std::move(built.value().addresses),
                                           built.value().listener.release(), connected);
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
