// Op numbering at issue (runtime/op_numbering.h): sequence numbers for the
// caller, match numbers for the peers, given back by ops that will not run.
#include "runtime/op_numbering.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace rcoll {
namespace {

Op collective() {
  Op op;
  op.kind = OpKind::kAllreduce;
  return op;
}

Op p2p(bool is_send, int peer) {
  Op op;
  op.kind = OpKind::kSendRecv;
  op.is_send = is_send;
  op.peer = peer;
  return op;
}

TEST(OpNumbering, CollectivesAndEachPeerAndDirectionCountApart) {
  OpNumbering n(3);
  Op a = collective(), s1 = p2p(true, 1), r1 = p2p(false, 1), s2 = p2p(true, 2), b = collective(),
     s1b = p2p(true, 1);
  for (Op* op : {&a, &s1, &r1, &s2, &b, &s1b}) {
    n.take(*op);
    n.match(*op);
  }
  EXPECT_EQ(a.seq, 1u);
  EXPECT_EQ(s1b.seq, 6u);
  EXPECT_EQ(n.last(), 6u);
  EXPECT_EQ(a.match_seq, 1u);
  EXPECT_EQ(b.match_seq, 2u);
  EXPECT_EQ(s1.match_seq, 1u);
  EXPECT_EQ(r1.match_seq, 1u)
      << "a receive from 1 is the first transfer 1->this, whatever was sent to 1";
  EXPECT_EQ(s2.match_seq, 1u);
  EXPECT_EQ(s1b.match_seq, 2u);
}

// A group takes one seq per member (the carrier the first) and each member
// is matched as its ungrouped form would be.
TEST(OpNumbering, AGroupNumbersEachMemberAsIfUngrouped) {
  OpNumbering n(3);
  Op first = p2p(true, 1);
  n.take(first);
  n.match(first);
  Op carrier;
  carrier.group =
      std::make_shared<std::vector<Op>>(std::vector<Op>{p2p(true, 1), p2p(false, 2), p2p(true, 1)});
  EXPECT_EQ(n.take(carrier), 2u);
  n.match(carrier);
  const std::vector<Op>& m = *carrier.group;
  EXPECT_EQ(m[0].seq, 2u);
  EXPECT_EQ(m[2].seq, 4u);
  EXPECT_EQ(m[0].match_seq, 2u);
  EXPECT_EQ(m[1].match_seq, 1u);
  EXPECT_EQ(m[2].match_seq, 3u);
  Op next = collective();
  EXPECT_EQ(n.take(next), 5u);
}

// Bad input never consumes a number a peer would wait for.
TEST(OpNumbering, AnOpThatWillNotRunGivesItsNumbersBack) {
  OpNumbering n(2);
  Op carrier;
  carrier.group = std::make_shared<std::vector<Op>>(std::vector<Op>{p2p(true, 1), p2p(false, 1)});
  n.take(carrier);
  n.give_back(carrier);
  Op op = collective();
  EXPECT_EQ(n.take(op), 1u);
  n.give_back(op);
  EXPECT_EQ(n.last(), 0u);
}

// After a shrink the survivors' matching starts over; the caller's seq goes on.
TEST(OpNumbering, AShrinkStartsTheMatchingOverButNotTheSequence) {
  OpNumbering n(4);
  Op a = collective(), s = p2p(true, 3);
  n.take(a);
  n.match(a);
  n.take(s);
  n.match(s);
  n.new_group(3);
  Op b = collective(), t = p2p(true, 2);
  n.take(b);
  n.match(b);
  n.take(t);
  n.match(t);
  EXPECT_EQ(b.seq, 3u);
  EXPECT_EQ(b.match_seq, 1u);
  EXPECT_EQ(t.match_seq, 1u);
}

}  // namespace
}  // namespace rcoll
