// Which algorithm an op runs, by size and group size (kAuto): every rank must
// pick the same one, and the switch points are the measured ones the comments
// in runtime/algorithms/ give. Results are checked in communicator_test.
#include <gtest/gtest.h>

#include "runtime/algorithms/context.h"

namespace rcoll {
namespace {

Op allreduce_of(size_t bytes) {
  Op op;
  op.kind = OpKind::kAllreduce;
  op.in = op.out = Buffer{nullptr, bytes / 4, DataType::kFloat32};
  return op;
}

const char* name(AllreduceAlgorithm a) {
  switch (a) {
    case AllreduceAlgorithm::kRing: return "ring";
    case AllreduceAlgorithm::kDirect: return "direct";
    case AllreduceAlgorithm::kHalvingDoubling: return "halving-doubling";
    case AllreduceAlgorithm::kRecursiveDoubling: return "recursive doubling";
    case AllreduceAlgorithm::kAuto: return "auto";
  }
  return "?";
}

TEST(AlgorithmChoice, AllreduceBySizeAndGroup) {
  const Tuning t;  // small_allreduce_bytes 64 KiB
  struct Case {
    int ranks;
    size_t bytes;
    AllreduceAlgorithm want;
  };
  const Case cases[] = {
      // 2 ranks: one exchange up to 64 KiB, halving-doubling above.
      {2, 4096, AllreduceAlgorithm::kDirect},
      {2, 64 << 10, AllreduceAlgorithm::kDirect},
      {2, (64 << 10) + 4, AllreduceAlgorithm::kHalvingDoubling},
      {2, 64 << 20, AllreduceAlgorithm::kHalvingDoubling},
      // Power-of-two groups above 2: recursive doubling up to 64 KiB x 4/p.
      {4, 4, AllreduceAlgorithm::kRecursiveDoubling},
      {4, 64 << 10, AllreduceAlgorithm::kRecursiveDoubling},
      {4, (64 << 10) + 4, AllreduceAlgorithm::kHalvingDoubling},
      {8, 32 << 10, AllreduceAlgorithm::kRecursiveDoubling},
      {8, (32 << 10) + 4, AllreduceAlgorithm::kHalvingDoubling},
      {16, 16 << 10, AllreduceAlgorithm::kRecursiveDoubling},
      {16, 1 << 20, AllreduceAlgorithm::kHalvingDoubling},
      {32, 8 << 10, AllreduceAlgorithm::kRecursiveDoubling},
      {32, 1 << 20, AllreduceAlgorithm::kRing},  // halving-doubling's staging stops at 16 ranks
      // Other groups: direct up to 64 KiB, the ring above.
      {3, 64 << 10, AllreduceAlgorithm::kDirect},
      {3, (64 << 10) + 4, AllreduceAlgorithm::kRing},
      {6, 4096, AllreduceAlgorithm::kDirect},
  };
  for (const Case& c : cases) {
    EXPECT_STREQ(name(allreduce_algorithm(allreduce_of(c.bytes), c.ranks, t)), name(c.want))
        << c.ranks << " ranks, " << c.bytes << " bytes";
  }
}

TEST(AlgorithmChoice, PinnedAllreduceFallsBackWhereItCannotRun) {
  Tuning t;
  t.allreduce = AllreduceAlgorithm::kRecursiveDoubling;
  EXPECT_STREQ(name(allreduce_algorithm(allreduce_of(1 << 20), 8, t)), "recursive doubling");
  EXPECT_STREQ(name(allreduce_algorithm(allreduce_of(4096), 6, t)), "direct");
  t.allreduce = AllreduceAlgorithm::kHalvingDoubling;
  EXPECT_STREQ(name(allreduce_algorithm(allreduce_of(4096), 6, t)), "ring");
}

// Recursive doubling is one slice, as direct: the ledger re-runs it whole.
TEST(AlgorithmChoice, SmallAllreduceIsOneSlice) {
  Tuning t;
  t.piece_bytes = 1024;
  for (int ranks : {2, 3, 4, 8}) {
    EXPECT_EQ(plan_slices(allreduce_of(16 << 10), 0, ranks, t, 0, SIZE_MAX).slices, 1u) << ranks << " ranks";
  }
}

Op broadcast_of(size_t bytes, int root, uint64_t match_seq) {
  Op op;
  op.kind = OpKind::kBroadcast;
  op.in = op.out = Buffer{nullptr, bytes / 4, DataType::kFloat32};
  op.root = root;
  op.match_seq = match_seq;
  return op;
}

// Eager broadcasts run down the chain up to 8 ranks and a binomial tree above;
// a rank's first peer is its parent (the root's: its first child).
TEST(AlgorithmChoice, EagerBroadcastFirstPeers) {
  const Tuning t;
  const Op eager = broadcast_of(4096, 1, 3);
  ASSERT_TRUE(broadcast_is_eager(eager, t));
  // Chain at 4 ranks from root 1: 1 -> 2 -> 3 -> 0.
  EXPECT_EQ(broadcast_first_peer(eager, 1, 4, t), 2);
  EXPECT_EQ(broadcast_first_peer(eager, 2, 4, t), 1);
  EXPECT_EQ(broadcast_first_peer(eager, 0, 4, t), 3);
  // Binomial tree at 11 ranks from root 1, positions v = rank - 1: the root's
  // children are v = 4, 8, 2, 1 (largest subtree first: 4, 3, 2 and 1 ranks);
  // v = 6's parent is v = 4; v = 9's is v = 8.
  EXPECT_EQ(broadcast_first_peer(eager, 1, 11, t), 5);
  EXPECT_EQ(broadcast_first_peer(eager, 7, 11, t), 5);
  EXPECT_EQ(broadcast_first_peer(eager, 10, 11, t), 9);
  EXPECT_EQ(broadcast_first_peer(eager, 2, 11, t), 1);
  // Eager at every sequence number (credit points included: the credits
  // follow the op, they do not change it) up to 8 KiB.
  for (uint64_t seq :
       {uint64_t{16}, uint64_t{32}, eager_credit_min_period(4), eager_credit_min_period(11)})
    EXPECT_TRUE(broadcast_is_eager(broadcast_of(8192, 1, seq), t)) << "seq " << seq;
  // Larger broadcasts of one frame are acknowledged and go direct from the root.
  const Op acked = broadcast_of(8192 + 4, 1, 3);
  ASSERT_FALSE(broadcast_is_eager(acked, t));
  EXPECT_TRUE(broadcast_is_star(acked, 4, t));
  EXPECT_EQ(broadcast_first_peer(acked, 3, 4, t), 1);
  EXPECT_FALSE(broadcast_is_star(eager, 4, t));
}

// Credits are collected a point after their credit point, or
// kCreditLagPeriods points where more than 2 ranks share at most 2 CPUs; with
// fewer eager broadcasts, as many longest periods after it.
TEST(AlgorithmChoice, CreditLagIsLongerOnlyWhereRanksShareFewCpus) {
  Tuning own, shared;
  shared.few_shared_cpus = true;
  EXPECT_EQ(eager_credit_lag_points(4, own), 1u);
  EXPECT_EQ(eager_credit_lag_points(2, shared), 1u);
  EXPECT_EQ(eager_credit_lag_points(3, shared), kCreditLagPeriods);
  EXPECT_EQ(eager_credit_lag_points(11, shared), kCreditLagPeriods);
  EXPECT_EQ(eager_credit_lag_ops(4, own), kMaxCreditPeriod);
  EXPECT_EQ(eager_credit_lag_ops(4, shared), kCreditLagPeriods * kMaxCreditPeriod);
  EXPECT_EQ(eager_credit_lag_ops(40, shared), kCreditLagPeriods * eager_credit_min_period(40));
}

// Credit points are at least 32 collectives apart up to 5 ranks, 8(p - 1)
// above (at most 1/4 credit frame per op).
TEST(AlgorithmChoice, CreditPointsAreAtLeastAMinimumPeriodApart) {
  EXPECT_EQ(eager_credit_min_period(2), 32u);
  EXPECT_EQ(eager_credit_min_period(5), 32u);
  EXPECT_EQ(eager_credit_min_period(11), 80u);
  EXPECT_EQ(eager_credit_min_period(40), 312u);
}

// Over TCP above 2 ranks the epoch's tuning makes broadcasts eager up to
// 256 KiB: a 64 KiB one goes down the chain, not direct from the root, and a
// 256 KiB one (two frames) too; one byte more is acknowledged again.
TEST(AlgorithmChoice, EagerBroadcastRangeFollowsTheTuning) {
  Tuning tcp;
  tcp.eager_broadcast_bytes = kEagerBroadcastBytesTcp;
  const Op mid = broadcast_of(64 << 10, 1, 3);
  EXPECT_FALSE(broadcast_is_eager(mid, Tuning{}));
  EXPECT_TRUE(broadcast_is_star(mid, 4, Tuning{}));
  ASSERT_TRUE(broadcast_is_eager(mid, tcp));
  EXPECT_FALSE(broadcast_is_star(mid, 4, tcp));
  EXPECT_EQ(broadcast_first_peer(mid, 3, 4, tcp), 2) << "rank 3's parent in the chain from root 1";
  EXPECT_TRUE(broadcast_is_eager(broadcast_of(256 << 10, 1, 3), tcp));
  EXPECT_FALSE(broadcast_is_eager(broadcast_of((256 << 10) + 4, 1, 3), tcp));
}

// Above the eager range a broadcast of several frames runs the chain, unless
// the group shares at most 2 CPUs or the user pinned the star; a 2-rank
// broadcast is the chain whatever the tuning (the star would be the same
// transfer). The star's frames are as large as the link allows.
TEST(AlgorithmChoice, StarBroadcastWhereTheRanksShareFewCpus) {
  Tuning t;
  t.eager_broadcast_bytes = kEagerBroadcastBytesTcp;
  t.stream_piece_bytes = 1 << 20;
  const Op big = broadcast_of(4 << 20, 2, 3);
  const Op small = broadcast_of(4096, 2, 3);
  EXPECT_FALSE(broadcast_is_star(big, 4, t));
  EXPECT_EQ(broadcast_piece_bytes(big, 4, t), t.piece_bytes);
  EXPECT_EQ(broadcast_first_peer(big, 0, 4, t), 1) << "rank 0 after rank 3 in the chain from root 2";

  Tuning few = t;
  few.few_shared_cpus = true;
  EXPECT_TRUE(large_broadcasts_by_star(4, few));
  EXPECT_FALSE(large_broadcasts_by_star(2, few));
  EXPECT_FALSE(large_broadcasts_by_star(4, t));
  EXPECT_TRUE(broadcast_is_star(big, 4, few));
  EXPECT_TRUE(broadcast_is_star(big, 3, few));
  EXPECT_FALSE(broadcast_is_star(big, 2, few));
  EXPECT_FALSE(broadcast_is_star(small, 4, few)) << "eager broadcasts keep their tree";
  EXPECT_EQ(broadcast_piece_bytes(big, 4, few), size_t{1} << 20);
  EXPECT_EQ(broadcast_piece_bytes(small, 4, few), t.piece_bytes) << "an eager one keeps the chain's frames";
  EXPECT_EQ(broadcast_first_peer(big, 0, 4, few), 2) << "every rank but the root talks to the root";
  EXPECT_EQ(broadcast_first_peer(big, 2, 4, few), 3);

  Tuning chain = few;
  chain.broadcast = BroadcastAlgorithm::kChain;
  EXPECT_FALSE(broadcast_is_star(big, 4, chain));
  const Op one_frame = broadcast_of(100 << 10, 2, 3);
  EXPECT_TRUE(broadcast_is_star(one_frame, 4, Tuning{}));
  Tuning chain_only;
  chain_only.broadcast = BroadcastAlgorithm::kChain;
  EXPECT_FALSE(broadcast_is_star(one_frame, 4, chain_only)) << "pinned: one frame goes down the chain too";
  EXPECT_EQ(broadcast_piece_bytes(big, 4, chain), t.piece_bytes);

  Tuning star = t;
  star.broadcast = BroadcastAlgorithm::kStar;
  EXPECT_TRUE(broadcast_is_star(big, 4, star));
  EXPECT_FALSE(broadcast_is_star(big, 2, star));
  EXPECT_EQ(broadcast_piece_bytes(big, 4, star), size_t{1} << 20);
}

}  // namespace
// A 2-rank allgather forwards nothing: its frames are as large as the link
// allows, and the ledger's slices are those frames. Above 2 ranks blocks are
// forwarded (ring, recursive doubling) and keep the pipelined frames; pinned
// frames (no stream size measured) stay as pinned.
TEST(AlgorithmChoice, TwoRankAllgatherInFramesAsLargeAsTheLinkAllows) {
  Tuning t;
  t.stream_piece_bytes = 1 << 20;
  EXPECT_EQ(allgather_piece_bytes(2, t), size_t{1} << 20);
  EXPECT_EQ(allgather_piece_bytes(3, t), t.piece_bytes);
  EXPECT_EQ(allgather_piece_bytes(4, t), t.piece_bytes);
  Tuning pinned;
  pinned.piece_bytes = 64 << 10;
  EXPECT_EQ(allgather_piece_bytes(2, pinned), size_t{64} << 10);

  Op gather;
  gather.kind = OpKind::kAllgather;
  gather.in = Buffer{nullptr, (4 << 20) / 4, DataType::kFloat32};  // 4 MiB blocks
  gather.out = Buffer{nullptr, 2 * gather.in.count, DataType::kFloat32};
  EXPECT_EQ(plan_slices(gather, 0, 2, t, 0, SIZE_MAX).slices, 4u);
  gather.out.count = 4 * gather.in.count;
  EXPECT_EQ(plan_slices(gather, 0, 4, t, 0, SIZE_MAX).slices, (4u << 20) / t.piece_bytes);
}

}  // namespace rcoll
