// Detection (runtime/stall_judge.h) on fabricated views of the peers: who
// holds up a stalled op, and whether to wait or recover. No sockets, no clock.
#include "runtime/stall_judge.h"

#include <gtest/gtest.h>

#include <map>

namespace rcoll {
namespace {

using namespace std::chrono_literals;

// A group of `size` ranks seen from `rank`: every peer alive, in compute at
// collective seq 5, unless a test says otherwise.
struct Group {
  int rank = 0;
  int size = 4;
  std::map<int, PeerView> views;
  std::map<int, bool> dead;

  PeerView& at(int q) {
    auto it = views.find(q);
    if (it == views.end()) {
      PeerView v;
      v.state.op_seq = 5;
      it = views.emplace(q, v).first;
    }
    return it->second;
  }
  // q is inside a send or receive waiting on `on`.
  void waits(int q, int on) {
    at(q).state.in_comm = true;
    at(q).state.waiting_on = on;
  }
  void in_collective(int q, uint64_t seq) {
    at(q).state.in_comm = true;
    at(q).state.op_seq = seq;
    at(q).state.waiting_on = -1;
  }
  StallView view(bool p2p, int awaited, uint64_t match_seq = 6) {
    StallView v;
    v.rank = rank;
    v.size = size;
    v.point_to_point = p2p;
    v.match_seq = match_seq;
    v.awaited = awaited;
    v.peer = [this](int q) { return at(q); };
    v.seen_dead = [this](int q) { return dead.count(q) > 0 && dead.at(q); };
    return v;
  }
};

StallRules patient() {
  StallRules r;
  r.late = 12s;
  r.straggler_timeout = 30min;
  return r;
}

TEST(StallJudge, DeadAwaitedPeerIsAnErrorNamingIt) {
  Group g;
  g.at(1).health = PeerHealth::kDead;
  const StallVerdict v = judge_stall(g.view(false, 1), patient());
  EXPECT_EQ(v.kind, Stall::kDead);
  EXPECT_EQ(v.peer, 1);
}

TEST(StallJudge, APeerThisRankSawDieIsDeadEvenIfLivenessLags) {
  Group g;
  g.dead[2] = true;
  EXPECT_EQ(judge_stall(g.view(true, 2), patient()).kind, Stall::kDead);
}

TEST(StallJudge, ASilentRankAnywhereExplainsTheStallBeforeALateOne) {
  Group g;
  for (int q = 1; q < 4; ++q) g.in_collective(q, 6);
  g.at(2).state.op_seq = 3;  // behind...
  g.at(3).health = PeerHealth::kSilent;  // ...but rank 3 is frozen: it may be what rank 2 waits for
  const StallVerdict v = judge_stall(g.view(false, 1), patient());
  EXPECT_EQ(v.kind, Stall::kSilent);
  EXPECT_EQ(v.peer, 3);
}

TEST(StallJudge, CollectiveWaitsForAnyLiveRankNotAtTheOpYet) {
  Group g;
  g.in_collective(1, 6);  // the ring neighbour is in the op, waiting itself
  g.in_collective(3, 6);
  g.at(2).state.op_seq = 4;  // rank 2 has not reached op 6: restoring its data loader, say
  const StallVerdict v = judge_stall(g.view(false, 1), patient());
  EXPECT_EQ(v.kind, Stall::kWait);
  EXPECT_EQ(v.peer, 2);
}

TEST(StallJudge, CollectiveWithEveryRankAtTheOpIsHung) {
  Group g;
  for (int q = 1; q < 4; ++q) g.in_collective(q, 6);
  const StallVerdict v = judge_stall(g.view(false, 1), patient());
  EXPECT_EQ(v.kind, Stall::kHung);
  EXPECT_EQ(v.peer, 1);
}

TEST(StallJudge, StragglerPastTheStragglerTimeoutIsNoLongerWaitedFor) {
  Group g;
  g.in_collective(1, 6);
  g.in_collective(3, 6);
  g.at(2).state.op_seq = 4;
  StallRules r = patient();
  r.late = 31min;
  EXPECT_EQ(judge_stall(g.view(false, 1), r).kind, Stall::kStragglerExpired);
}

// The op's timeout (RCOLL_OP_TIMEOUT_MS, OpOptions::timeout) guards
// progress: it is what starts the judging, however short, and never what
// ends the wait for a live straggler.
TEST(StallJudge, AStragglerIsWaitedForWhateverTheOpsTimeout) {
  Group g;
  g.in_collective(1, 6);
  g.in_collective(3, 6);
  g.at(2).state.op_seq = 4;
  StallRules r = patient();
  r.late = std::chrono::seconds(25);  // far past a 3 s op timeout
  const StallVerdict v = judge_stall(g.view(false, 1), r);
  EXPECT_EQ(v.kind, Stall::kWait);
  EXPECT_EQ(v.peer, 2);
}

TEST(StallJudge, SendToAPeerInComputeWaitsForIt) {
  Group g;  // rank 0 sends to rank 1, which has not posted its receive yet
  const StallVerdict v = judge_stall(g.view(true, 1), patient());
  EXPECT_EQ(v.kind, Stall::kWait);
  EXPECT_EQ(v.peer, 1);
}

// A 4-stage pipeline seen from the last stage: 3 waits on 2, which waits on
// 1, which computes. Before, stage 3 saw its peer "in comm" and recovered.
TEST(StallJudge, PipelineStageFollowsTheChainOfWaitsToTheStraggler) {
  Group g;
  g.rank = 3;
  g.waits(2, 1);
  g.waits(0, 1);
  const StallView view = g.view(true, 2);
  EXPECT_EQ(holds_up(view, 2), 1);
  const StallVerdict v = judge_stall(view, patient());
  EXPECT_EQ(v.kind, Stall::kWait);
  EXPECT_EQ(v.peer, 1);
}

// Heartbeats go to ring neighbours only: a peer's view that is not current
// (no heartbeat since this rank asked for it) is its state as last heard,
// maybe long ago. It is unknown: not a straggler, not a link of a chain or a
// cycle. Before PeerView::current, a stale "in compute" read as a straggler.
TEST(StallJudge, AViewThatIsNotCurrentIsUnknownNotAStraggler) {
  Group g;
  g.in_collective(1, 6);
  g.in_collective(3, 6);
  g.at(2).state.op_seq = 4;
  g.at(2).current = false;  // last heard at op 4, long ago
  EXPECT_EQ(first_behind(g.view(false, 1)), -1);
  EXPECT_EQ(judge_stall(g.view(false, 1), patient()).kind, Stall::kHung);

  Group p;  // a pipeline: 3 waits on 2, which waits on 1; rank 1 last heard in compute
  p.rank = 3;
  p.waits(2, 1);
  p.at(1).current = false;
  EXPECT_EQ(holds_up(p.view(true, 2), 2), -1);
  EXPECT_EQ(judge_stall(p.view(true, 2), patient()).kind, Stall::kHung);
  EXPECT_EQ(wait_chain(p.view(true, 2), 2).size(), 1u) << "the chain stops at the stale view";
  p.at(1).current = true;
  EXPECT_EQ(holds_up(p.view(true, 2), 2), 1);
}

TEST(StallJudge, ChainEndingInACollectiveIsHung) {
  Group g;
  g.rank = 3;
  g.waits(2, 1);
  g.in_collective(1, 9);  // rank 1 sits in a collective: a desync or a hang, not a straggler
  EXPECT_EQ(holds_up(g.view(true, 2), 2), -1);
  EXPECT_EQ(judge_stall(g.view(true, 2), patient()).kind, Stall::kHung);
}

TEST(StallJudge, ChainComingBackToThisRankIsADeadlockNotAStraggler) {
  Group g;  // 0 waits on 1, 1 on 2, 2 on 0: sends that wait on each other in a cycle
  g.waits(1, 2);
  g.waits(2, 0);
  EXPECT_EQ(holds_up(g.view(true, 1), 1), -1);
  EXPECT_EQ(judge_stall(g.view(true, 1), patient()).kind, Stall::kHung);
}

TEST(StallJudge, ChainThroughACycleAmongPeersEnds) {
  Group g;  // 1 and 2 wait on each other; the walk must stop
  g.waits(1, 2);
  g.waits(2, 1);
  EXPECT_EQ(holds_up(g.view(true, 1), 1), -1);
}

TEST(StallJudge, ChainPastASilentRankIsNotAStraggler) {
  Group g;
  g.rank = 3;
  g.waits(2, 1);
  g.at(1).health = PeerHealth::kSilent;
  EXPECT_EQ(holds_up(g.view(true, 2), 2), -1);
  const StallVerdict v = judge_stall(g.view(true, 2), patient());
  EXPECT_EQ(v.kind, Stall::kSilent);
  EXPECT_EQ(v.peer, 1);
}

TEST(StallJudge, NoLivenessViewIsHung) {
  StallView v;
  v.size = 2;
  v.awaited = 1;
  EXPECT_EQ(judge_stall(v, patient()).kind, Stall::kHung);
  v.peer = [](int) { return PeerView{}; };
  v.awaited = -1;
  EXPECT_EQ(judge_stall(v, patient()).kind, Stall::kHung);
}

// ---- Cycles of ungrouped sends and receives (wait_cycle) ----

// q is inside an ungrouped send (or receive) of the pair's `seq`-th transfer, waiting on `on`.
void transfer(Group& g, int q, int on, bool send, uint32_t seq, bool grouped = false) {
  g.waits(q, on);
  g.at(q).state.waiting_send = send;
  g.at(q).state.p2p_seq = seq;
  g.at(q).state.grouped = grouped;
}

TEST(WaitCycle, EveryStageReceivingFirstAroundARingIsACycle) {
  Group g;  // 0 <- 3 <- 2 <- 1 <- 0: each receives from the one before, nobody sends
  for (int q = 0; q < 4; ++q) transfer(g, q, (q + 3) % 4, false, 1);
  const std::vector<WaitLink> c = wait_cycle(g.view(true, 3));
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0], (WaitLink{0, 3, false, 1}));
  EXPECT_EQ(c[1], (WaitLink{3, 2, false, 1}));
  EXPECT_EQ(describe_cycle(c).substr(0, 62),
            "rank 0 receives from rank 3 (p2p #1 3->0), rank 3 receives fro");
}

