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
    if (w.health != PeerHealth::kAlive || !w.current) return -1;
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
    if (w.health == PeerHealth::kAlive && w.current && w.state.op_seq < view.match_seq) return q;
  }
  return -1;
}

std::vector<WaitLink> wait_cycle(const StallView& view) {
  if (!view.peer) return {};
  auto link_of = [](int q, const RankState& st) {
    return WaitLink{q, st.waiting_on, st.waiting_send, st.p2p_seq};
  };
  // b's wait is the counterpart of a's: the same transfer seen from its other end.
  auto counterpart = [](const WaitLink& a, const WaitLink& b) {
    return b.peer == a.rank && b.send != a.send && b.p2p_seq == a.p2p_seq;
  };
  const RankState me = view.peer(view.rank).state;
  if (!me.in_comm || me.grouped || me.waiting_on < 0 || me.waiting_on >= view.size) return {};
  std::vector<WaitLink> cycle{link_of(view.rank, me)};
  for (int hops = 0; hops < view.size; ++hops) {
    const int q = cycle.back().peer;
    if (q == view.rank) {
      // Back here: unless this rank's wait is the counterpart of the last one's.
      if (counterpart(cycle.back(), cycle.front())) return {};
      return cycle;
    }
    const PeerView w = view.peer(q);
    const RankState& st = w.state;
    if (w.health != PeerHealth::kAlive || !w.current || !st.in_comm || st.grouped ||
        st.epoch != me.epoch)
      return {};
    if (st.waiting_on < 0 || st.waiting_on >= view.size) return {};
    const WaitLink l = link_of(q, st);
    if (counterpart(cycle.back(), l)) return {};
    for (const WaitLink& seen : cycle)
      if (seen.rank == q) return {};  // a cycle that does not pass through this rank
    cycle.push_back(l);
  }
  return {};
}

std::vector<ChainMember> wait_chain(const StallView& view, int peer) {
  std::vector<ChainMember> chain;
  if (!view.peer) return chain;
  for (int q = peer; q >= 0 && q < view.size && q != view.rank &&
                     chain.size() < static_cast<size_t>(view.size);) {
    for (const ChainMember& m : chain)
      if (m.rank == q) return chain;
    const PeerView w = view.peer(q);
    if (w.health != PeerHealth::kAlive || !w.current) break;
    chain.push_back({q, w.state});
    if (!w.state.in_comm) break;
    q = w.state.waiting_on;
  }
  return chain;
}

bool chain_moved(const std::vector<ChainMember>& before, const std::vector<ChainMember>& now) {
  for (const ChainMember& b : before) {
    for (const ChainMember& n : now) {
      if (n.rank != b.rank) continue;
      const RankState& x = b.state;
      const RankState& y = n.state;
      if (x.progress != y.progress || x.op_seq != y.op_seq || x.in_comm != y.in_comm ||
          x.waiting_on != y.waiting_on || x.waiting_send != y.waiting_send ||
          x.p2p_seq != y.p2p_seq || x.epoch != y.epoch) {
        return true;
      }
    }
  }
  return false;
}

std::string describe_cycle(const std::vector<WaitLink>& cycle) {
  std::string s;
  for (const WaitLink& l : cycle) {
    const int from = l.send ? l.rank : l.peer, to = l.send ? l.peer : l.rank;
    if (!s.empty()) s += ", ";
    s += "rank " + std::to_string(l.rank) + (l.send ? " sends to rank " : " receives from rank ") +
         std::to_string(l.peer) + " (p2p #" + std::to_string(l.p2p_seq) + " " +
         std::to_string(from) + "->" + std::to_string(to) + ")";
  }
  return s;
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
