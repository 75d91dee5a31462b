// Fault injection at an op (RCOLL_INJECT, runtime/inject.h): which faults
// fire at this op on this rank, and how each strikes the op's frames.
#include <algorithm>
#include <csignal>
#include <string>
#include <thread>

#include "runtime/communicator_impl.h"
#include "base/log.h"

namespace rcoll {

namespace {

// The first peer an op talks to: the link a close-link fault without a peer breaks.
int first_peer(const Op& op, int rank, int size, const Tuning& tuning) {
  if (op.kind == OpKind::kSendRecv) return op.peer;
  if (op.kind == OpKind::kBroadcast) return broadcast_first_peer(op, rank, size, tuning);
  // Halving-doubling, recursive halving and doubling talk to rank r ^ d first.
  if (op.kind == OpKind::kAllreduce && allreduce_algorithm(op, size, tuning) == AllreduceAlgorithm::kHalvingDoubling)
    return rank ^ (size / 2);
  if (op.kind == OpKind::kAllreduce && allreduce_algorithm(op, size, tuning) == AllreduceAlgorithm::kRecursiveDoubling)
    return rank ^ 1;
  if (op.kind == OpKind::kReduceScatter && blocks_by_doubling(size, tuning)) return rank ^ (size / 2);
  if (op.kind == OpKind::kAllgather && blocks_by_doubling(size, tuning)) return rank ^ 1;
  return (rank + 1) % size;
}

uint64_t next_random(uint64_t* state) {  // splitmix64
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void CommunicatorImpl::inject_before(const Op& op, AlgoContext& ctx, size_t slices) {
  // Each op's faults fire once, not again when it is resumed after the recovery they caused.
  if (op.seq <= injected_through_seq_) return;
  injected_through_seq_ = op.seq;
  for (const Fault& planned : faults_) {
    Fault f = planned;
    if (f.kind == FaultKind::kRandom) {
      // Every rank draws the same numbers for the same op: at most one victim per op.
      uint64_t state = f.seed ^ (op.seq * 0xD1B54A32D192ED03ull);
      const double draw = static_cast<double>(next_random(&state) >> 11) / 9007199254740992.0;
      if (draw >= f.rate || size_ < 2) continue;
      f.kind = f.random_kinds[next_random(&state) % f.random_kinds.size()];
      f.rank = static_cast<int>(next_random(&state) % static_cast<uint64_t>(size_));
      f.op = op.seq;
      f.ms = 50;
    }
    if (f.kind == FaultKind::kFailConnect || f.kind == FaultKind::kLinkLatency || !f.at.empty() ||
        (f.rank != -1 && f.rank != rank_) || f.op != op.seq) {
      continue;
    }
    const int peer = f.peer >= 0 ? f.peer : first_peer(op, rank_, size_, ctx.tuning());
    switch (f.kind) {
      case FaultKind::kStall:  // a planned stall is applied in run_op, before the op is announced
        if (planned.kind == FaultKind::kRandom) {
          ++tally_.delays_injected;
          std::this_thread::sleep_for(Millis(f.ms));
        }
        break;
      case FaultKind::kKill:
        RCOLL_LOG(kWarn, "fault injection: killing this process (SIGKILL) at %s", op.describe().c_str());
        std::raise(SIGKILL);
        break;
      case FaultKind::kCloseLink:
      {
        // After the first window, so the failure lands mid-op. An op that is
        // one window and then says nothing more to that peer would finish
        // without noticing (the next op would, and two such faults would
        // share one recovery): there the link closes before the op starts.
        const bool one_window = slices <= static_cast<size_t>(std::max(1, ctx.tuning().window));
        const bool talks_after_data = (op.kind == OpKind::kBroadcast && !broadcast_is_eager(op, ctx.tuning())) || confirms_completion(op);
        RCOLL_LOG(kWarn, "fault injection: closing the link to rank %d %s %s", peer,
                  one_window && !talks_after_data ? "at the start of" : "during", op.describe().c_str());
        if (one_window && !talks_after_data) {
          ctx.inject_break_now(peer);
        } else {
          ctx.inject_break_after_first_window(peer);
        }
        break;
      }
      case FaultKind::kDelayChunk:
        ++tally_.delays_injected;
        ctx.inject_first_send(f.ms, false);
        break;
      case FaultKind::kDropChunk:
        // A random fault stands for a transport failure: a frame is lost
        // with its connection. (A connection delivers in order, so a frame
        // lost while the sender goes on to its next op is what a skipped op
        // looks like to the receiver, which rightly calls it a desync.)
        if (planned.kind == FaultKind::kRandom) {
          ctx.inject_drop_then_break();
        } else {
          ctx.inject_first_send(0, true);
        }
        break;
      case FaultKind::kBadAlloc:
      case FaultKind::kThrow:
        throw_injected(f.kind, rank_, op.seq, op.describe());
      case FaultKind::kFailConnect:
      case FaultKind::kLinkLatency:
      case FaultKind::kHang:  // inject_hang, at every attempt
      case FaultKind::kRandom: break;
    }
  }
}

// A hang (hang:rank=R,op=N): in every attempt of the op the rank says it is
// in the op (heartbeats go on) but moves no bytes, until a peer aborts the
// epoch; it then takes part in the recovery, and hangs again in the next
// attempt, as a rank stuck in a data path that stopped delivering would.
// Every rank is in the op and none moves bytes: only the hang timeout
// (Options::hang_timeout) or max_recoveries_per_op ends it. Counted as one
// fault, however many recoveries it costs. Host ops outside a group only;
// without recovery (no peer would abort) it does not fire. Returns the abort
// that ended this attempt's hang (OK: no hang here), or kTimeout after the
// straggler timeout.
Status CommunicatorImpl::inject_hang(const Op& op) {
  for (const Fault& f : faults_) {
    if (f.kind != FaultKind::kHang || (f.rank != -1 && f.rank != rank_) || f.op != op.seq) continue;
    if (!options_.recovery || size_ == 1) {
      RCOLL_LOG(kWarn, "fault injection: hang at %s not applied: it needs recovery and peers",
                op.describe().c_str());
      return Status();
    }
    RCOLL_LOG(kWarn,
              "fault injection: hang: this rank moves no bytes in %s (epoch %u), heartbeating, "
              "until a peer aborts the epoch",
              op.describe().c_str(), epoch_.load());
    if (hang_counted_seq_ != op.seq) ++tally_.injected;
    hang_counted_seq_ = op.seq;
    const Deadline bound = Deadline::after(straggler_timeout(op));
    while (!bound.expired()) {
      if (Status s = interrupted(); !s.ok()) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return Status(
        ErrorCode::kTimeout, ErrorContext{rank_, -1, op.seq, epoch_.load(), transport_name_.load()},
        op.describe() +
            ": fault injection: hang: no peer aborted the epoch within the straggler timeout");
  }
  return Status();
}

// A kill in the op's confirmation round (kill:rank=R,op=N,at=confirm).
void CommunicatorImpl::inject_in_confirmation(const Op& op, AlgoContext& ctx) {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kKill && f.at == "confirm" && (f.rank == -1 || f.rank == rank_) &&
        f.op == op.seq)
      ctx.inject_death_in_confirmation();
  }
}

// An injected stall makes this rank late to the op, as a rank busy in
// compute would be: before it says (in its heartbeats) that it is in the op.
void CommunicatorImpl::inject_late_start(const Op& op) {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kStall && (f.rank == -1 || f.rank == rank_) && f.op == op.seq && op.seq > injected_through_seq_) {
      ++tally_.delays_injected;
      RCOLL_LOG(kWarn, "fault injection: stalling %lld ms before %s", static_cast<long long>(f.ms), op.describe().c_str());
      std::this_thread::sleep_for(Millis(f.ms));
    }
  }
}

// A kill at a step of a recovery (kill:...,at=ledgers|connect): the rank
// dies in the middle of the protocol, once it got to `step` in the first
// recovery during or after the op the fault names (this rank may be idle,
// op_seq 0, when a peer's failure starts it).
bool CommunicatorImpl::kills_in_recovery(uint64_t op_seq, const char* step) const {
  const uint64_t reached = op_seq != 0 ? op_seq : injected_through_seq_;
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kKill && f.at == step && f.op <= reached &&
        (f.rank == -1 || f.rank == rank_)) {
      return true;
    }
  }
  return false;
}

void CommunicatorImpl::inject_in_recovery(uint64_t op_seq, uint32_t failed_epoch,
                                          const char* step) {
  if (kills_in_recovery(op_seq, step)) {
    RCOLL_LOG(kWarn,
              "fault injection: killing this process (SIGKILL) in the recovery of epoch %u "
              "(op seq %llu), %s",
              failed_epoch, static_cast<unsigned long long>(op_seq),
              std::string(step) == "ledgers" ? "after publishing its ledger"
                                             : "before connecting the next epoch");
    std::raise(SIGKILL);
  }
}

}  // namespace rcoll
