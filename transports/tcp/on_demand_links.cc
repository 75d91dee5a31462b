#include "transports/tcp/on_demand_links.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "base/log.h"

namespace rcoll {
namespace {

// A dial whose handshake closed before its ack is tried this many times in
// all, this long apart: the peer's mesh build may have closed a connection it
// had taken but not answered when the build ended.
constexpr int kDialTries = 5;
constexpr auto kRetryPause = std::chrono::milliseconds(20);
// A connection that sends no whole hello within this is closed. Long: a rank
// that dialled (a credit posted at the end of an op) may send its hello only
// from its next op's progress loop, after a compute phase of any length.
constexpr auto kHelloWithin = std::chrono::minutes(5);

struct Address {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

// "IP PORT IFNAME" as the mesh publishes it.
bool parse_address(const std::string& text, Address* out) {
  const size_t a = text.find(' ');
  if (a == std::string::npos) return false;
  const size_t b = text.find(' ', a + 1);
  const std::string ip = text.substr(0, a);
  const std::string port_text = text.substr(a + 1, b == std::string::npos ? b : b - a - 1);
  char* end = nullptr;
  const unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port == 0 || port > 65535) return false;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out->addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out->addr);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    out->len = sizeof(sockaddr_in);
    return true;
  }
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    out->len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

}  // namespace

