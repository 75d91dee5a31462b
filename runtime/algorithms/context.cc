#include "runtime/algorithms/context.h"

#include <algorithm>
#include <csignal>
#include <string>
#include <thread>

#include "base/log.h"

namespace rcoll {

std::span<Request> Scratch::requests(size_t n) {
  if (n == 0) return {};
  while (block_ < blocks_.size() && blocks_[block_].size - used_ < n) {
    ++block_;
    used_ = 0;
  }
  if (block_ == blocks_.size()) {
    const size_t size = std::max<size_t>(n, 64);
    blocks_.push_back(Block{std::make_unique<Request[]>(size), size});
    request_bytes_ += size * sizeof(Request);
    used_ = 0;
  }
  std::span<Request> out(blocks_[block_].requests.get() + used_, n);
  used_ += n;
  for (Request& r : out) {
    // Only a failed request holds a status to clear (a done one keeps the default).
    r.state = Request::State::kIdle;
    if (!r.status.ok()) r.status = Status();
  }
  return out;
}

AlgoContext::AlgoContext(Transport& transport, const Op& op, const Tuning& tuning, Scratch& scratch,
                         bool shares_scratch)
    : t_(transport),
      op_(op),
      tuning_(tuning),
      scratch_(scratch),
      header_(op.frame_template(transport.epoch(), transport.rank())),
      in_(op.in.data, size_of(op.in.dtype)),
      out_(op.out.data, size_of(op.out.dtype)),
      pending_(scratch.pending()) {
  if (!shares_scratch) scratch_.start_op();
}

size_t AlgoContext::piece_elements() const {
  return std::max<size_t>(1, tuning_.piece_bytes / op_.element_size());
}

void AlgoContext::send(int peer, uint32_t chunk, uint16_t step, const void* data, size_t bytes, Request* r) {
  FrameHeader h = header_;
  h.chunk = chunk;
  h.step = step;
  h.payload_bytes = bytes;
  if (inject_delay_ms_ > 0) {
    RCOLL_LOG(kWarn, "fault injection: holding back %s chunk %u to rank %d for %lld ms", op_.describe().c_str(), chunk,
              peer, static_cast<long long>(inject_delay_ms_));
    std::this_thread::sleep_for(std::chrono::milliseconds(inject_delay_ms_));
    inject_delay_ms_ = 0;
  }
  if (inject_drop_) {
    RCOLL_LOG(kWarn, "fault injection: dropping %s chunk %u step %u to rank %d", op_.describe().c_str(), chunk, step, peer);
    inject_drop_ = false;
    ++faults_fired_;
    if (drop_then_break_) {
      drop_then_break_ = false;
      RCOLL_LOG(kWarn, "fault injection: and closing the link to rank %d with it (%s, epoch %u)",
                peer, op_.describe().c_str(), t_.epoch());
      t_.break_link(peer);
    }
    r->state = Request::State::kDone;
    return;
  }
  pending_.push_back({r, peer, true, chunk, step, 0, &op_});
  t_.post_send(peer, h, data, r);
}

void AlgoContext::recv(int peer, uint32_t chunk, uint16_t step, void* dst, size_t bytes, Request* r) {
  FrameHeader h = header_;
  h.chunk = chunk;
  h.step = step;
  h.payload_bytes = bytes;
  // A receive expects the sender's view of the fingerprint: for send/recv the
  // sender stamps its own rank as root.
  if (op_.kind == OpKind::kSendRecv) h.root = peer;
  pending_.push_back({r, peer, false, chunk, step, 0, &op_});
  t_.post_recv(peer, h, dst, r);
}

Status AlgoContext::confirm_completion(uint32_t chunk) {
  const int p = size(), r = rank();
  std::span<Request> reqs = requests(2 * static_cast<size_t>(p - 1));
  size_t q = 0;
  for (int d = 1; d < p; ++d) {
    recv((r - d + p) % p, chunk, kConfirmStep, nullptr, 0, &reqs[q++]);
    send((r + d) % p, chunk, kConfirmStep, nullptr, 0, &reqs[q++]);
    if (die_in_confirm_) {
      (void)wait(reqs[q - 1]);
      RCOLL_LOG(kWarn,
                "fault injection: killing this process (SIGKILL) in the confirmation round of %s, "
                "its confirmation sent to rank %d only",
                op_.describe().c_str(), (r + d) % p);
      std::raise(SIGKILL);
    }
  }
  return wait_all(reqs);
}

Status AlgoContext::wait_for_credit(Request& r, int peer, bool is_send, uint64_t credit_seq) {
  pending_.push_back({&r, peer, is_send, 0, kCreditStep, credit_seq, &op_});
  return wait(r);
}

Status AlgoContext::wait(Request& r) {
  // Most sends of small frames are done by the time they are waited for: no
  // clock read for those.
  if (!r.finished()) {
    if (Status s = wait_unfinished(r); !s.ok()) return s;
  }
  if (r.failed()) return fail(r.status);
  // Finished requests may be destroyed by the algorithm from here on: forget them.
  std::erase_if(pending_, [](const PendingRequest& p) { return p.req->finished(); });
  return Status();
}

Status AlgoContext::wait_unfinished(Request& r) {
  return wait_until([&r] { return r.finished(); });
}

Status AlgoContext::wait_any(std::span<Request* const> rs) {
  auto any = [rs] {
    for (Request* r : rs)
      if (r->finished()) return true;
    return false;
  };
  if (!any()) {
    if (Status s = wait_until(any); !s.ok()) return s;
  }
  forget_finished();
  return Status();
}

void AlgoContext::forget_finished() {
  std::erase_if(pending_, [](const PendingRequest& p) { return p.req->finished(); });
}

template <class Done>
Status AlgoContext::wait_until(const Done& done) {
  // The deadline guards progress: it moves forward whenever bytes move.
  // check_at: when the guard is next asked about the stall (a budget after
  // the last bytes moved, or when it asked to look again).
  uint64_t moved = t_.bytes_sent() + t_.bytes_received();
  Clock::time_point last_progress = Clock::now();
  Clock::time_point check_at = last_progress + budget_;
  while (!done()) {
    if (guard_ != nullptr) {
      if (Status s = guard_->interrupted(); !s.ok()) return fail(std::move(s));
    }
    const Clock::time_point now = Clock::now();
    if (now >= check_at) {
      // Who are we waiting for? The oldest unfinished request names the peer.
      const PendingRequest* oldest = nullptr;
      for (const auto& p : pending_)
        if (!p.req->finished()) {
          oldest = &p;
          break;
        }
      const int peer = oldest ? oldest->peer : -1;
      // In a group, the member that request belongs to.
      const Op& stalled = oldest && oldest->op ? *oldest->op : op_;
      Status verdict = guard_ ? guard_->on_stall(stalled, peer, now - last_progress)
                              : Status(ErrorCode::kTimeout, "no progress guard");
      if (!verdict.ok()) {
        if (verdict.code() == ErrorCode::kTimeout && oldest != nullptr) {
          const std::string whose = oldest->is_send ? " (this rank's" : " (its";
          const std::string what =
              oldest->step == kCreditStep
                  ? whose + " completion credit for collective seq " + std::to_string(oldest->credit_seq) + ")"
                  : " (chunk " + std::to_string(oldest->chunk) + " step " + std::to_string(oldest->step) + ")";
          verdict = Status(verdict.code(), verdict.context(),
                           verdict.message() + "; waiting on " + (oldest->is_send ? "send to" : "recv from") +
                               " rank " + std::to_string(oldest->peer) + what);
        }
        return fail(std::move(verdict));
      }
      // Keep waiting, the stall counted afresh (the guard keeps what it saw):
      // another budget for a live straggler, or as long as the guard wants
      // before it looks again, sooner or later than a budget (a cycle to
      // confirm, a link that may be retransmitting).
      const Clock::duration look = guard_->next_look();
      last_progress = now;
      check_at = now + (look == Clock::duration::max() ? budget_ : look);
    }
    // Wake at least every 20 ms to look at the guard (peer abort notices).
    const Clock::time_point until = std::min(check_at, now + std::chrono::milliseconds(20));
    t_.progress(Deadline::at(until));
    const uint64_t m = t_.bytes_sent() + t_.bytes_received();
    if (m != moved) {
      moved = m;
      last_progress = Clock::now();
      check_at = last_progress + budget_;
      if (guard_ != nullptr) guard_->moved(m);
    }
  }
  return Status();
}

Status AlgoContext::wait_all(std::span<Request> rs) {
  for (auto& r : rs) {
    if (Status s = wait(r); !s.ok()) return s;
  }
  return Status();
}

Status AlgoContext::fail(Status why) {
  // Abort before returning: the algorithm's unfinished requests die with its
  // stack frame, and the transport must not touch them afterwards.
  t_.abort(why);
  pending_.clear();
  if (why.context().op_seq == 0 || why.context().rank < 0) {
    ErrorContext c = why.context();
    if (c.op_seq == 0) c.op_seq = op_.seq;
    if (c.rank < 0) c.rank = rank();
    if (c.epoch < 0) c.epoch = t_.epoch();
    if (c.transport.empty()) c.transport = t_.name();
    why = Status(why.code(), c, op_.describe() + ": " + why.message());
  }
  return why;
}

SlicePlan plan_slices(const Op& op, int rank, int size, const Tuning& tuning, size_t first, size_t end) {
  const size_t p = static_cast<size_t>(size);
  const size_t piece = std::max<size_t>(1, tuning.piece_bytes / op.element_size());
  SlicePlan plan;
  auto ceil_div = [](size_t a, size_t b) { return (a + b - 1) / b; };
  auto range = [&](size_t unit, size_t n, size_t offset) {
    size_t e = std::min(end, plan.slices);
    return ElementRange{offset + std::min(n, first * unit), offset + std::min(n, e * unit)};
  };
  // Empty ranges are left out (so a query of no slices allocates nothing).
  auto add = [](ElementRanges& v, ElementRange r) {
    if (r.begin < r.end) v.push_back(r);
  };
  switch (op.kind) {
    case OpKind::kAllreduce: {
      const size_t n = op.out.count;
      const AllreduceAlgorithm algo = allreduce_algorithm(op, size, tuning);
      const bool direct = algo == AllreduceAlgorithm::kDirect || algo == AllreduceAlgorithm::kRecursiveDoubling;
      const size_t unit = direct || size == 1 ? std::max<size_t>(n, 1) : piece * p;
      plan.slices = std::max<size_t>(1, ceil_div(n, unit));
      add(plan.inputs, range(unit, n, 0));
      add(plan.outputs, range(unit, n, 0));
      break;
    }
    case OpKind::kAllgather: {
      const size_t n = op.in.count;
      const size_t unit =
          std::max<size_t>(1, allgather_piece_bytes(size, tuning) / op.element_size());
      plan.slices = std::max<size_t>(1, ceil_div(n, unit));
      add(plan.inputs, range(unit, n, 0));
      for (size_t q = 0; q < p; ++q) add(plan.outputs, range(unit, n, q * n));
      break;
    }
    case OpKind::kReduceScatter: {
      const size_t n = op.out.count;
      plan.slices = std::max<size_t>(1, ceil_div(n, piece));
      for (size_t b = 0; b < p; ++b) add(plan.inputs, range(piece, n, b * n));
      add(plan.outputs, range(piece, n, 0));
      break;
    }
    case OpKind::kBroadcast:
    case OpKind::kSendRecv: {
      const size_t n = op.out.count;
      const size_t unit = op.kind == OpKind::kBroadcast
                              ? std::max<size_t>(1, broadcast_piece_bytes(op, size, tuning) / op.element_size())
                              : piece;
      plan.slices = std::max<size_t>(1, ceil_div(n, unit));
      const bool reads = op.kind == OpKind::kBroadcast ? op.root == rank : op.is_send;
      const bool writes = op.kind == OpKind::kBroadcast ? op.root != rank : !op.is_send;
      if (reads) add(plan.inputs, range(unit, n, 0));
      if (writes) add(plan.outputs, range(unit, n, 0));
      break;
    }
    case OpKind::kAlltoall: {
      // Slice k is piece k of every block, sent and received alike.
      const size_t n = op.out.count / p;
      plan.slices = std::max<size_t>(1, ceil_div(n, piece));
      for (size_t q = 0; q < p; ++q) add(plan.inputs, range(piece, n, q * n));
      for (size_t q = 0; q < p; ++q) add(plan.outputs, range(piece, n, q * n));
      break;
    }
    case OpKind::kBarrier:
    case OpKind::kNone:
      plan.slices = 1;
      break;
  }
  return plan;
}

}  // namespace rcoll
