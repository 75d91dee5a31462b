// The liveness side channel: a small TCP mesh, separate from the data plane and
// kept across epochs, on which ranks heartbeat their state (current op seq, in
// compute or in comm, epoch) and announce failed epochs. It tells the three
// cases of DESIGN.md apart:
//   straggler  heartbeats arrive, its op seq is behind ours: wait, log who is late
//   dead       an overlay link to it closed without a goodbye (the kernel closes
//              every socket of a process that dies): reported at once by its
//              overlay partners, and told to the other ranks in O(log P) hops
//   silent     connection open, no heartbeat for the liveness budget (SIGSTOP,
//              frozen, partitioned): suspect; recovery waits for it
//
// The mesh and the heartbeats are sparse (#37). Each rank connects to its
// overlay partners only: rank +- 2^k (its ring neighbours at k = 0) and
// rank ^ 2^k, O(log P) of them (eager_partners in
// transports/tcp/on_demand_links.h); any other peer is connected on first
// use, when one wants the other's heartbeats. Every rank heartbeats to its two
// ring neighbours, which watch it for silence. What a rank used to see for
// itself over a full mesh is passed on over the overlay, each rank passing a
// notice on once, so it reaches every rank in O(log P) hops: a neighbour's
// word that a rank turned silent or heartbeats again (kSuspect), a partner's
// word that a rank died (its connection closed without a goodbye) or left
// (it said goodbye) (kNotice), and a failed epoch (kAbort). A rank whose overlay
// link to the one said to be dead is still open waits for that link to say
// so. A rank that needs another's state (an op stalled: who is behind, who
// waits on whom) asks it for heartbeats (want); the view is current once one
// arrived, and the peer heartbeats to it for a lease (two budgets) that the
// asking renews; a wanted peer that cannot even answer the dial is silent a
// budget after the asking. Ranks that freeze together with both their
// neighbours (a whole host's consecutive ranks) are told by the ranks at the
// edges of the frozen run only; the others are found silent by the ranks that
// want them (a stalled collective wants every peer), a budget after asking.
// The budget and to_all are settings every rank must share.
// LivenessParams::to_all restores the full mesh and heartbeats to every peer
// (RCOLL_HEARTBEATS_TO_ALL=1). One thread, owned and joined by Liveness.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/address_book.h"
#include "base/deadline.h"
#include "base/packed_values.h"
#include "rcoll/status.h"
#include "rcoll/store.h"

namespace rcoll {

enum class PeerHealth : uint8_t { kAlive, kSilent, kDead };
const char* to_string(PeerHealth h);

// What a rank says about itself in every heartbeat.
struct RankState {
  uint64_t op_seq = 0;     // the op it is in (in_comm) or last finished (in compute)
  bool in_comm = false;    // inside an op (true) or in compute between ops (false)
  uint32_t epoch = 0;      // its current data-plane epoch
  int waiting_on = -1;     // in a send or receive: the peer it waits on (else -1)
  // What it waits on `waiting_on` for: a send (else a receive), its per-peer
  // sequence number (low 32 bits), and whether it is one of a group's
  // members (a group never waits in a cycle of its own making).
  bool waiting_send = false;
  bool grouped = false;
  uint32_t p2p_seq = 0;
  // Bytes its data plane moved, in 64 KiB units, wrapping: a rank whose count
  // changes between two looks is busy, not hung (Liveness::note_progress).
  uint16_t progress = 0;
};

struct PeerView {
  PeerHealth health = PeerHealth::kAlive;
  RankState state;
  Clock::time_point last_heard;  // last heartbeat received
  std::string address;           // "ip:port" of its liveness connection
  bool left = false;             // it said goodbye: closed its communicator on purpose
  // Whether `state` is worth judging by: it came in a heartbeat from a peer
  // that heartbeats to this rank (a ring neighbour, or one this rank wants
  // and that answered since). Else it is the last state heard, maybe long
  // ago: unknown, for the stall judge.
  bool current = true;
};

struct LivenessEvent {
  enum class Kind : uint8_t {
    kPeerAborted,  // the peer announced that `epoch` failed (reason in `reason`)
    kPeerDead,     // an overlay link to the peer closed without a goodbye (here, or told)
    kPeerSilent,   // no heartbeat for the liveness budget (seen here, or told by a watcher)
    kPeerBack,     // a silent peer heartbeats again
  };
  Kind kind;
  int peer = -1;
  uint32_t epoch = 0;
  std::string reason;
};

struct LivenessParams {
  int rank = 0;
  int size = 1;
  std::shared_ptr<Store> store;  // namespaced for the communicator instance
  std::string ifname_spec;
  bool prefer_loopback = true;
  std::string route_address;  // source address of the route to the store (select_interface)
  std::string job_token;
  std::chrono::milliseconds interval{100};   // heartbeat period
  std::chrono::milliseconds budget{1500};    // silent after this long without a heartbeat
  // Heartbeats to every peer (the full mesh of heartbeats) instead of to the
  // ring neighbours and the peers that want them.
  bool to_all = false;
  Deadline connect_deadline = Deadline::never();
  // Both set (at creation): the listener opened before the settings exchange
  // and the ranks' addresses, as the settings carried them (the overlay
  // partners' read, the rest on first use); no store exchange of its own.
  // Unset (after a shrink): the mesh publishes and reads them.
  int listen_fd = -1;
  AddressBook addresses;
};

class Liveness {
 public:
  // Builds the mesh (the overlay partners connected, or every pair with
  // to_all; hello with job token checked) and starts the heartbeat thread.
  // Fails within connect_deadline naming the ranks it could not reach.
  static Result<std::unique_ptr<Liveness>> start(const LivenessParams& params);
  virtual ~Liveness() = default;

  // Published in the next heartbeat (and immediately when in_comm changes).
  virtual void set_local(const RankState& state) = 0;
  // The data plane's bytes moved so far (any count that grows with them),
  // sent as RankState::progress with each heartbeat. Cheap: an atomic store,
  // for the wait loops to call whenever bytes moved.
  virtual void note_progress(uint64_t bytes_moved) = 0;
  virtual PeerView peer(int rank) const = 0;
  // Asks `rank` (-1: every peer) to heartbeat to this rank for the next lease
  // (two budgets): its view turns current with the first heartbeat, and its
  // silence is judged from then on. Non-blocking and cheap: call it again
  // while still interested; a renewal goes out only when half the lease has
  // passed. Ring neighbours (and every peer with to_all) need no asking.
  virtual void want(int rank) = 0;
  // Tells every peer now that `epoch` failed (the connected ones directly,
  // the others through the overlay). Non-blocking.
  virtual void announce_abort(uint32_t epoch, const std::string& reason) = 0;
  // Called on the liveness thread for every event; keep it short (set a flag,
  // notify a condition variable). Set before ops run; not changed afterwards.
  virtual void set_listener(std::function<void(const LivenessEvent&)> listener) = 0;
  // Highest epoch any peer announced as failed, or -1.
  virtual int64_t highest_aborted_epoch() const = 0;
  // Closes the connection to `peer` as if it broke (no goodbye), on the
  // liveness thread: both ends then see a link that broke between two live
  // ranks. `half_open`: this rank forgets it without closing it, so the peer
  // still counts it open (as after a reset that reached one side). For tests.
  virtual void drop_link_for_testing(int peer, bool half_open = false) = 0;
};

}  // namespace rcoll
