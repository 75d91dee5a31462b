// Shrink mode: a rank died, the survivors continue as a smaller group.
//
// Every survivor registers under "shrink/<generation>/alive/<old rank>" and
// waits until each old rank has either registered or is known dead (its
// heartbeat connection closed). All survivors then read the same set, number
// themselves by old rank order, and build a fresh data plane and heartbeat mesh
// in a new store namespace. Nothing of the old group's ops is resumed: the dead
// rank's contribution is gone, so those ops fail with kPeerDead and the caller,
// seeing rank() and size() change, decides what to redo. Two things make that
// redo possible: an in-place op's buffer gets its input back
// (give_input_back), and every survivor fails the same collective (a
// survivor that held the whole result of one that completed elsewhere
// completes it too: runtime/shrink_rule.h).
#include <string>
#include <thread>
#include <vector>

#include "runtime/communicator_impl.h"
#include "base/log.h"
#include "runtime/store/keys.h"

namespace rcoll {

size_t CommunicatorImpl::shrink(const Status& why, const OpRecord* failed, bool* failed_op_complete,
                                bool by_next_op) {
  size_t stale_count = 0;
  bool complete = false;
  Status s = shrink_group(why, failed, &stale_count, &complete, by_next_op);
  if (failed_op_complete != nullptr) *failed_op_complete = s.ok() && complete;
  if (!s.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shrink_unreported_ =
          Status();  // the next op says the communicator failed, not that it shrank
    }
    fatal_ = s;
    RCOLL_LOG(kError, "shrink mode: %s; the communicator is unusable from here on", s.to_string().c_str());
  }
  return stale_count;
}

ShrinkStand CommunicatorImpl::shrink_stand(const OpRecord* failed) const {
  ShrinkStand mine;
  mine.through = log_.collective_through;
  if (failed != nullptr && failed->op.kind != OpKind::kSendRecv && !failed->nccl) {
    mine.failed = failed->op.match_seq;
    mine.whole = failed->done >= failed->total;
  }
  return mine;
}

bool CommunicatorImpl::failed_op_complete_everywhere(const ShrinkStand& mine,
                                                     const std::string& outcomes,
                                                     const std::vector<int>& survivors,
                                                     Deadline deadline) {
  if (mine.failed == 0 || !mine.whole) return false;
  std::vector<ShrinkStand> others;
  for (int q : survivors) {
    if (q == rank_) continue;
    // Published before q registered as alive: there.
    auto text = instance_store_->get(outcomes + std::to_string(q),
                                     std::max<Millis>(Millis(1), deadline.remaining_ms()));
    if (!text.ok()) return false;
    auto theirs = decode_shrink_stand(std::string(text.value().begin(), text.value().end()));
    if (!theirs) return false;
    others.push_back(*theirs);
  }
  return failed_collective_completes(mine, others);
}

Status CommunicatorImpl::shrink_group(const Status& why, const OpRecord* failed,
                                      size_t* stale_count, bool* failed_op_complete,
                                      bool by_next_op) {
  const int old_rank = rank_, old_size = size_;
  const Deadline deadline = Deadline::after(options_.recovery_timeout);
  const std::string gen = keys::shrink_alive(shrink_generation_);
  const std::string outcomes = keys::shrink_outcome(shrink_generation_);
  RCOLL_LOG(kWarn, "shrink mode: %s; agreeing with the survivors on a group without the dead rank(s)", why.to_string().c_str());
  if (transport_) transport_->abort(why);
  // Where this rank's collectives stood, then that it is alive: a survivor
  // seen alive has said where it stood.
  const ShrinkStand mine = shrink_stand(failed);
  const std::string stand = encode(mine);
  if (Status s = instance_store_->set(outcomes + std::to_string(old_rank),
                                      Bytes(stand.begin(), stand.end()));
      !s.ok()) {
    return s;
  }
  if (Status s = instance_store_->set(gen + std::to_string(old_rank), Bytes{'1'}); !s.ok()) return s;
  auto settled = settle_survivors(gen, deadline);
  if (!settled.ok()) return settled.status();
  const std::vector<int>& survivors = settled.value();
  int new_rank = -1;
  for (size_t i = 0; i < survivors.size(); ++i)
    if (survivors[i] == old_rank) new_rank = static_cast<int>(i);
  const int new_size = static_cast<int>(survivors.size());
  *failed_op_complete = failed_op_complete_everywhere(mine, outcomes, survivors, deadline);
  if (*failed_op_complete) {
    RCOLL_LOG(kWarn,
              "shrink mode: %s completes here too: every survivor held its whole result (or "
              "completed it) when the rank died",
              failed->op.describe().c_str());
  }
  std::string members;
  for (int q : survivors) members += (members.empty() ? "" : ",") + std::to_string(q);
  *stale_count = leave_old_group(why, new_rank, new_size, by_next_op || *failed_op_complete);
  if (Status s = connect_epoch(0, deadline); !s.ok()) return s;
  if (Status s = start_liveness(own_budget(deadline)); !s.ok()) return s;  // as in create()
  tally_.note_shrink();
  RCOLL_LOG(kWarn,
            "shrink mode: the group is now old ranks {%s}: this rank was %d of %d and is %d of %d",
            members.c_str(), old_rank, old_size, new_rank, new_size);
  return Status();
}