std::string socket_peer_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    port = ntohs(v4->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    port = ntohs(v6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

namespace {

// Where `text` ("IP PORT IFNAME") dials: "IP:PORT".
std::string dialled(const std::string& text) {
  std::string s = text.substr(0, text.find(' ', text.find(' ') + 1));
  std::replace(s.begin(), s.end(), ' ', ':');
  return s;
}

void close_fd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// Sends the rest of `out` without blocking; <0: the connection failed
// (errno), 0: not all of it yet, 1: all sent.
int send_rest(int fd, const FrameBytes& out, size_t* sent) {
  while (*sent < out.size()) {
    const ssize_t k =
        ::send(fd, out.data() + *sent, out.size() - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -1;
    }
    *sent += static_cast<size_t>(k);
  }
  return 1;
}

// Reads the rest of a header into `in`: <0 failed (errno; 0 = the peer closed),
// 0 not whole yet, 1 whole.
int recv_rest(int fd, FrameBytes* in, size_t* got) {
  while (*got < in->size()) {
    const ssize_t k = ::recv(fd, in->data() + *got, in->size() - *got, MSG_DONTWAIT);
    if (k == 0) {
      errno = 0;
      return -1;
    }
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -1;
    }
    *got += static_cast<size_t>(k);
  }
  return 1;
}

std::string reason(int err) { return err == 0 ? "the connection was closed" : std::strerror(err); }

}  // namespace

std::vector<bool> eager_partners(int rank, int size) {
  std::vector<bool> partners(static_cast<size_t>(std::max(size, 0)), false);
  if (size <= 1) return partners;
  for (int d = 1; d < size; d <<= 1) {
    // The dissemination barrier's (rank +- 2^k; the ring neighbours at k = 0)
    // and recursive doubling's (rank ^ 2^k).
    partners[static_cast<size_t>((rank + d) % size)] = true;
    partners[static_cast<size_t>((rank + size - d) % size)] = true;
    const int q = rank ^ d;
    if (q < size) partners[static_cast<size_t>(q)] = true;
  }
  partners[static_cast<size_t>(rank)] = false;
  return partners;
}

OnDemandLinks::OnDemandLinks(const MeshParams& mesh, AddressBook addresses, int listen_fd,
                             const std::vector<bool>& connected)
    : mesh_(mesh),
      addresses_(std::move(addresses)),
      listen_fd_(listen_fd),
      token_hash_(job_token_hash(mesh.job_token)),
      state_(static_cast<size_t>(mesh.size), PeerState::kIdle) {
  mesh_.store.reset();  // not needed past the build (the book holds its own)
  mesh_.addresses = AddressBook();
  mesh_.cancelled = nullptr;
  for (size_t q = 0; q < state_.size() && q < connected.size(); ++q)
    if (connected[q]) state_[q] = PeerState::kDone;
  if (mesh.rank >= 0 && mesh.rank < mesh.size)
    state_[static_cast<size_t>(mesh.rank)] = PeerState::kDone;
  if (listen_fd_ >= 0) {
    const int flags = fcntl(listen_fd_, F_GETFL, 0);
    if (flags >= 0) (void)fcntl(listen_fd_, F_SETFL, flags | O_NONBLOCK);
  }
}

OnDemandLinks::~OnDemandLinks() { close(); }

// A link of a built epoch that cannot be made fails as one that broke
// (kTransport): the runtime recovers, as from a closed connection.
Status OnDemandLinks::unreachable(int peer, const std::string& why) const {
  const std::string known = addresses_.peek(peer);
  const std::string at = known.empty() ? "?" : dialled(known);
  return Status(ErrorCode::kTransport,
                ErrorContext{mesh_.rank, peer, 0, mesh_.epoch, mesh_.transport},
                "connecting on first use to rank " + std::to_string(peer) + " (" + at + ") for " +
                    mesh_.purpose + " failed: " + why);
}

void OnDemandLinks::want(int peer) {
  if (peer < 0 || peer >= mesh_.size || state_[peer] != PeerState::kIdle) return;
  state_[peer] = PeerState::kDialing;
  Dial d;
  d.peer = peer;
  start_dial(&d);
  if (d.fd >= 0 && !d.connecting) {
    // Connected at once (loopback may): the hello leaves now, not at the next
    // poll, which may be a compute phase away.
    (void)send_rest(d.fd, d.out, &d.sent);
  }
  if (d.fd >= 0 || d.retry_at != Clock::time_point{}) {
    dials_.push_back(d);
    RCOLL_LOG(kDebug, "%s: dialling rank %d (%s) on first use", mesh_.purpose.c_str(), peer,
              dialled(addresses_.peek(peer)).c_str());
  }
}

// Opens the socket and starts the connect. On failure adds the peer's event to
// ready_ and leaves d->fd at -1 with no retry time.
void OnDemandLinks::start_dial(Dial* d) {
  const int peer = d->peer;
  ++d->tries;
  d->connecting = true;
  d->sent = d->got = 0;
  d->retry_at = {};
  Address to;
  // Read from the store here on the first dial to a rank that is not a partner.
  auto address = addresses_.at(peer);
  if (!address.ok()) {
    state_[peer] = PeerState::kDone;
    ready_.push_back(Event{peer, -1,
                           unreachable(peer, "its address could not be read from the store: " +
                                                 address.status().message())});
    return;
  }
  if (!parse_address(address.value(), &to)) {
    state_[peer] = PeerState::kDone;
    ready_.push_back(Event{
        peer, -1, unreachable(peer, "it published no usable address ('" + address.value() + "')")});
    return;
  }
  d->fd = ::socket(to.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (d->fd < 0) {
    state_[peer] = PeerState::kDone;
    ready_.push_back(
        Event{peer, -1, unreachable(peer, std::string("socket: ") + std::strerror(errno))});
    return;
  }
  apply_mesh_socket_options(d->fd, mesh_);
  if (::connect(d->fd, reinterpret_cast<const sockaddr*>(&to.addr), to.len) == 0) {
    d->connecting = false;
  } else if (errno != EINPROGRESS) {
    const int err = errno;
    close_fd(&d->fd);
    state_[peer] = PeerState::kDone;
    ready_.push_back(Event{peer, -1,
                           unreachable(peer, std::string("connect: ") + std::strerror(err)),
                           err == ECONNREFUSED});
    return;
  }
  d->out = encode(mesh_hello(FrameType::kHello, mesh_));
}

bool OnDemandLinks::retry_or_fail(Dial* d, const std::string& why, std::vector<Event>* events) {
  // A handshake that broke before this rank's hello went out was no try the
  // peer refused (its limit on a silent connection closed it).
  if (d->sent < d->out.size() && !d->connecting) --d->tries;
  close_fd(&d->fd);
  if (d->tries < kDialTries) {
    RCOLL_LOG(kDebug, "%s: the dial of rank %d broke (%s); dialling again", mesh_.purpose.c_str(),
              d->peer, why.c_str());
    d->retry_at = Clock::now() + kRetryPause;
    return true;
  }
  state_[d->peer] = PeerState::kDone;
  events->push_back(
      Event{d->peer, -1, unreachable(d->peer, why + " (" + std::to_string(d->tries) + " tries)")});
  return false;
}

bool OnDemandLinks::step_dial(Dial* d, std::vector<Event>* events, bool* moved) {
  if (d->fd < 0) {
    if (Clock::now() < d->retry_at) return true;
    start_dial(d);
    if (d->fd < 0) return false;  // its event is in ready_
    *moved = true;
  }
  if (d->connecting) {
    pollfd pf{d->fd, POLLOUT, 0};
    if (::poll(&pf, 1, 0) <= 0) return true;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(d->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == ECONNREFUSED) {
      // The listener is gone: the peer closed this epoch's data plane.
      close_fd(&d->fd);
      state_[d->peer] = PeerState::kDone;
      events->push_back(
          Event{d->peer, -1,
                unreachable(d->peer, "its listener refused the connection (" + mesh_.purpose +
                                         " is closed there: it has left)"),
                true});
      return false;
    }
    if (err != 0) return retry_or_fail(d, std::string("connect: ") + std::strerror(err), events);
    d->connecting = false;
    *moved = true;
  }
  if (d->sent < d->out.size()) {
    const int r = send_rest(d->fd, d->out, &d->sent);
    if (r < 0) return retry_or_fail(d, "sending the hello: " + reason(errno), events);
    if (r == 0) return true;
    *moved = true;
  }
  const int r = recv_rest(d->fd, &d->in, &d->got);
  if (r < 0) return retry_or_fail(d, "awaiting the hello's ack: " + reason(errno), events);
  if (r == 0) return true;
  *moved = true;
  auto ack = decode_frame_header(d->in.data(), d->in.size());
  if (!ack.ok() || ack.value().type != FrameType::kHelloAck || ack.value().root != d->peer ||
      ack.value().epoch != mesh_.epoch) {
    close_fd(&d->fd);
    state_[d->peer] = PeerState::kDone;
    events->push_back(
        Event{d->peer, -1,
              unreachable(d->peer, "its answer to the hello was not an ack for this epoch")});
    return false;
  }
  if (ack.value().count == 0) {
    // Crossed: the lower rank dialled this one too, and its connection wins.
    close_fd(&d->fd);
    state_[d->peer] = PeerState::kAwaitingTheirs;
    RCOLL_LOG(kDebug, "%s: rank %d dialled this rank too; taking its connection",
              mesh_.purpose.c_str(), d->peer);
    return false;
  }
  state_[d->peer] = PeerState::kDone;
  events->push_back(Event{d->peer, std::exchange(d->fd, -1), Status()});
  return false;
}

void OnDemandLinks::refuse(Incoming* in, const std::string& why, bool warn) {
  if (warn) {
    RCOLL_LOG(
        kWarn,
        "%s: rank %d refused connection from %s: %s; closed it, still accepting the job's ranks",
        mesh_.purpose.c_str(), mesh_.rank, in->from.c_str(), why.c_str());
  } else {
    RCOLL_LOG(kDebug, "%s: refused connection from %s: %s", mesh_.purpose.c_str(), in->from.c_str(),
              why.c_str());
  }
  close_fd(&in->fd);
}

void OnDemandLinks::take_incoming(Incoming* in, const FrameHeader& hello,
                                  std::vector<Event>* events) {
  if (hello.type != FrameType::kHello) return refuse(in, "first frame is not a hello", true);
  if (hello.op_seq != token_hash_)
    return refuse(in, "job token mismatch (a process of another job?)", true);
  if (hello.epoch != mesh_.epoch) {
    // A rank of an epoch this one has left or not reached: not a stranger.
    return refuse(in,
                  "hello for epoch " + std::to_string(hello.epoch) + ", this is epoch " +
                      std::to_string(mesh_.epoch),
                  false);
  }
  if (hello.count != static_cast<uint64_t>(mesh_.size)) {
    return refuse(
        in,
        "world size " + std::to_string(hello.count) + " differs from " + std::to_string(mesh_.size),
        true);
  }
  const int peer = hello.root;
  if (relinks_ && peer >= 0 && peer < mesh_.size && peer != mesh_.rank &&
      state_[peer] == PeerState::kDone) {
    // The peer lost its side of the link this rank still counts: it is told
    // to try again (its dial retries), and the owner drops this side.
    events->push_back(Event{peer, -1, Status(), false, true});
    return refuse(in, "rank " + std::to_string(peer) + " dialled again: its side of the link broke",
                  false);
  }
  if (peer < 0 || peer >= mesh_.size || state_[peer] == PeerState::kDone) {
    return refuse(
        in, "unexpected rank " + std::to_string(peer) + " (connected already, or its link failed)",
        peer < 0 || peer >= mesh_.size || peer == mesh_.rank);
  }
  FrameBytes out;
  auto dial =
      std::find_if(dials_.begin(), dials_.end(), [peer](const Dial& d) { return d.peer == peer; });
  if (state_[peer] == PeerState::kDialing && mesh_.rank < peer) {
    // Crossed, and this rank's dial wins: the count 0 tells the peer to wait for it.
    FrameHeader no = mesh_hello(FrameType::kHelloAck, mesh_);
    no.count = 0;
    out = encode(no);
    size_t sent = 0;
    (void)send_rest(in->fd, out, &sent);
    return refuse(in, "crossed this rank's own dial of rank " + std::to_string(peer), false);
  }
  out = encode(mesh_hello(FrameType::kHelloAck, mesh_));
  size_t sent = 0;
  if (send_rest(in->fd, out, &sent) != 1) {
    // 48 bytes into a new connection's empty buffer: only a broken one takes less.
    return refuse(in, "sending the hello's ack failed: " + reason(errno), false);
  }
  if (dial != dials_.end()) {
    // Crossed, and the peer's dial wins (it is the lower rank).
    close_fd(&dial->fd);
    dials_.erase(dial);
  }
  apply_mesh_socket_options(in->fd, mesh_);
  state_[peer] = PeerState::kDone;
  RCOLL_LOG(kDebug, "%s: rank %d connected on first use (%s)", mesh_.purpose.c_str(), peer,
            in->from.c_str());
  events->push_back(Event{peer, std::exchange(in->fd, -1), Status()});
}

bool OnDemandLinks::step_incoming(Incoming* in, std::vector<Event>* events, bool* moved) {
  const int r = recv_rest(in->fd, &in->in, &in->got);
  if (r < 0) {
    refuse(in, "no hello (" + reason(errno) + ")", false);
    return false;
  }
  if (r == 0) {
    if (Clock::now() - in->since < kHelloWithin) return true;
    refuse(in, "no hello within 5 minutes", false);
    return false;
  }
  *moved = true;
  auto hello = decode_frame_header(in->in.data(), in->in.size());
  if (!hello.ok()) {
    refuse(in, hello.status().message(), true);
    return false;
  }
  take_incoming(in, hello.value(), events);
  return false;
}

bool OnDemandLinks::poll(bool look_at_listener, std::vector<Event>* events) {
  bool moved = false;
  if (!ready_.empty()) {
    for (Event& e : ready_) events->push_back(std::move(e));
    ready_.clear();
    moved = true;
  }
  if (look_at_listener && listen_fd_ >= 0) {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // A connection that failed before it was taken: the next one may be fine.
        if (errno == ECONNABORTED || errno == EINTR || errno == EPROTO) continue;
        // Out of descriptors: the backlog waits, and is looked at again.
        backlogged_ = errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
        break;
      }
      backlogged_ = false;
      Incoming in;
      in.fd = fd;
      in.from = socket_peer_address(fd);
      in.since = Clock::now();
      incoming_.push_back(in);
      moved = true;
    }
  }
  // One poll over every handshake's socket, then a step for the ready ones
  // only (and for the dials due to try again, or the connections past their
  // hello limit): a pass must not cost a call per handshake (a credit point
  // after a recovery dials every peer at once).
  ready_fds_.clear();
  for (const Dial& d : dials_) {
    const bool writing = d.connecting || d.sent < d.out.size();
    ready_fds_.push_back(pollfd{d.fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0});
  }
  for (const Incoming& in : incoming_) ready_fds_.push_back(pollfd{in.fd, POLLIN, 0});
  if (!ready_fds_.empty() && ::poll(ready_fds_.data(), ready_fds_.size(), 0) < 0) {
    for (pollfd& pf : ready_fds_) pf.revents = POLLIN;  // EINTR: step every one
  }
  const auto now = Clock::now();
  const size_t polled_dials = dials_.size();
  size_t kept = 0;
  for (size_t i = 0; i < polled_dials; ++i) {
    Dial& d = dials_[i];
    const bool due = d.fd < 0 ? now >= d.retry_at : ready_fds_[i].revents != 0;
    if (due && !step_dial(&d, events, &moved)) continue;
    if (kept != i) dials_[kept] = std::move(d);
    ++kept;
  }
  dials_.resize(kept);
  // (take_incoming may drop one of the dials kept, so those are compacted first.)
  kept = 0;
  for (size_t i = 0; i < incoming_.size(); ++i) {
    Incoming& in = incoming_[i];
    const bool due = ready_fds_[polled_dials + i].revents != 0 || now - in.since >= kHelloWithin;
    if (due && !step_incoming(&in, events, &moved)) continue;
    if (kept != i) incoming_[kept] = std::move(in);
    ++kept;
  }
  incoming_.resize(kept);
  if (!ready_.empty()) {  // a retried dial that failed at once
    for (Event& e : ready_) events->push_back(std::move(e));
    ready_.clear();
    moved = true;
  }
  return moved;
}

