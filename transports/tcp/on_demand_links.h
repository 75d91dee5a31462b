// Connections of the TCP data plane made on first use. An epoch connects each
// rank to its partners only (eager_partners below) and keeps its listener
// open; a frame queued for any other peer dials it then. Non-blocking
// throughout: the transport's progress loop drives it, on the one thread
// that owns the transport.
//
// The handshake is the mesh's (transports/tcp/mesh.h): the dialler sends a
// hello (rank, world size, epoch, job-token hash) and sends nothing more
// until the ack. When two ranks dial each other at once, the connection
// dialled by the lower rank wins: the lower rank refuses the higher one's
// hello with an ack whose count is 0 whenever it has dialled that rank itself,
// and the higher rank, seeing the lower one's hello, takes it and drops its
// own dial. Both sides keep the same socket, and no frame moved on the other.
//
// A dial the peer's listener refuses (the peer has left the epoch), or that
// keeps closing before its ack, fails that peer's requests with kTransport
// naming the address, as a connection that broke would: the runtime
// recovers. A dial the peer has not answered yet waits as a frame the peer
// has not read would (the peer answers from its progress loop, at its next
// op): the op's progress deadline and the stall judge bound it.
#pragma once

#include <poll.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "rcoll/status.h"
#include "transports/frame.h"
#include "transports/tcp/mesh.h"

namespace rcoll {

// The peers a rank connects to when an epoch starts: rank +- 2^k (the ring
// neighbours at k = 0, the dissemination barrier's partners) and its
// recursive-doubling partners (rank ^ 2^k): the ring, barrier and doubling
// algorithms and the link timing talk to these on every op. At most
// 3 ceil(log2 P) of them; the relation is symmetric. By rank; false for the
// rank itself. (Barrier partners joined when a 256-rank job's closing barrier,
// each round dialling on first use, finished seconds apart on 2 CPUs and the
// first ranks out exited while the last still waited.)
std::vector<bool> eager_partners(int rank, int size);

// "IP:PORT" of a connected socket's peer, or "?".
std::string socket_peer_address(int fd);

class OnDemandLinks {
 public:
  // One finished handshake: `fd` connected to `peer` (non-blocking, options
  // applied), or `error` why `peer` cannot be reached in this epoch;
  // `refused` when its listener refused the connection (ECONNREFUSED: no
  // process listens there any more). With relinks (set_relinks), `stale`
  // (fd -1, error OK): `peer`, counted as connected here, dialled this rank
  // again, so its side of the link broke; its hello was refused (it dials
  // again shortly), and the owner drops its own side (then reset()).
  struct Event {
    int peer = -1;
    int fd = -1;
    Status error;
    bool refused = false;
    bool stale = false;
  };

  // `mesh` names this rank, the epoch, the job token and the socket options;
  // `addresses` are the ranks' as published (those not read yet are read
  // from the store on the first dial to them); `listen_fd` (owned from now)
  // is the epoch's listener. `connected` marks the peers already connected.
  OnDemandLinks(const MeshParams& mesh, AddressBook addresses, int listen_fd,
                const std::vector<bool>& connected);
  ~OnDemandLinks();
  OnDemandLinks(const OnDemandLinks&) = delete;
  OnDemandLinks& operator=(const OnDemandLinks&) = delete;

  // A frame is queued for `peer`, which has no connection: dials it unless a
  // dial is under way or the peer's own dial is awaited.
  void want(int peer);
  // For a channel that outlives failures (liveness): a hello from a peer
  // counted as connected is reported as a stale link (Event::stale) rather
  // than only refused.
  void set_relinks(bool on) { relinks_ = on; }
  // Moves every handshake under way a step, without blocking, and takes the
  // connections waiting at the listener when `look_at_listener`. Appends
  // what finished to `events`; true if anything moved.
  bool poll(bool look_at_listener, std::vector<Event>* events);
  // Whether a handshake is under way (poll has work on every pass).
  bool busy() const { return !dials_.empty() || !incoming_.empty() || !ready_.empty(); }
  // The descriptors a sleep should wake for: the listener and the handshakes.
  void add_poll_fds(std::vector<pollfd>* fds) const;
  // The longest a sleep may last: a dial waiting to retry wakes it.
  Deadline wake_by(Deadline until) const;
  // The peer is not to be connected any more in this epoch (its link failed,
  // or the transport is closing): a handshake with it ends, a hello from it
  // is refused.
  void forget(int peer);
  // A peer whose dial failed (or that was forgotten, its connection closed)
  // may be dialled again and may dial in: for a channel that outlives
  // failures (liveness), not for an epoch's data plane.
  void reset(int peer);
  // The listener has connections waiting that could not be taken (out of
  // descriptors): poll again soon, a wake on the listener may not come.
  bool backlogged() const { return backlogged_; }
  // Closes the listener and every handshake. Idempotent.
  void close();

 private:
  enum class PeerState : uint8_t { kIdle, kDialing, kAwaitingTheirs, kDone };
  struct Dial {
    int peer = -1;
    int fd = -1;
    bool connecting = true;  // the TCP connect is under way
    FrameBytes out{};
    size_t sent = 0;
    FrameBytes in{};
    size_t got = 0;
    int tries = 0;
    Clock::time_point retry_at{};  // while fd < 0: when to dial again
  };
  struct Incoming {
    int fd = -1;
    std::string from;
    FrameBytes in{};
    size_t got = 0;
    Clock::time_point since{};
  };

  void start_dial(Dial* d);
  // Advances one dial; false once it ended (an event was added or it was dropped).
  bool step_dial(Dial* d, std::vector<Event>* events, bool* moved);
  bool step_incoming(Incoming* in, std::vector<Event>* events, bool* moved);
  // Ends a dial whose handshake broke: tries again later, or gives up.
  bool retry_or_fail(Dial* d, const std::string& why, std::vector<Event>* events);
  void take_incoming(Incoming* in, const FrameHeader& hello, std::vector<Event>* events);
  void refuse(Incoming* in, const std::string& why, bool warn);
  Status unreachable(int peer, const std::string& why) const;

  MeshParams mesh_;
  AddressBook addresses_;  // read further on the first dial to a rank not known yet
  int listen_fd_;
  uint64_t token_hash_;
  std::vector<PeerState> state_;
  std::vector<Dial> dials_;
  std::vector<Incoming> incoming_;
  std::vector<Event> ready_;       // finished outside poll (a dial that failed at once)
  std::vector<pollfd> ready_fds_;  // poll's, reused
  bool backlogged_ = false;
  bool relinks_ = false;
};

}  // namespace rcoll