TEST(WaitCycle, AStaleViewBreaksIt) {
  Group g;
  for (int q = 0; q < 4; ++q) transfer(g, q, (q + 3) % 4, false, 1);
  g.at(2).current = false;
  EXPECT_TRUE(wait_cycle(g.view(true, 3)).empty());
}

TEST(WaitCycle, TwoRanksSendingToEachOtherIsACycle) {
  Group g;
  g.size = 2;
  transfer(g, 0, 1, true, 4);
  transfer(g, 1, 0, true, 7);
  const std::vector<WaitLink> c = wait_cycle(g.view(true, 1));
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(describe_cycle(c),
            "rank 0 sends to rank 1 (p2p #4 0->1), rank 1 sends to rank 0 (p2p #7 1->0)");
}

TEST(WaitCycle, ASendAndItsReceiveWaitingOnEachOtherIsAHungPairNotACycle) {
  Group g;
  g.size = 2;
  transfer(g, 0, 1, true, 4);
  transfer(g, 1, 0, false, 4);  // the counterpart: the data plane hung, a recovery mends it
  EXPECT_TRUE(wait_cycle(g.view(true, 1)).empty());
  transfer(g, 1, 0, false, 5);  // a later receive: rank 1 skipped or reordered one
  EXPECT_EQ(wait_cycle(g.view(true, 1)).size(), 2u);
}

