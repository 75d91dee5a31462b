// What ranks compare in an NCCL confirmation (runtime/nccl_fingerprint.h):
// a device group's pair sums agree on both ends whatever order each issued
// its members in, and differ when the two ends ran different transfers,
// the case the direction weights are for included.
#include "runtime/nccl_fingerprint.h"

#include <gtest/gtest.h>

#include <vector>

namespace rcoll {
namespace {

Op transfer(bool is_send, int peer, size_t count, uint64_t match_seq,
            DataType dtype = DataType::kFloat32) {
  Op op;
  op.kind = OpKind::kSendRecv;
  op.is_send = is_send;
  op.peer = peer;
  op.in = op.out = Buffer{nullptr, count, dtype};
  op.match_seq = match_seq;
  return op;
}

// What `rank` sums for its members with `peer`.
uint64_t pair_sum(const std::vector<Op>& group, int rank, int peer) {
  uint64_t sum = 0;
  for (const Op& m : group)
    if (m.peer == peer) sum += pair_term(m, rank);
  return sum;
}

TEST(NcclFingerprint, ASendAndItsReceiveAgree) {
  EXPECT_EQ(fingerprint(transfer(true, 1, 100, 3)), fingerprint(transfer(false, 0, 100, 3)));
  EXPECT_NE(fingerprint(transfer(true, 1, 100, 3)), fingerprint(transfer(false, 0, 101, 3)));
  EXPECT_NE(fingerprint(transfer(true, 1, 100, 3)), fingerprint(transfer(false, 0, 100, 4)));
  EXPECT_NE(fingerprint(transfer(true, 1, 100, 3)),
            fingerprint(transfer(false, 0, 100, 3, DataType::kInt32)));
}

TEST(NcclFingerprint, BothEndsOfAGroupSumTheSameWhateverTheOrder) {
  // A pipeline stage (rank 1) and the next (rank 2): 1 sends 2 messages up
  // and takes 1 back; 2 issued its side in another order.
  const std::vector<Op> one = {transfer(true, 2, 350000, 7), transfer(false, 0, 10, 4),
                               transfer(true, 2, 1800000, 8), transfer(false, 2, 64, 2)};
  const std::vector<Op> two = {transfer(true, 1, 64, 2), transfer(false, 1, 1800000, 8),
                               transfer(false, 1, 350000, 7), transfer(true, 3, 99, 1)};
  EXPECT_EQ(pair_sum(one, 1, 2), pair_sum(two, 2, 1));
  // Members with other peers do not count toward the pair.
  EXPECT_NE(pair_sum(one, 1, 2), pair_sum(one, 1, 0));
}

TEST(NcclFingerprint, DifferentTransfersDiffer) {
  const std::vector<Op> zero = {transfer(true, 1, 100, 1), transfer(false, 1, 200, 1)};
  // Rank 1 ran a receive of another size.
  EXPECT_NE(pair_sum(zero, 0, 1),
            pair_sum({transfer(false, 0, 101, 1), transfer(true, 0, 200, 1)}, 1, 0));
  // Rank 1 left a member out.
  EXPECT_NE(pair_sum(zero, 0, 1), pair_sum({transfer(false, 0, 100, 1)}, 1, 0));
  // Rank 1's sizes go the other way: the same terms unweighed (every
  // fingerprint's match_seq is 1), told apart only by their directions.
  const std::vector<Op> swapped = {transfer(false, 0, 200, 1), transfer(true, 0, 100, 1)};
  EXPECT_EQ(fingerprint(zero[0]) + fingerprint(zero[1]),
            fingerprint(swapped[0]) + fingerprint(swapped[1]));
  EXPECT_NE(pair_sum(zero, 0, 1), pair_sum(swapped, 1, 0));
  // And the right counterpart agrees.
  EXPECT_EQ(pair_sum(zero, 0, 1),
            pair_sum({transfer(false, 0, 100, 1), transfer(true, 0, 200, 1)}, 1, 0));
}

}  // namespace
}  // namespace rcoll
