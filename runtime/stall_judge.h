// Detection, the first stage of recovery (DESIGN.md, Liveness): an op has
// moved no bytes for its progress budget; who holds it up, and what to do?
// A pure judgement from what this rank knows of its peers (their liveness
// view and the deaths its own connections saw), so it can be tested on
// fabricated views, with no sockets and no clock.
//
//   dead      a peer this op waits on is gone: a typed error, no recovery
//   silent    some rank stopped heartbeating (frozen, partitioned): recover,
//             and the recovery waits for it
//   straggler a live rank has not reached the op yet (a collective: any rank
//             behind; a send or receive: the rank at the end of the chain of
//             waits, in compute): wait, up to the straggler timeout (the
//             op's own timeout, explicit or derived, does not end it)
//   hung      nobody is behind and nobody is silent: the data plane hung,
//             recover
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "runtime/liveness.h"

namespace rcoll {

// What detection knows when an op stalls.
struct StallView {
  int rank = 0;
  int size = 1;
  bool point_to_point = false;  // a send or receive (else a collective)
  uint64_t match_seq = 0;       // a collective's sequence number
  int awaited = -1;             // the peer the op waits on (-1: none in particular)
  // Rank q's liveness view (never asked for this rank's own), and whether
  // this rank saw q die (its connections closed). Looked up as needed: a
  // chain of waits visits only the ranks on it. A view that is not current
  // (PeerView::current: no heartbeat since this rank asked for them) reads
  // as unknown: never a straggler, never a link of a chain or cycle.
  std::function<PeerView(int)> peer;
  std::function<bool(int)> seen_dead;
};

// The op's timeout (explicit or derived) is what started the judging: it
// guards progress. It never ends the wait for a live straggler; only the
// straggler timeout does.
struct StallRules {
  Clock::duration late{};  // since this rank arrived at the op
  Clock::duration straggler_timeout{};
};

enum class Stall : uint8_t {
  kDead,             // `peer` is gone
  kSilent,           // `peer` stopped heartbeating
  kWait,             // `peer` is a live straggler: keep waiting
  kStragglerExpired, // `peer` is a live straggler, but the op may wait no longer
  kHung,             // no rank explains it (`peer`: the awaited one, or -1)
};
const char* to_string(Stall s);

struct StallVerdict {
  Stall kind = Stall::kHung;
  int peer = -1;
};

StallVerdict judge_stall(const StallView& view, const StallRules& rules);

// For a send or receive waiting on `peer`: the rank at the end of the chain
// of waits that is alive and in compute (a straggler), or -1 when the chain
// ends in a collective, at a rank not heard from, or back at this rank.
int holds_up(const StallView& view, int peer);

// For a collective: the first live rank that has not reached `match_seq`, or -1.
int first_behind(const StallView& view);

// One rank's wait in a cycle: `rank` waits on `peer` to take its send (or to
// send what it receives), the pair's `p2p_seq`-th send from sender to receiver.
struct WaitLink {
  int rank = -1;
  int peer = -1;
  bool send = false;
  uint32_t p2p_seq = 0;
  bool operator==(const WaitLink&) const = default;
};
// A cycle of ungrouped sends and receives that can never complete, starting
// at this rank: every rank on it is in comm in the same epoch, waits on the
// next, and the next is in some other op than the counterpart of that wait
// (a send and its receive waiting on each other is a hung pair of the data
// plane, which a recovery mends, not a cycle). Ops run one at a time in issue
// order, so none of them can end. Empty when there is no such cycle through
// this rank (a group on the way, a rank in compute or unheard, a wait that
// leads into a cycle elsewhere).
std::vector<WaitLink> wait_cycle(const StallView& view);
// The ranks a send or receive waiting on `peer` waits on, directly or down
// the chain of waits (until it ends, repeats or comes back here), with what
// their heartbeats said. Taken twice, a few heartbeats apart: if any of them
// moved bytes or went on meanwhile (chain_moved), the chain is busy (a peer
// still working through what was queued for it before), not hung.
struct ChainMember {
  int rank = -1;
  RankState state;
};
std::vector<ChainMember> wait_chain(const StallView& view, int peer);
bool chain_moved(const std::vector<ChainMember>& before, const std::vector<ChainMember>& now);

// "rank 0 sends to rank 1 (p2p #4 0->1), rank 1 receives from rank 0 ..."
std::string describe_cycle(const std::vector<WaitLink>& cycle);

}  // namespace rcoll