TEST(WaitCycle, ThreeRanksInACircleAreACycleUnlessTwoOfThemAreAPair) {
  Group g;  // 0 sends to 1; 1 receives from 2; 2 receives from 0 ... and 0's send is not 2's
            // counterpart,
  transfer(g, 0, 1, true, 1);
  transfer(g, 1, 2, false, 1);
  transfer(g, 2, 0, false, 1);
  EXPECT_EQ(wait_cycle(g.view(true, 1)).size(), 3u);
  // ... but if 0 were receiving from 2 what 2 sends it, 2 and 0 form a hung pair.
  transfer(g, 2, 0, true, 3);
  transfer(g, 0, 2, false, 3);
  EXPECT_TRUE(wait_cycle(g.view(true, 2)).empty());
}

TEST(WaitCycle, AGroupOnTheWayOrARankInComputeBreaksIt) {
  Group g;
  for (int q = 0; q < 4; ++q) transfer(g, q, (q + 3) % 4, false, 1);
  transfer(g, 2, 1, false, 1, /*grouped=*/true);  // groups never wait in a cycle of their own
  EXPECT_TRUE(wait_cycle(g.view(true, 3)).empty());
  transfer(g, 2, 1, false, 1);
  g.at(1).state.in_comm = false;  // a straggler, not a cycle
  EXPECT_TRUE(wait_cycle(g.view(true, 3)).empty());
  g.at(1).state.in_comm = true;
  g.at(1).state.epoch = 3;  // a view from another epoch
  EXPECT_TRUE(wait_cycle(g.view(true, 3)).empty());
  g.at(1).state.epoch = 0;
  g.at(1).health = PeerHealth::kSilent;
  EXPECT_TRUE(wait_cycle(g.view(true, 3)).empty());
  g.at(1).health = PeerHealth::kAlive;
  EXPECT_EQ(wait_cycle(g.view(true, 3)).size(), 4u);
}