void OnDemandLinks::add_poll_fds(std::vector<pollfd>* fds) const {
  if (listen_fd_ >= 0) fds->push_back(pollfd{listen_fd_, POLLIN, 0});
  for (const Dial& d : dials_) {
    if (d.fd < 0) continue;
    const bool writing = d.connecting || d.sent < d.out.size();
    fds->push_back(pollfd{d.fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0});
  }
  for (const Incoming& in : incoming_) fds->push_back(pollfd{in.fd, POLLIN, 0});
}

Deadline OnDemandLinks::wake_by(Deadline until) const {
  Deadline by = until;
  for (const Incoming& in : incoming_) {
    const Deadline give_up = Deadline::at(in.since + kHelloWithin);
    if (by.is_never() || give_up.time() < by.time()) by = give_up;
  }
  for (const Dial& d : dials_) {
    if (d.fd >= 0) continue;
    const Deadline retry = Deadline::at(d.retry_at);
    if (by.is_never() || retry.time() < by.time()) by = retry;
  }
  return by;
}

void OnDemandLinks::forget(int peer) {
  if (peer < 0 || peer >= mesh_.size) return;
  state_[peer] = PeerState::kDone;
  for (size_t i = 0; i < dials_.size(); ++i) {
    if (dials_[i].peer != peer) continue;
    close_fd(&dials_[i].fd);
    dials_.erase(dials_.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  }
}

void OnDemandLinks::reset(int peer) {
  if (peer < 0 || peer >= mesh_.size || peer == mesh_.rank) return;
  if (std::any_of(dials_.begin(), dials_.end(), [peer](const Dial& d) { return d.peer == peer; }))
    return;
  state_[peer] = PeerState::kIdle;
}

void OnDemandLinks::close() {
  close_fd(&listen_fd_);
  for (Dial& d : dials_) close_fd(&d.fd);
  for (Incoming& in : incoming_) close_fd(&in.fd);
  dials_.clear();
  incoming_.clear();
  ready_.clear();
}

}  // namespace rcoll
