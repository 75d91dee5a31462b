#include "runtime/algorithms/context.h"

#include <algorithm>
#include <string>
#include <thread>

#include "runtime/log.h"

namespace rcoll {

size_t AlgoContext::piece_elements() const {
  return std::max<size_t>(1, tuning_.piece_bytes / op_.element_size());
}

void AlgoContext::send(int peer, uint32_t chunk, uint16_t step, const void* data, size_t bytes, Request* r) {
  FrameHeader h = header_;
  h.chunk = chunk;
  h.step = step;
  h.payload_bytes = bytes;
  if (inject_delay_ms_ > 0) {
    RCOLL_LOG(kWarn, "fault injection: holding back %s chunk %u to rank %d for %lld ms", op_.describe().c_str(), chunk, peer,
              static_cast<long long>(inject_delay_ms_));
    std::this_thread::sleep_for(std::chrono::milliseconds(inject_delay_ms_));
    inject_delay_ms_ = 0;
  }
  if (inject_drop_) {
    RCOLL_LOG(kWarn, "fault injection: dropping %s chunk %u step %u to rank %d", op_.describe().c_str(), chunk, step, peer);
    inject_drop_ = false;
    r->state = Request::State::kDone;
    return;
  }
  pending_.push_back({r, peer, true, chunk, step});
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
  pending_.push_back({r, peer, false, chunk, step});
  t_.post_recv(peer, h, dst, r);
}

Status AlgoContext::wait(Request& r) {
  while (!r.finished()) {
    if (deadline_.expired()) {
      // Name every request that is still outstanding: that is who we wait for.
      std::string waiting;
      int first_peer = -1;
      for (const auto& p : pending_) {
        if (p.req->finished()) continue;
        if (first_peer < 0) first_peer = p.peer;
        if (!waiting.empty()) waiting += ", ";
        waiting += std::string(p.is_send ? "send to" : "recv from") + " rank " + std::to_string(p.peer) +
                   " (chunk " + std::to_string(p.chunk) + " step " + std::to_string(p.step) + ")";
        if (waiting.size() > 300) {
          waiting += ", ...";
          break;
        }
      }
      return fail(Status(ErrorCode::kTimeout,
                         ErrorContext{rank(), first_peer, op_.seq, static_cast<int64_t>(t_.epoch()), t_.name()},
                         op_.describe() + " made no progress before its deadline; still waiting on: " + waiting));
    }
    t_.progress(deadline_);
  }
  if (r.failed()) return fail(r.status);
  // Finished requests may be destroyed by the algorithm from here on: forget them.
  std::erase_if(pending_, [](const Pending& p) { return p.req->finished(); });
  return Status();
}

Status AlgoContext::fail(Status why) {
  // Abort before returning: the algorithm's unfinished requests die with its
  // stack frame, and the transport must not touch them afterwards.
  t_.abort(why);
  pending_.clear();
  if (why.context().op_seq == 0) {
    ErrorContext c = why.context();
    c.op_seq = op_.seq;
    if (c.rank < 0) c.rank = rank();
    why = Status(why.code(), c, op_.describe() + ": " + why.message());
  }
  return why;
}

Status AlgoContext::wait_all(std::span<Request> rs) {
  for (auto& r : rs) {
    if (Status s = wait(r); !s.ok()) return s;
  }
  return Status();
}

}  // namespace rcoll
