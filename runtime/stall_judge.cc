#include "runtime/stall_judge.h"

namespace rcoll {

const char* to_string(Stall s) {
  switch (s) {
    case Stall::kDead: return "dead";
    case Stall::kSilent: return "silent";
    case Stall::kWait: return "straggler";
    case Stall::kStragglerExpired: return "straggler, too late";
    case Stall::kHung: return "hung";
  }
  return "?";
}

int holds_up(const StallView& view, int peer) {
  if (peer < 0 || peer >= view.size || !view.peer) return -1;
  // A pipeline's stages behind a slow one each wait on the next one up: the
  // chain ends at the rank that is not waiting on anyone (in compute), or at
  // one that is not a send or receive, or comes back here.
  int q = peer;
  for (int hops = 0; hops < view.size; ++hops) {
    const PeerView w = view.peer(q);
    if (w.health != PeerHealth::kAlive) return -1;
    if (!w.state.in_comm) return q;
    if (w.state.waiting_on < 0 || w.state.waiting_on >= view.size || w.state.waiting_on == view.rank) return -1;
    q = w.state.waiting_on;
  }
  return -1;
}

int first_behind(const StallView& view) {
  // In a ring or chain most ranks wait on a neighbour that is itself waiting:
  // any live rank that has not reached the op explains the stall.
  for (int q = 0; q < view.size && view.peer; ++q) {
    if (q == view.rank) continue;
    const PeerView w = view.peer(q);
    if (w.health == PeerHealth::kAlive && w.state.op_seq < view.match_seq) return q;
  }
  return -1;
}

StallVerdict judge_stall(const StallView& view, const StallRules& rules) {
  const int awaited = view.awaited;
  if (awaited < 0 || awaited >= view.size || !view.peer) return {Stall::kHung, awaited};
  const bool seen_dead = view.seen_dead && view.seen_dead(awaited);
  if (view.peer(awaited).health == PeerHealth::kDead || seen_dead) return {Stall::kDead, awaited};
  // A silent rank (frozen, partitioned) explains the stall better than a live
  // one that is behind: that one may be stuck in an earlier op waiting for it.
  for (int q = 0; q < view.size; ++q) {
    if (q != view.rank && view.peer(q).health == PeerHealth::kSilent) return {Stall::kSilent, q};
  }
  const int late = view.point_to_point ? holds_up(view, awaited) : first_behind(view);
  if (late >= 0) {
    if (rules.late < rules.straggler_timeout) return {Stall::kWait, late};
    return {Stall::kStragglerExpired, late};
  }
  return {Stall::kHung, awaited};
}

}  // namespace rcoll
