// How ops are numbered at issue (under the communicator's queue lock). Every
// op takes the next op sequence number (a group: one per member, the carrier
// the first), the number the caller's Work, the logs and errors name. Ranks
// match ops by another number: collectives by their own sequence, sends and
// receives by a sequence per peer and direction ("p2p #n a->b"). Numbers are
// only taken by ops that will run: bad input gives its numbers back, so that
// no peer waits for an op that never comes. A shrink starts the matching over
// in the new group.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/op.h"

namespace rcoll {

class OpNumbering {
 public:
  explicit OpNumbering(int size) { new_group(size); }

  // Numbers `op` (and a group's members) and returns its seq.
  uint64_t take(Op& op) {
    const uint64_t count = op.group ? op.group->size() : 1;
    op.seq = last_ + 1;
    last_ += count;
    if (op.group) {
      for (size_t i = 0; i < op.group->size(); ++i) (*op.group)[i].seq = op.seq + i;
    }
    return op.seq;
  }
  // `op` will not run: its numbers go to the next op.
  void give_back(const Op& op) { last_ -= op.group ? op.group->size() : 1; }
  // The last seq taken.
  uint64_t last() const { return last_; }

  // The number the peers match `op` by (a group's members, each by its own).
  void match(Op& op) {
    if (op.group) {
      for (Op& m : *op.group) match_peer_op(m);
    } else if (op.kind == OpKind::kSendRecv) {
      match_peer_op(op);
    } else {
      op.match_seq = ++collective_;
    }
  }

  // Shrink: `size` ranks, renumbered; their matching starts over.
  void new_group(int size) {
    collective_ = 0;
    send_.assign(static_cast<size_t>(size), 0);
    recv_.assign(static_cast<size_t>(size), 0);
  }

 private:
  void match_peer_op(Op& op) {
    op.match_seq =
        op.is_send ? ++send_[static_cast<size_t>(op.peer)] : ++recv_[static_cast<size_t>(op.peer)];
  }

  uint64_t last_ = 0;
  uint64_t collective_ = 0;
  std::vector<uint64_t> send_;
  std::vector<uint64_t> recv_;
};

}  // namespace rcoll