// Every old rank either registered as a survivor or is known dead here.
Result<std::vector<int>> CommunicatorImpl::settle_survivors(const std::string& alive_keys,
                                                            Deadline deadline) {
  std::vector<int> survivors;
  for (;;) {
    survivors.clear();
    bool settled = true;
    for (int q = 0; q < size_; ++q) {
      auto alive = instance_store_->check(alive_keys + std::to_string(q));
      if (alive.ok() && alive.value()) {
        survivors.push_back(q);
      } else if (!(dead_ && dead_[static_cast<size_t>(q)])) {
        settled = false;  // neither registered nor known dead yet
      }
    }
    if (settled) return survivors;
    if (deadline.expired()) {
      return Status(ErrorCode::kPeerUnreachable,
                    ErrorContext{rank_, -1, 0, epoch_.load(), transport_name_.load()},
                    "shrink could not settle the surviving group within the recovery timeout");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The old group's machinery goes, this rank takes its new number, and ops
// queued for the old group fail (returns how many).
size_t CommunicatorImpl::leave_old_group(const Status& why, int new_rank, int new_size,
                                         bool tell_next_op) {
  const int old_rank = rank_, old_size = size_;
  retire_transport();
  transport_.reset();
  liveness_.reset();
  // The old group's NCCL communicator (dead rank included) is aborted and
  // retired: the next one follows its stream.
  if (nccl_.comm) {
    abort_nccl_on_device(why);
    nccl_.retire();
  }
  nccl_.init_failures = 0;
  RingQueue<Op> stale;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stale.swap(queue_);
    rank_ = new_rank;
    size_ = new_size;
    numbering_.new_group(new_size);
    // No queued op fails with the old group: the next one issued tells the caller.
    if (tell_next_op && stale.empty()) shrink_unreported_ = why;
  }
  for (size_t i = 0; i < stale.size(); ++i) {
    Op& op = stale[i];
    recorder_.finished(op.seq, false);
    op.work->finish(Status(ErrorCode::kPeerDead, ErrorContext{old_rank, why.context().peer, op.seq, epoch_.load(), transport_name_.load()},
                           op.describe() + " was issued for the group of " + std::to_string(old_size) +
                               " ranks, which shrank after a rank died; not run"));
  }
  log_.reset(new_size);
  nccl_.reset_settling();  // collective seqs start over
  // A planned fault names a rank of the group it was planned for: one aimed
  // at this process follows it to its new rank, one aimed at another
  // process never fires here (before, a kill planned for the dead rank at
  // op N could fire again on the process renumbered to that rank, when it
  // had not reached op N yet).
  for (Fault& f : faults_) {
    if (f.rank >= 0) f.rank = f.rank == old_rank ? new_rank : kAnotherProcess;
  }
  // Sequences start over.
  credits_.reset(rank_, size_);
  dead_.reset();
  fatal_ = Status();
  epoch_failed_seen_ = false;
  ++shrink_generation_;
  store_ = make_prefix_store(instance_store_, "g" + std::to_string(shrink_generation_));
  janitor_.forget();            // the old group's keys stay under its namespace
  *tcp_kept_ = KeptListener{};  // the ranks are others: their addresses are published anew
  log::set_identity("rank " + std::to_string(new_rank) + "/" + std::to_string(new_size));
  log::set_thread_rank(new_rank, new_size);
  return stale.size();
}

// Shrink mode: an in-place op that a death failed gives the caller its input
// back (every window it touched was backed up: run_slices), so the caller
// can run it again in the shrunk group. Returns what to add to the error.
std::string CommunicatorImpl::give_input_back(const OpRecord& rec) {
  const Op& op = rec.op;
  const std::string partial =
      "; its buffer holds partial results: the op was larger than the backup budget "
      "(Options::backup_bytes), so its input was not kept";
  if (rec.nccl) {
    const bool backed = nccl_.holding(op.seq, op.in.bytes()) != nullptr;
    if (op.in_place() && !backed) return partial;
    if (Status s = restore_nccl_inputs(op); !s.ok()) {
      RCOLL_LOG(
          kError,
          "%s: could not put its input back after the death (%s); its buffer holds partial results",
          op.describe().c_str(), s.to_string().c_str());
      return "; its buffer holds partial results (the input could not be put back: " + s.message() +
             ")";
    }
    return op.in_place() ? "; the buffer holds the op's input again" : "";
  }
  if (!op.in_place() || op.kind != OpKind::kAllreduce) return "";
  if (!rec.covers(0, std::min(rec.total, rec.last_window_first + 1))) return partial;
  rec.restore_inputs();
  RCOLL_LOG(
      kInfo,
      "%s failed by a rank's death: its input is back in its buffer (shrink mode), to be run again",
      op.describe().c_str());
  return "; the buffer holds the op's input again";
}

}  // namespace rcoll
