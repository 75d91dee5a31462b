// The liveness side channel (runtime/liveness.h).
//
// One thread runs one io_context. The liveness mesh (transports/tcp/mesh.h,
// keys "liveness/<rank>") connects each rank to its overlay partners (rank +-
// 2^k and rank ^ 2^k, eager_partners in transports/tcp/on_demand_links.h;
// every peer with to_all); a rank it wants
// heartbeats from, or that wants its, is connected on first use. Per
// connection there is a read always pending and a small send queue. Every `interval` a heartbeat
// goes to the heartbeat targets (the ring neighbours, the peers whose watch lease runs, or every
// peer with to_all), and the silence of every peer expected to heartbeat here is checked. How the
// three cases show:
//   dead      a read of an overlay link fails with EOF/reset and no goodbye came
//             first (a failed write, or a link made on first use closing, is no
//             verdict), and a dial to the peer's listener is refused (or not
//             answered within `budget`): the kernel closed the sockets of a
//             process that died, its listener too, so this is immediate; a
//             dial answered is a link that broke between live ranks, made
//             again with no verdict (rejoin()). The rank that saw a death
//             tells the others in a kNotice, passed on over the overlay
//             (O(log P) hops)
//   silent    no heartbeat for `budget` from a neighbour, or from a wanted peer
//             since it was asked, while the connection stays open; a
//             neighbour's silence (and its return) is told to every peer in a
//             kSuspect notice
//   aborted   a kAbort frame, its payload the reason (at most kMaxAbortReason),
//             passed on over the overlay the first time a rank hears of that
//             epoch (`count` - 1 names the rank that announced it; 0: the sender)
// A partner's goodbye is passed on too (a kNotice), so every rank knows who
// left. A clean shutdown sends kGoodbye, half-closes, and reads until each peer has
// closed its side too (or a short linger passes), so the peers see a goodbye
// followed by EOF and report nothing, and no unread data turns the close into a
// reset.
#include "runtime/liveness.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "runtime/store/keys.h"
#include "transports/frame.h"
#include "transports/tcp/mesh.h"
#include "transports/tcp/on_demand_links.h"

namespace rcoll {

const char* to_string(PeerHealth h) {
  switch (h) {
    case PeerHealth::kAlive: return "alive";
    case PeerHealth::kSilent: return "silent";
    case PeerHealth::kDead: return "dead";
  }
  return "invalid-peer-health";
}

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

constexpr size_t kMaxAbortReason = 1024;
constexpr uint16_t kFlagInComm = 1;
constexpr uint16_t kFlagWaitingSend = 2;
constexpr uint16_t kFlagGrouped = 4;
constexpr uint16_t kFlagSuspectSilent = 1;  // a kSuspect notice: silent (else back)
constexpr uint16_t kNoticeDead = 1;         // a kNotice: the rank died
constexpr uint16_t kNoticeLeft = 2;         // a kNotice: the rank said goodbye
// While a connection on first use is under way, its handshake moves this often.
constexpr Millis kHandshakeStep{2};
// The longest watch lease a peer may ask for.
constexpr Millis kMaxLease{600000};
// How long a clean shutdown waits for its goodbyes to go out and for the
// peers to close their side.
constexpr Millis kGoodbyeLinger{250};

long long ms_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<long long>(std::chrono::duration_cast<Millis>(b - a).count());
}

class LivenessImpl final : public Liveness {
 public:
  explicit LivenessImpl(const LivenessParams& p)
      : rank_(p.rank),
        size_(p.size),
        interval_(std::max(p.interval, Millis(1))),
        budget_(p.budget),
        // Immediate heartbeats (set_local) are spaced at least this far apart
        // (at most 5 ms), so a loop of tiny ops cannot turn the side channel
        // into a busy loop.
        min_gap_(std::clamp(interval_ / 20, Millis(1), Millis(5))),
        lease_(std::min<Millis>(2 * std::max(budget_, interval_), kMaxLease)),
        to_all_(p.to_all),
        links_(static_cast<size_t>(p.size)),
        views_(static_cast<size_t>(p.size)),
        wants_(static_cast<size_t>(p.size)),
        overlay_(p.to_all ? std::vector<bool>(static_cast<size_t>(p.size), true)
                          : eager_partners(p.rank, p.size)),
        suspect_told_(static_cast<size_t>(p.size), 0),
        suspect_heard_(static_cast<size_t>(p.size), {0, 0}),
        notice_passed_(static_cast<size_t>(p.size), false),
        abort_heard_(static_cast<size_t>(p.size), -1),
        tick_(io_),
        urgent_timer_(io_),
        linger_(io_),
        handshake_timer_(io_),
        listen_wait_(io_) {
    // The ring neighbours (every peer with to_all) heartbeat to each other
    // for good; with 3 ranks or fewer that is every peer anyway.
    overlay_[static_cast<size_t>(rank_)] = false;
    for (int r = 0; r < size_; ++r) {
      const bool neighbour = r == (rank_ + 1) % size_ || r == (rank_ + size_ - 1) % size_;
      links_[static_cast<size_t>(r)].neighbour = r != rank_ && (to_all_ || neighbour);
    }
  }