TEST(WaitCycle, ACycleElsewhereIsNotThisRanks) {
  Group g;  // 0 waits on 1; 1 and 2 send to each other
  transfer(g, 0, 1, false, 1);
  transfer(g, 1, 2, true, 1);
  transfer(g, 2, 1, true, 1);
  EXPECT_TRUE(wait_cycle(g.view(true, 1)).empty());
  g.rank = 1;
  EXPECT_EQ(wait_cycle(g.view(true, 2)).size(), 2u);
}

TEST(WaitChain, FollowsTheWaitsAndSeesWhoMoved) {
  Group g;  // 0 sends to 1; 1 receives from 0 what was queued before (the pair back to 0), 2 in
            // compute
  g.size = 4;
  transfer(g, 0, 1, true, 9);
  transfer(g, 1, 2, true, 3);
  g.at(2).state.in_comm = false;
  const std::vector<ChainMember> before = wait_chain(g.view(true, 1), 1);
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0].rank, 1);
  EXPECT_EQ(before[1].rank, 2);
  EXPECT_FALSE(chain_moved(before, wait_chain(g.view(true, 1), 1)));
  g.at(2).state.progress = 7;  // rank 2 moved bytes: the chain is busy, not hung
  EXPECT_TRUE(chain_moved(before, wait_chain(g.view(true, 1), 1)));
  g.at(2).state.progress = 0;
  transfer(g, 1, 2, true, 4);  // rank 1 went on to its next send
  EXPECT_TRUE(chain_moved(before, wait_chain(g.view(true, 1), 1)));
}

TEST(WaitChain, StopsWhereItComesBackOrRepeats) {
  Group g;
  transfer(g, 1, 0, false, 1);  // back to this rank (0)
  EXPECT_EQ(wait_chain(g.view(true, 1), 1).size(), 1u);
  transfer(g, 1, 2, false, 1);
  transfer(g, 2, 1, false, 1);  // 1 and 2 wait on each other
  EXPECT_EQ(wait_chain(g.view(true, 1), 1).size(), 2u);
  g.at(2).health = PeerHealth::kSilent;
  EXPECT_EQ(wait_chain(g.view(true, 1), 1).size(), 1u);
}

TEST(StallJudge, VerdictsHaveNames) {
  for (Stall s : {Stall::kDead, Stall::kSilent, Stall::kWait, Stall::kStragglerExpired, Stall::kHung}) {
    EXPECT_STRNE(to_string(s), "?");
  }
}

}  // namespace
}  // namespace rcoll