  ~LivenessImpl() override {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] { begin_close(); });
    thread_.join();
  }

  Status connect(const LivenessParams& p) {
    MeshParams m;
    m.rank = p.rank;
    m.size = p.size;
    m.epoch = 0;
    m.store = p.store;
    m.key_prefix = keys::liveness();
    m.ifname_spec = p.ifname_spec;
    m.prefer_loopback = p.prefer_loopback;
    m.route_address = p.route_address;
    m.job_token = p.job_token;
    m.deadline = p.connect_deadline;
    m.purpose = "liveness";
    m.listen_fd = p.listen_fd;
    m.addresses = p.addresses;
    m.transport = "liveness";
    m.connect_now = overlay_;
    auto built = build_partial_tcp_mesh(io_, m);
    if (!built.ok()) {
      const Status& s = built.status();
      ErrorContext ctx = s.context();
      ctx.epoch = -1;  // the liveness mesh outlives data-plane epochs
      return Status(s.code(), ctx, "liveness channel: " + s.message());
    }
    const auto now = Clock::now();
    std::vector<bool> connected(static_cast<size_t>(size_), false);
    for (int r = 0; r < size_; ++r) {
      views_[r].last_heard = now;
      if (!built.value().sockets[r]) continue;
      links_[r].socket = std::move(built.value().sockets[r]);
      views_[r].address = remote_address(*links_[r].socket);
      connected[static_cast<size_t>(r)] = true;
    }
    const int listen_fd = built.value().listener.release();
    // The overlay is every peer with to_all (or 3 ranks or fewer): nothing
    // connects on first use, and the listener closes.
    bool every_peer = true;
    for (int r = 0; r < size_; ++r) every_peer = every_peer && (r == rank_ || connected[r]);
    if (every_peer) {
      if (listen_fd >= 0) ::close(listen_fd);
      return Status();
    }
    // The listener is also waited on through its own descriptor (Asio owns that
    // one; the links own the listener).
    const int watch_fd = listen_fd >= 0 ? ::dup(listen_fd) : -1;
    if (watch_fd < 0) {
      if (listen_fd >= 0) ::close(listen_fd);
      return Status(ErrorCode::kTransport, ErrorContext{rank_, -1, 0, -1, "liveness"},
                    std::string("liveness channel: cannot watch the listener for connections on "
                                "first use: ") +
                        std::strerror(errno));
    }
    listen_wait_.assign(watch_fd);
    first_use_ = std::make_unique<OnDemandLinks>(m, std::move(built.value().addresses), listen_fd,
                                                 connected);
    first_use_->set_relinks(true);
    return Status();
  }

  void start_thread() {
    io_.restart();
    for (int r = 0; r < size_; ++r) {
      if (links_[r].socket) start_read(r);
    }
    await_listener();
    last_tick_ = Clock::now();
    next_tick_ = last_tick_;
    on_tick();
    thread_ = std::thread([this] {
      log::set_thread_rank(rank_, size_);
      io_.run();
    });
  }

  void set_local(const RankState& state) override {
    bool urgent;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Only an epoch change is pushed at once. The op state rides the periodic
      // heartbeat: waking this thread twice per op costs small ops latency,
      // and straggler decisions are made on the scale of the liveness budget.
      urgent = state.epoch != local_.epoch;
      local_ = state;
    }
    if (urgent && !urgent_posted_.exchange(true)) asio::post(io_, [this] { on_urgent(); });
  }

  void note_progress(uint64_t bytes_moved) override {
    progress_.store(static_cast<uint16_t>(bytes_moved >> 16), std::memory_order_relaxed);
  }

  PeerView peer(int rank) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (rank < 0 || rank >= size_)
      return PeerView{PeerHealth::kDead, {}, {}, "no such rank", false, false};
    if (rank == rank_) {
      RankState st = local_;
      st.progress = progress_.load(std::memory_order_relaxed);
      return PeerView{PeerHealth::kAlive, st, Clock::now(), "self"};
    }
    PeerView v = views_[rank];
    const Want& w = wants_[rank];
    v.current =
        w.heard && (links_[rank].neighbour || (w.until > Clock::now() && v.last_heard >= w.since));
    return v;
  }

  void want(int rank) override {
    if (rank < -1 || rank >= size_ || rank == rank_) return;
    const auto now = Clock::now();
    bool post = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int r = rank < 0 ? 0 : rank; r < (rank < 0 ? size_ : rank + 1); ++r) {
        if (r == rank_ || links_[r].neighbour) continue;
        post |= ask(r, now);
      }
    }
    if (post) asio::post(io_, [this] { send_watches(); });
  }

  // Asks `r` for another lease of heartbeats, unless more than half of the
  // last one is left (caller holds mu_). True: a watch request is queued
  // (the caller posts send_watches). Only what `r` was asked for is
  // expected of it: a want that renews nothing extends nothing.
  bool ask(int r, Clock::time_point now) {
    Want& w = wants_[r];
    if (w.until - now >= lease_ / 2) return false;
    if (w.until <= now) w.since = now;  // a new spell of wanting: older states are stale
    w.until = now + lease_;
    to_tell_.push_back(r);
    return true;
  }

  // Every peer connected hears it at once; the others from the overlay
  // partners that pass it on.
  void announce_abort(uint32_t epoch, const std::string& reason) override {
    asio::post(io_, [this, epoch, reason] {
      if (closing_) return;
      passed_abort_ = std::max<int64_t>(passed_abort_, epoch);
      send_abort(epoch, rank_, reason, -1, false);
    });
  }

  void set_listener(std::function<void(const LivenessEvent&)> listener) override {
    std::lock_guard<std::mutex> lock(listener_mu_);
    listener_ = std::move(listener);
  }

  int64_t highest_aborted_epoch() const override { return highest_aborted_.load(); }

  void drop_link_for_testing(int peer, bool half_open) override {
    if (peer < 0 || peer >= size_ || peer == rank_) return;
    asio::post(io_, [this, peer, half_open] {
      Link& l = links_[peer];
      if (!l.open()) return;
      if (half_open) {
        ++l.gen;
        error_code ignored;
        l.socket->cancel(ignored);
        forgotten_for_testing_.push_back(std::move(l.socket));
        l.sendq.clear();
        l.writing = false;
      }
      peer_lost(peer, half_open ? "forgotten by a test (the peer's side stays open)"
                                : "dropped by a test");
    });
  }

 private:
  // Everything in Link is touched on the liveness thread only, but for
  // `neighbour`, which is set before the thread starts and never changes.
  struct Link {
    bool neighbour = false;  // heartbeats both ways for good (a ring neighbour, or to_all)
    Clock::time_point watched_until{};  // the peer wants heartbeats from here until then
    bool silent_told = false;           // a neighbour: every peer was told it is silent
    std::unique_ptr<tcp::socket> socket;
    std::deque<std::vector<uint8_t>> sendq;  // abort notices, the goodbye
    std::vector<uint8_t> out;                // the frame being written
    bool writing = false;
    bool heartbeat_due = false;  // a fresh heartbeat goes out after the current write
    bool goodbye_sent = false;
    bool peer_left = false;      // the peer said goodbye
    bool write_failed = false;   // a write failed: nothing more is sent, the read decides
    // Made on first use (a want), not an overlay link: its close is no
    // verdict on the peer (the dialling rank may give it up, or close its
    // communicator before it sends its goodbye there); the overlay partners
    // judge deaths.
    bool on_demand = false;
    // An overlay link that broke without a goodbye, dialled again before any
    // verdict (rejoin()): since `lost_at`, for `lost_why`; `redial` once a
    // dial failed short of a refusal (tried again at the next tick).
    bool rejoining = false;
    bool redial = false;
    int stale_hellos = 0;  // the peer's hellos since this link was made (drive_links)
    uint32_t gen = 0;      // which socket: a handler of an earlier one finds it changed
    Clock::time_point lost_at{};
    std::string lost_why;
    FrameBytes rx{};
    std::vector<uint8_t> payload;
    bool open() const { return socket != nullptr; }
  };

  // What this rank knows of wanting a peer's heartbeats (guarded by mu_).
  struct Want {
    Clock::time_point until{};      // the lease it was last asked for ends then (ask)
    Clock::time_point since{};      // this spell of wanting began: states before are stale
    bool heard = false;             // a heartbeat of its ever arrived
    bool silent_by_notice = false;  // its silence was told by a neighbour of its
  };

  // ---- sending

  void queue_heartbeats() {
    const auto now = Clock::now();
    for (int r = 0; r < size_; ++r) {
      Link& l = links_[r];
      if (!l.open() || l.goodbye_sent || (!l.neighbour && l.watched_until <= now)) continue;
      heartbeat_to(r);
    }
  }

  void heartbeat_to(int r) {
    Link& l = links_[r];
    l.heartbeat_due = true;
    if (!l.writing) start_write(r);
  }

  void send_control(int r, const FrameHeader& h) {
    Link& l = links_[r];
    if (!l.open() && h.type == FrameType::kWatch) {
      // Connected on first use; the watch goes out once it is (adopt_link).
      return dial(r);
    }
    if (!l.open() || l.goodbye_sent) return;
    const FrameBytes b = encode(h);
    l.sendq.emplace_back(b.begin(), b.end());
    if (!l.writing) start_write(r);
  }

  // The watch requests want() queued: each asks its peer for heartbeats for a lease.
  void send_watches() {
    std::vector<int> peers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      peers.swap(to_tell_);
    }
    if (closing_) return;
    FrameHeader h;
    h.type = FrameType::kWatch;
    h.root = rank_;
    h.count = static_cast<uint64_t>(lease_.count());
    for (int r : peers) send_control(r, h);
  }

  // A neighbour of `about` tells every other peer that it turned silent or
  // heartbeats again: its overlay partners, which pass it on.
  void tell_suspect(int about, bool silent, long long silent_ms) {
    if (to_all_ || closing_) return;  // with to_all every rank watches every rank itself
    FrameHeader h;
    h.type = FrameType::kSuspect;
    h.count = static_cast<uint64_t>(about) + 1;
    h.flags = silent ? kFlagSuspectSilent : 0;
    h.op_seq = static_cast<uint64_t>(std::max(0LL, silent_ms));
    h.epoch = static_cast<uint32_t>(rank_) + 1;  // the teller
    h.chunk = ++suspect_told_[static_cast<size_t>(about)];
    suspect_heard_[static_cast<size_t>(about)][suspect_side(rank_, about)] = h.chunk;
    pass_on(h, {}, about, -1);
  }

  // Which of `about`'s two ring neighbours `teller` is (0: the next rank).
  size_t suspect_side(int teller, int about) const { return teller == (about + 1) % size_ ? 0 : 1; }

  // Sends `h` (with `payload`) to every overlay partner but `about` and `from`,
  // as this rank's frame.
  void pass_on(FrameHeader h, const std::string& payload, int about, int from) {
    h.root = rank_;
    h.payload_bytes = payload.size();
    const FrameBytes header = encode(h);
    std::vector<uint8_t> frame(header.begin(), header.end());
    frame.insert(frame.end(), payload.begin(), payload.end());
    for (int r = 0; r < size_; ++r) {
      Link& l = links_[r];
      if (r == about || r == from || !overlay_[r] || !l.open() || l.goodbye_sent) continue;
      l.sendq.push_back(frame);
      if (!l.writing) start_write(r);
    }
  }

  // An abort notice of `epoch`, announced by `origin`: to every connected
  // peer (announcing it), or to the overlay partners (`overlay_only`: passing
  // it on), never back to `from`.
  void send_abort(uint32_t epoch, int origin, const std::string& reason, int from,
                  bool overlay_only) {
    FrameHeader h;
    h.type = FrameType::kAbort;
    h.epoch = epoch;
    h.root = rank_;
    h.count = origin == rank_ ? 0 : static_cast<uint64_t>(origin) + 1;
    const size_t n = std::min(reason.size(), kMaxAbortReason);
    h.payload_bytes = n;
    const FrameBytes header = encode(h);
    std::vector<uint8_t> frame(header.begin(), header.end());
    frame.insert(frame.end(), reason.begin(), reason.begin() + static_cast<std::ptrdiff_t>(n));
    for (int r = 0; r < size_; ++r) {
      Link& l = links_[r];
      if (r == from || r == origin || (overlay_only && !overlay_[r]) || !l.open() || l.goodbye_sent)
        continue;
      l.sendq.push_back(frame);
      if (!l.writing) start_write(r);
    }
  }

  // That `about` died (with why) or left, told to the overlay partners.
  void tell_notice(int about, uint16_t kind, uint32_t epoch, const std::string& why, int from) {
    if (to_all_ || closing_ || notice_passed_[static_cast<size_t>(about)]) return;
    notice_passed_[static_cast<size_t>(about)] = true;
    FrameHeader h;
    h.type = FrameType::kNotice;
    h.count = static_cast<uint64_t>(about) + 1;
    h.flags = kind;
    h.epoch = epoch;
    pass_on(h, why.substr(0, kMaxAbortReason), about, from);
  }

  FrameHeader heartbeat() const {
    FrameHeader h;
    h.type = FrameType::kHeartbeat;
    h.root = rank_;
    std::lock_guard<std::mutex> lock(mu_);
    h.op_seq = local_.op_seq;
    h.epoch = local_.epoch;
    h.flags = static_cast<uint16_t>((local_.in_comm ? kFlagInComm : 0) |
                                    (local_.waiting_send ? kFlagWaitingSend : 0) |
                                    (local_.grouped ? kFlagGrouped : 0));
    h.count = static_cast<uint64_t>(local_.waiting_on + 1);  // 0: waits on no one peer
    h.chunk = local_.p2p_seq;
    h.step = progress_.load(std::memory_order_relaxed);
    return h;
  }

  void start_write(int r) {
    Link& l = links_[r];
    if (l.write_failed) return;
    if (!l.sendq.empty()) {
      l.out = std::move(l.sendq.front());
      l.sendq.pop_front();
    } else if (l.heartbeat_due && !l.goodbye_sent) {
      // Encoded now rather than when queued, so it carries the latest state.
      l.heartbeat_due = false;
      const FrameBytes b = encode(heartbeat());
      l.out.assign(b.begin(), b.end());
    } else {
      return;
    }
    l.writing = true;
    asio::async_write(
        *l.socket, asio::buffer(l.out), [this, r, gen = l.gen](const error_code& ec, size_t) {
          Link& l = links_[r];
          if (l.gen != gen) return;  // a socket closed since: writing was cleared with it
          l.writing = false;
          if (!l.open()) return;
          if (ec) {
            if (ec == asio::error::operation_aborted) return;
            // The read always pending on the link gives the verdict: a goodbye
            // sent before the close is still there to read (a reset does not
            // drop what was received), then the end of the stream. A failed
            // write alone (the peer closed after its goodbye, with this rank's
            // frames unread) is no death.
            l.write_failed = true;
            l.sendq.clear();
            RCOLL_LOG(kDebug,
                      "liveness: sending to rank %d failed (%s); its connection's read decides", r,
                      ec.message().c_str());
            return;
          }
          if (l.out.size() >= kFrameHeaderBytes &&
              l.out[4] == static_cast<uint8_t>(FrameType::kGoodbye)) {
            l.goodbye_sent = true;
            error_code ignored;
            l.socket->shutdown(tcp::socket::shutdown_send, ignored);
            return;
          }
          start_write(r);
        });
  }

  // ---- connections on first use

  // Dials `r` (a peer this rank wants heartbeats from) unless it is connected,
  // being connected, gone, or this rank is closing.
  void dial(int r) {
    if (!first_use_ || closing_ || links_[r].open()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (views_[r].health == PeerHealth::kDead) return;
    }
    first_use_->want(r);
    drive_links();
  }

  // Moves the handshakes under way and takes the connections they made; while
  // one is under way, again in kHandshakeStep.
  void drive_links() {
    if (!first_use_ || closing_) return;
    // A vector of this call's own: a rejoin below drives the links again.
    std::vector<OnDemandLinks::Event> events;
    const bool moved = first_use_->poll(true, &events);
    for (OnDemandLinks::Event& e : events) {
      if (e.stale) {
        // The peer dialled again: its side of the link broke, so this one is
        // dead too (unread, or half open): dropped and dialled back, at the
        // second such hello since the link was made. One alone may be the
        // leftover of a dial the peer gave up for this very link (crossed
        // dials: the lower rank's wins); a peer whose side did break dials
        // again (every 20 ms, then every interval, for a budget).
        Link& l = links_[e.peer];
        if (l.open() && ++l.stale_hellos >= 2) {
          peer_lost(e.peer, "rank " + std::to_string(e.peer) +
                                " dialled this rank again: its side of their liveness link broke");
        } else {
          RCOLL_LOG(kDebug,
                    "liveness: rank %d dialled this rank again while their link is %s; refused, "
                    "it dials again if its side broke",
                    e.peer, l.open() ? "open" : "closed here");
        }
        continue;
      }
      if (e.fd < 0 && links_[e.peer].rejoining) {
        rejoin_failed(e.peer, e.error.message(), e.refused);
        continue;
      }
      if (e.fd < 0) {
        // Dialled again at the next asking (a partition may heal).
        first_use_->reset(e.peer);
        RCOLL_LOG(kInfo,
                  "liveness: %s; this rank dials it again when it next asks for its heartbeats, "
                  "and judges its silence meanwhile",
                  e.error.message().c_str());
        continue;
      }
      adopt_link(e.peer, e.fd);
    }
    // A handshake waiting on a peer that does not answer (stopped) is looked
    // at less and less often, down to once an interval.
    handshake_step_ = moved ? kHandshakeStep : std::min<Millis>(2 * handshake_step_, interval_);
    if ((first_use_->busy() || first_use_->backlogged()) && !handshake_armed_) {
      handshake_armed_ = true;
      handshake_timer_.expires_after(handshake_step_);
      handshake_timer_.async_wait([this](const error_code& ec) {
        handshake_armed_ = false;
        if (!ec) drive_links();
      });
    }
  }

  // Wakes when a peer dials this rank's listener.
  void await_listener() {
    if (!listen_wait_.is_open()) return;
    listen_wait_.async_wait(asio::posix::stream_descriptor::wait_read,
                            [this](const error_code& ec) {
                              if (ec || closing_) return;
                              drive_links();
                              await_listener();
                            });
  }

  // `fd` (its hello done) is the connection to `r` from now on.
  void adopt_link(int r, int fd) {
    Link& l = links_[r];
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    error_code ec;
    auto sock = std::make_unique<tcp::socket>(io_);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      sock->assign(local.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
    } else {
      ec = error_code(errno, boost::system::system_category());
    }
    if (ec) {
      ::close(fd);
      RCOLL_LOG(kInfo, "liveness: could not take the connection to rank %d: %s", r,
                ec.message().c_str());
      return;
    }
    l.socket = std::move(sock);
    l.sendq.clear();
    l.writing = l.heartbeat_due = l.goodbye_sent = l.peer_left = l.write_failed = false;
    l.on_demand = true;
    l.stale_hellos = 0;
    if (l.rejoining) {
      // The overlay link again: its close is a verdict as before.
      l.on_demand = false;
      l.rejoining = l.redial = false;
      RCOLL_LOG(
          kWarn,
          "liveness: the link to rank %d broke (%s) and was made again %lld ms later: rank %d "
          "is alive, no verdict",
          r, l.lost_why.c_str(), ms_between(l.lost_at, Clock::now()), r);
    }
    bool wanted = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      views_[r].address = remote_address(*l.socket);
      const auto now = Clock::now();
      wanted = wants_[r].until > now;
      // Its silence counts from now: the dial's time is not the peer's.
      if (wanted && views_[r].health == PeerHealth::kAlive)
        wants_[r].since = std::max(wants_[r].since, now);
    }
    RCOLL_LOG(kDebug, "liveness: connected to rank %d (%s) on first use", r,
              views_address(r).c_str());
    start_read(r);
    if (wanted) {
      FrameHeader h;
      h.type = FrameType::kWatch;
      h.root = rank_;
      h.count = static_cast<uint64_t>(lease_.count());
      send_control(r, h);
    }
  }

  // ---- receiving

  void start_read(int r) {
    Link& l = links_[r];
    asio::async_read(*l.socket, asio::buffer(l.rx),
                     [this, r, gen = l.gen](const error_code& ec, size_t) {
                       if (!links_[r].open() || links_[r].gen != gen) return;
                       if (ec) return link_failed(r, ec, "receiving from");
                       on_frame(r);
                     });
  }

  void on_frame(int r) {
    Link& l = links_[r];
    auto decoded = decode_frame_header(l.rx.data(), l.rx.size());
    if (!decoded.ok()) return protocol_error(r, decoded.status().message());
    const FrameHeader h = decoded.value();
    if (h.root != r) {
      return protocol_error(r, "frame names rank " + std::to_string(h.root) + " as its sender");
    }
    switch (h.type) {
      case FrameType::kHeartbeat:
        on_heartbeat(r, h);
        return start_read(r);
      case FrameType::kGoodbye:
        on_goodbye(r);
        return;
      case FrameType::kWatch:
        if (h.payload_bytes != 0) return protocol_error(r, "watch request with a payload");
        on_watch(r, h);
        return start_read(r);
      case FrameType::kSuspect: {
        if (h.payload_bytes != 0) return protocol_error(r, "suspect notice with a payload");
        const int about = h.count == 0 || h.count > static_cast<uint64_t>(size_)
                              ? -1
                              : static_cast<int>(h.count) - 1;
        const int teller = h.epoch == 0 || h.epoch > static_cast<uint32_t>(size_)
                               ? -1
                               : static_cast<int>(h.epoch) - 1;
        // Only a ring neighbour of the rank watches it (and none does with to_all).
        if (about < 0 || teller < 0 || to_all_ ||
            (about != (teller + 1) % size_ && about != (teller + size_ - 1) % size_)) {
          return protocol_error(r, "suspect notice about rank " +
                                       std::to_string(static_cast<long long>(h.count) - 1) +
                                       " from rank " +
                                       std::to_string(static_cast<long long>(h.epoch) - 1) +
                                       ", which does not watch it");
        }
        // Each teller numbers its notices about a rank: an older one, or one
        // heard already on another path, is neither believed nor passed on.
        uint32_t& heard = suspect_heard_[static_cast<size_t>(about)][suspect_side(teller, about)];
        if (h.chunk > heard) {
          heard = h.chunk;
          pass_on(h, {}, about, r);
          on_suspect(teller, about, (h.flags & kFlagSuspectSilent) != 0,
                     static_cast<long long>(h.op_seq));
        }
        return start_read(r);
      }
      case FrameType::kAbort:
      case FrameType::kNotice: {
        if (h.payload_bytes > kMaxAbortReason) {
          return protocol_error(r, std::string(h.type == FrameType::kAbort ? "abort" : "death") +
                                       " notice with a " + std::to_string(h.payload_bytes) +
                                       "-byte reason");
        }
        if (h.count > static_cast<uint64_t>(size_) ||
            (h.type == FrameType::kNotice &&
             (h.count == 0 || (h.flags != kNoticeDead && h.flags != kNoticeLeft)))) {
          return protocol_error(
              r, "notice about rank " + std::to_string(static_cast<long long>(h.count) - 1));
        }
        if (h.count == static_cast<uint64_t>(rank_) + 1 ||
            (h.type == FrameType::kNotice && h.count == static_cast<uint64_t>(r) + 1)) {
          return protocol_error(r, std::string(h.type == FrameType::kAbort ? "abort" : "death") +
                                       " notice about " +
                                       (h.type == FrameType::kAbort ? "this rank" : "its sender"));
        }
        l.payload.resize(h.payload_bytes);
        asio::async_read(*l.socket, asio::buffer(l.payload),
                         [this, r, h, gen = l.gen](const error_code& ec, size_t) {
                           Link& l = links_[r];
                           if (!l.open() || l.gen != gen) return;
                           if (ec) return link_failed(r, ec, "receiving from");
                           std::string text(l.payload.begin(), l.payload.end());
                           if (h.type == FrameType::kAbort) {
                             const int origin = h.count == 0 ? r : static_cast<int>(h.count) - 1;
                             on_abort(r, origin, h.epoch, std::move(text));
                           } else {
                             on_notice(r, static_cast<int>(h.count) - 1, h.flags, h.epoch,
                                       std::move(text));
                           }
                           start_read(r);
                         });
        return;
      }
      default:
        return protocol_error(r, "unexpected " + describe_frame(h));
    }
  }

  void on_heartbeat(int r, const FrameHeader& h) {
    std::optional<LivenessEvent> event;
    const auto now = Clock::now();
    bool tell_back = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      PeerView& v = views_[r];
      wants_[r].heard = true;
      if (v.health == PeerHealth::kSilent) {
        wants_[r].silent_by_notice = false;
        tell_back = links_[r].silent_told;
        links_[r].silent_told = false;
        const long long silent_ms = ms_between(v.last_heard, now);
        v.health = PeerHealth::kAlive;
        event = LivenessEvent{LivenessEvent::Kind::kPeerBack, r, h.epoch,
                              "heartbeats again after " + std::to_string(silent_ms) + " ms of silence"};
        RCOLL_LOG(kWarn, "liveness: rank %d (%s) heartbeats again after %lld ms of silence (op seq %llu, %s, epoch %u); no longer suspect",
                  r, v.address.c_str(), silent_ms, static_cast<unsigned long long>(h.op_seq),
                  (h.flags & kFlagInComm) ? "in comm" : "in compute", h.epoch);
      }
      v.state.op_seq = h.op_seq;
      v.state.in_comm = (h.flags & kFlagInComm) != 0;
      v.state.waiting_on = h.count > 0 && h.count <= static_cast<uint64_t>(size_) ? static_cast<int>(h.count) - 1 : -1;
      v.state.waiting_send = (h.flags & kFlagWaitingSend) != 0;
      v.state.grouped = (h.flags & kFlagGrouped) != 0;
      v.state.p2p_seq = h.chunk;
      v.state.progress = h.step;
      v.state.epoch = h.epoch;
      v.last_heard = now;
    }
    if (tell_back) tell_suspect(r, false, 0);
    if (event) emit(*event);
  }

  // The peer wants this rank's heartbeats for a lease: one goes out at once.
  void on_watch(int r, const FrameHeader& h) {
    const Millis lease =
        std::min(Millis(static_cast<Millis::rep>(std::min<uint64_t>(h.count, kMaxLease.count()))),
                 kMaxLease);
    links_[r].watched_until = Clock::now() + lease;
    if (!links_[r].goodbye_sent && !closing_) heartbeat_to(r);
  }

  // A neighbour of `about` says it turned silent (or heartbeats again). A rank
  // that hears `about` itself within the budget knows better and keeps its view.
  void on_suspect(int teller, int about, bool silent, long long silent_ms) {
    if (about == rank_ || about == teller) return;
    std::optional<LivenessEvent> event;
    const auto now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      PeerView& v = views_[about];
      Want& w = wants_[about];
      if (v.health == PeerHealth::kDead) return;
      const bool hears_it = w.heard && now - v.last_heard <= budget_;
      if (silent && v.health == PeerHealth::kAlive && !hears_it) {
        v.health = PeerHealth::kSilent;
        w.silent_by_notice = true;
        RCOLL_LOG(kWarn,
                  "liveness: rank %d (a ring neighbour of rank %d) says rank %d is silent: no "
                  "heartbeat for %lld ms (budget %lld ms), last known at op seq %llu, epoch %u; "
                  "its connection is open, so it is suspect, not dead",
                  teller, about, about, silent_ms, static_cast<long long>(budget_.count()),
                  static_cast<unsigned long long>(v.state.op_seq), v.state.epoch);
        event = LivenessEvent{LivenessEvent::Kind::kPeerSilent, about, v.state.epoch,
                              "rank " + std::to_string(teller) + " heard no heartbeat for " +
                                  std::to_string(silent_ms) + " ms"};
      } else if (!silent && v.health == PeerHealth::kSilent && w.silent_by_notice) {
        v.health = PeerHealth::kAlive;
        w.silent_by_notice = false;
        RCOLL_LOG(kWarn,
                  "liveness: rank %d (a ring neighbour of rank %d) hears rank %d again; no longer "
                  "suspect",
                  teller, about, about);
        event = LivenessEvent{LivenessEvent::Kind::kPeerBack, about, v.state.epoch,
                              "rank " + std::to_string(teller) + " hears it again"};
      }
    }
    if (event) emit(*event);
  }

  // Whether `r` heartbeats here now (caller holds mu_): a neighbour, or
  // within the lease it was asked for (its silence counts from the asking).
  bool expects_heartbeats(int r, Clock::time_point now) const {
    if (links_[r].neighbour) return true;
    return wants_[r].until > now;
  }

  // `origin` announced that `epoch` failed; `from` told this rank (the same
  // rank, or an overlay partner passing it on).
  void on_abort(int from, int origin, uint32_t epoch, std::string reason) {
    int64_t prev = highest_aborted_.load();
    while (static_cast<int64_t>(epoch) > prev && !highest_aborted_.compare_exchange_weak(prev, epoch)) {
    }
    // Each announcer's notice of an epoch is reported once, however many
    // paths brought it; only the first notice of an epoch is passed on.
    int64_t& heard = abort_heard_[static_cast<size_t>(origin)];
    if (static_cast<int64_t>(epoch) <= heard) return;
    heard = epoch;
    if (static_cast<int64_t>(epoch) > passed_abort_) {
      passed_abort_ = epoch;
      if (!to_all_ && !closing_) send_abort(epoch, origin, reason, from, true);
    }
    const std::string via =
        from == origin ? "" : " (passed on by rank " + std::to_string(from) + ")";
    RCOLL_LOG(kDebug, "liveness: rank %d announced that epoch %u failed%s: %s", origin, epoch,
              via.c_str(), reason.c_str());
    emit(LivenessEvent{LivenessEvent::Kind::kPeerAborted, origin, epoch, std::move(reason)});
  }

  // An overlay partner (`from`) tells that `about` died or left, as its
  // partner of `about` saw it. A rank that is an overlay partner of `about`
  // itself waits for its own connection to tell (it closes with the
  // process), but passes the notice on all the same.
  void on_notice(int from, int about, uint16_t kind, uint32_t epoch, std::string why) {
    if (about == rank_) return;
    const bool passed = notice_passed_[static_cast<size_t>(about)];
    tell_notice(about, kind, epoch, why, from);
    // An overlay link to `about` tells this rank itself; a link made on
    // first use does not (its close is no verdict).
    if (passed || (links_[about].open() && !links_[about].on_demand)) return;
    std::optional<LivenessEvent> event;
    {
      std::lock_guard<std::mutex> lock(mu_);
      PeerView& v = views_[about];
      if (v.health == PeerHealth::kDead) return;
      v.health = PeerHealth::kDead;
      if (kind == kNoticeLeft) {
        v.left = true;  // gone, though not by dying: no event
      } else {
        event = LivenessEvent{LivenessEvent::Kind::kPeerDead, about, epoch,
                              "told by rank " + std::to_string(from) + ": " + why};
      }
    }
    if (event) {
      RCOLL_LOG(kWarn, "liveness: %s (told by rank %d); reporting it to the communicator",
                why.c_str(), from);
      emit(*event);
    } else {
      RCOLL_LOG(kDebug,
                "liveness: rank %d left: it said goodbye to its overlay partners (told by rank %d)",
                about, from);
    }
  }

  // The peer shuts down cleanly: what follows is EOF, not a death. Closing our
  // side lets its shutdown finish without waiting for the linger.
  void on_goodbye(int r) {
    RCOLL_LOG(kDebug, "liveness: rank %d said goodbye", r);
    links_[r].peer_left = true;
    uint32_t epoch = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      views_[r].health = PeerHealth::kDead;  // gone, though not by dying: no event
      views_[r].left = true;
      epoch = views_[r].state.epoch;
    }
    close_link(r);
    tell_notice(r, kNoticeLeft, epoch, "", r);
  }

  void protocol_error(int r, const std::string& what) {
    RCOLL_LOG(kWarn, "liveness: corrupt frame from rank %d (%s): %s; closing its liveness connection", r,
              views_address(r).c_str(), what.c_str());
    // This rank's verdict on one link, not news of a death to pass on.
    peer_lost(r, "its liveness connection sent a corrupt frame (" + what + ")", false);
  }

  void link_failed(int r, const error_code& ec, const char* what) {
    if (ec == asio::error::operation_aborted) return;  // we closed it
    peer_lost(r, std::string(what) + " its liveness connection failed: " + ec.message());
  }

  // The connection to r is gone without a goodbye: r is dead (unless we are
  // the ones shutting down, when nothing is reported).
  // `pass_on`: the connection closed (the process is gone): the overlay
  // partners are told.
  void peer_lost(int r, const std::string& why, bool pass_on_death = true) {
    Link& l = links_[r];
    const bool report = !closing_ && !l.peer_left;
    close_link(r);
    if (!report) return;
    if (l.on_demand) {
      // Dialled again when next wanted; a death is its overlay partners' to tell.
      RCOLL_LOG(kDebug, "liveness: the connection to rank %d made on first use closed (%s)", r,
                why.c_str());
      if (first_use_) first_use_->reset(r);
      return;
    }
    if (pass_on_death && first_use_) return rejoin(r, why);
    declare_dead(r, why, pass_on_death);
  }

  // An overlay link closed without a goodbye. A process that died closed
  // its listener with it, so the peer is dialled again first: a refused dial
  // is the death (at once, as the close was before), an answered one a link
  // that broke between two live ranks (a reset on the way, a peer that
  // dropped its side): made again, with no verdict and nothing passed on
  // (before, every rank learned of a death that was none). A dial neither
  // answered nor refused within the budget (a host gone, a frozen peer) is a
  // death too. Meanwhile the peer's silence is not judged here.
  void rejoin(int r, const std::string& why) {
    Link& l = links_[r];
    if (!l.rejoining) {
      l.rejoining = true;
      l.lost_at = Clock::now();
      l.lost_why = why;
    }
    l.redial = false;
    RCOLL_LOG(
        kInfo,
        "liveness: the link to rank %d (%s) is lost without a goodbye (%s); dialling it again "
        "for up to %lld ms: refused means it is dead, an answer that the link alone broke",
        r, views_address(r).c_str(), why.c_str(), static_cast<long long>(budget_.count()));
    first_use_->reset(r);
    first_use_->want(r);
    drive_links();
  }

  // The dial of a rejoining peer failed: refused (its listener is gone: dead
  // now), else dialled again at the next tick, until the budget passes.
  void rejoin_failed(int r, const std::string& error, bool refused) {
    Link& l = links_[r];
    first_use_->reset(r);
    if (!refused && Clock::now() - l.lost_at < budget_) {
      l.redial = true;
      return;
    }
    give_up_rejoin(r, refused ? "its listener refused the connection (the process is gone)"
                              : "no connection within the budget (last try: " + error + ")");
  }

  // The rejoin ends in a death verdict: a dial still under way (answered by
  // a backlog, or a SYN to a host that is gone) is dropped with it.
  void give_up_rejoin(int r, const std::string& how) {
    Link& l = links_[r];
    l.rejoining = l.redial = false;
    first_use_->forget(r);
    first_use_->reset(r);
    declare_dead(r, l.lost_why + "; dialled again: " + how, true);
  }

  // The tick's part: dials a rejoining peer again, or gives it up once the
  // budget passed with no answer.
  void drive_rejoins(Clock::time_point now) {
    for (int r = 0; r < size_; ++r) {
      Link& l = links_[r];
      if (!l.rejoining || l.open()) continue;
      if (now - l.lost_at >= budget_) {
        give_up_rejoin(
            r, "no connection within the budget (" + std::to_string(budget_.count()) + " ms)");
      } else if (l.redial) {
        l.redial = false;
        first_use_->want(r);
        drive_links();
      }
    }
  }

  // `r` is dead: reported to the communicator, and (`pass_on_death`) to the
  // overlay partners. Once: a rank told of it meanwhile reports nothing more.
  void declare_dead(int r, const std::string& why, bool pass_on_death) {
    std::string address;
    std::string last;
    uint32_t epoch = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      PeerView& v = views_[r];
      if (v.health == PeerHealth::kDead) return;
      v.health = PeerHealth::kDead;
      address = v.address;
      epoch = v.state.epoch;
      last = "last heard " + std::to_string(ms_between(v.last_heard, Clock::now())) + " ms ago at op seq " +
             std::to_string(v.state.op_seq) + (v.state.in_comm ? " (in comm)" : " (in compute)") + ", epoch " +
             std::to_string(v.state.epoch);
    }
    const std::string reason = "rank " + std::to_string(r) + " (" + address + ") is dead: " + why + "; " + last;
    RCOLL_LOG(kWarn, "liveness: %s; reporting it to the communicator", reason.c_str());
    if (pass_on_death) tell_notice(r, kNoticeDead, epoch, reason, r);
    emit(LivenessEvent{LivenessEvent::Kind::kPeerDead, r, epoch, reason});
  }

  void close_link(int r) {
    Link& l = links_[r];
    if (!l.open()) return;
    ++l.gen;  // its handlers, completing with operation_aborted, touch nothing
    error_code ignored;
    l.socket->shutdown(tcp::socket::shutdown_both, ignored);
    l.socket->close(ignored);
    // Pending operations complete with operation_aborted and find the
    // generation changed; their buffers live in the Link, which stays.
    l.socket.reset();
    l.sendq.clear();
    l.writing = false;
    if (closing_ && all_closed()) io_.stop();
  }

  std::string views_address(int r) const {
    std::lock_guard<std::mutex> lock(mu_);
    return views_[r].address;
  }

  // ---- timers

  void on_tick() {
    if (closing_) return;
    const auto now = Clock::now();
    // If this thread itself did not run for a while (the process was stopped
    // or starved), the peers' heartbeats are still unread in the sockets:
    // judge their silence at the next tick, after reading them.
    const bool we_were_stalled = now - last_tick_ > interval_ + budget_ / 2;
    last_tick_ = now;
    queue_heartbeats();
    if (first_use_) drive_rejoins(now);
    if (!we_were_stalled) check_silence(now);
    next_tick_ += interval_;
    if (next_tick_ <= now) next_tick_ = now + interval_;
    tick_.expires_at(next_tick_);
    tick_.async_wait([this](const error_code& ec) {
      if (!ec) on_tick();
    });
  }

  void check_silence(Clock::time_point now) {
    std::vector<LivenessEvent> events;
    std::vector<std::pair<int, long long>> tell;
    bool post_watches = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int r = 0; r < size_; ++r) {
        // A wanted peer not connected yet is judged too: one that cannot
        // answer its dial (stopped, frozen) is as silent as one that cannot
        // heartbeat.
        if (r == rank_ || (!links_[r].open() && (overlay_[r] || wants_[r].until <= now))) continue;
        PeerView& v = views_[r];
        // A peer judged silent here (not told by its neighbours, whose
        // notice of its return would come) is asked again until it answers.
        if (!links_[r].neighbour && v.health == PeerHealth::kSilent &&
            !wants_[r].silent_by_notice && ask(r, now))
          post_watches = true;
        if (!expects_heartbeats(r, now)) continue;
        // A wanted peer's silence counts from when it was asked.
        const Clock::time_point since =
            links_[r].neighbour ? v.last_heard : std::max(v.last_heard, wants_[r].since);
        if (v.health != PeerHealth::kAlive || now - since <= budget_) continue;
        v.health = PeerHealth::kSilent;
        const long long ms = ms_between(since, now);
        if (links_[r].neighbour && !to_all_) {
          links_[r].silent_told = true;
          tell.emplace_back(r, ms);
        }
        if (!links_[r].open()) {
          RCOLL_LOG(kWarn,
                    "liveness: rank %d is silent: no heartbeat for %lld ms since this rank asked "
                    "for them (budget %lld ms), and it has not answered this rank's dial (not "
                    "connected before: no overlay partner); suspect, not dead",
                    r, ms, static_cast<long long>(budget_.count()));
          events.push_back(LivenessEvent{
              LivenessEvent::Kind::kPeerSilent, r, v.state.epoch,
              "no heartbeat for " + std::to_string(ms) + " ms (its dial unanswered)"});
          continue;
        }
        RCOLL_LOG(kWarn, "liveness: rank %d (%s) is silent: no heartbeat for %lld ms (budget %lld ms), last at op seq %llu %s, epoch %u; its connection is open, so it is suspect, not dead",
                  r, v.address.c_str(), ms, static_cast<long long>(budget_.count()),
                  static_cast<unsigned long long>(v.state.op_seq), v.state.in_comm ? "in comm" : "in compute",
                  v.state.epoch);
        events.push_back(LivenessEvent{LivenessEvent::Kind::kPeerSilent, r, v.state.epoch,
                                       "no heartbeat for " + std::to_string(ms) + " ms"});
      }
    }
    if (post_watches) send_watches();
    for (const auto& [r, ms] : tell) tell_suspect(r, true, ms);
    for (const auto& e : events) emit(e);
  }

  void on_urgent() {
    urgent_posted_.store(false);  // a change after this point posts again
    if (closing_) return;
    const auto now = Clock::now();
    if (now >= last_urgent_ + min_gap_) {
      last_urgent_ = now;
      return queue_heartbeats();
    }
    if (urgent_armed_) return;
    urgent_armed_ = true;
    urgent_timer_.expires_at(last_urgent_ + min_gap_);
    urgent_timer_.async_wait([this](const error_code& ec) {
      urgent_armed_ = false;
      if (ec || closing_) return;
      last_urgent_ = Clock::now();
      queue_heartbeats();
    });
  }

  // ---- shutdown

  void begin_close() {
    closing_ = true;
    tick_.cancel();
    urgent_timer_.cancel();
    handshake_timer_.cancel();
    error_code ignored;
    listen_wait_.close(ignored);
    if (first_use_) first_use_->close();
    FrameHeader bye;
    bye.type = FrameType::kGoodbye;
    bye.root = rank_;
    const FrameBytes b = encode(bye);
    for (int r = 0; r < size_; ++r) {
      Link& l = links_[r];
      if (!l.open()) continue;
      l.heartbeat_due = false;
      l.sendq.emplace_back(b.begin(), b.end());  // after any abort notice still queued
      if (!l.writing) start_write(r);
    }
    if (all_closed()) return io_.stop();
    linger_.expires_after(kGoodbyeLinger);
    linger_.async_wait([this](const error_code&) {
      for (int r = 0; r < size_; ++r) close_link(r);
      io_.stop();
    });
  }

  bool all_closed() const {
    for (const Link& l : links_) {
      if (l.open()) return false;
    }
    return true;
  }

  void emit(const LivenessEvent& event) {
    std::function<void(const LivenessEvent&)> listener;
    {
      std::lock_guard<std::mutex> lock(listener_mu_);
      listener = listener_;
    }
    if (listener) listener(event);
  }

  const int rank_;
  const int size_;
  const Millis interval_;
  const Millis budget_;
  const Millis min_gap_;
  const Millis lease_;  // what a watch asks for: two budgets
  const bool to_all_;

  asio::io_context io_;
  std::vector<Link> links_;  // liveness thread only
  // Sockets a test made this rank forget, still open (drop_link_for_testing).
  std::vector<std::unique_ptr<tcp::socket>> forgotten_for_testing_;

  mutable std::mutex mu_;              // guards views_, wants_, to_tell_ and local_
  std::atomic<uint16_t> progress_{0};  // note_progress: this rank's RankState::progress
  std::vector<PeerView> views_;
  std::vector<Want> wants_;
  std::vector<int> to_tell_;  // peers to send a watch request to (send_watches)
  RankState local_;

  std::mutex listener_mu_;
  std::function<void(const LivenessEvent&)> listener_;
  std::atomic<int64_t> highest_aborted_{-1};
  std::atomic<bool> urgent_posted_{false};

  // Liveness thread only (overlay_ is set before it starts).
  std::vector<bool> overlay_;           // the partners connected for good, notices pass over
  std::vector<uint32_t> suspect_told_;  // this rank's suspect notices about each neighbour
  std::vector<std::array<uint32_t, 2>>
      suspect_heard_;                         // the last heard from each neighbour of each rank
  std::vector<bool> notice_passed_;           // a death or departure of that rank was passed on
  int64_t passed_abort_ = -1;                 // the highest epoch whose abort was passed on
  std::vector<int64_t> abort_heard_;          // by announcer: the highest epoch reported
  std::unique_ptr<OnDemandLinks> first_use_;  // null when the overlay is every peer

  // Liveness thread only.
  asio::steady_timer tick_;
  asio::steady_timer urgent_timer_;
  asio::steady_timer linger_;
  Clock::time_point last_tick_;
  Clock::time_point next_tick_;
  Clock::time_point last_urgent_{};
  bool urgent_armed_ = false;
  bool closing_ = false;
  asio::steady_timer handshake_timer_;
  bool handshake_armed_ = false;
  Millis handshake_step_ = kHandshakeStep;
  asio::posix::stream_descriptor listen_wait_;  // a dup of the listener, to wake on

  std::thread thread_;  // declared last: joined before the members it uses go
};

}  // namespace

Result<std::unique_ptr<Liveness>> Liveness::start(const LivenessParams& given) {
  LivenessParams params = given;
  if (params.listen_fd >= 0 &&
      (params.size < 2 || params.rank < 0 || params.rank >= params.size || !params.store)) {
    ::close(params.listen_fd);  // no mesh to build (or refused below): not taken over
    params.listen_fd = -1;
  }
  if (params.size < 1 || params.rank < 0 || params.rank >= params.size) {
    return Status(ErrorCode::kInvalidArgument, ErrorContext{params.rank, -1, 0, -1, "liveness"},
                  "liveness: rank " + std::to_string(params.rank) + " is outside a world of size " +
                      std::to_string(params.size));
  }
  if (params.size > 1 && !params.store) {
    return Status(ErrorCode::kInvalidArgument, ErrorContext{params.rank, -1, 0, -1, "liveness"},
                  "liveness: no store to rendezvous on");
  }
  auto impl = std::make_unique<LivenessImpl>(params);
  if (Status s = impl->connect(params); !s.ok()) return s;
  impl->start_thread();
  return std::unique_ptr<Liveness>(std::move(impl));
}

}  // namespace rcoll
