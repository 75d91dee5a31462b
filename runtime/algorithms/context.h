// What an algorithm runs with: the op, the transport of the current epoch, the
// op's deadline, tuning and scratch memory. Algorithms are straight-line code
// over post/wait of chunk frames; they never block without the deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/deadline.h"
#include "runtime/op.h"
#include "transports/transport.h"

namespace rcoll {

struct Tuning {
  size_t piece_bytes = 512 * 1024;  // most payload bytes of one frame
  int window = 4;                   // slices in flight at once
  AllreduceAlgorithm allreduce = AllreduceAlgorithm::kAuto;
  size_t small_allreduce_bytes = 64 * 1024;
};

// Grows to the largest request and keeps it: no allocation per op once warm.
class Scratch {
 public:
  void* get(size_t bytes) {
    if (buf_.size() < bytes) buf_.resize(bytes);
    return buf_.data();
  }

 private:
  std::vector<std::byte> buf_;
};

class AlgoContext {
 public:
  AlgoContext(Transport& transport, const Op& op, Deadline deadline, const Tuning& tuning,
              Scratch& scratch)
      : t_(transport), op_(op), deadline_(deadline), tuning_(tuning), scratch_(scratch),
        header_(op.frame_template(transport.epoch(), transport.rank())) {}

  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  const Op& op() const { return op_; }
  const Tuning& tuning() const { return tuning_; }
  void* scratch(size_t bytes) { return scratch_.get(bytes); }
  // Elements per frame for this op's dtype (at least 1).
  size_t piece_elements() const;

  void send(int peer, uint32_t chunk, uint16_t step, const void* data, size_t bytes, Request* r);
  void recv(int peer, uint32_t chunk, uint16_t step, void* dst, size_t bytes, Request* r);
  // Drives the transport until `r` finishes or the op's deadline passes.
  Status wait(Request& r);
  Status wait_all(std::span<Request> rs);
  // Fault injection on this op's first frame sent: hold it back `delay_ms`, or
  // never send it at all (the request completes locally, the peer never sees it).
  void inject_first_send(int64_t delay_ms, bool drop) {
    inject_delay_ms_ = delay_ms;
    inject_drop_ = drop;
  }

  // Aborts the transport (failing every pending request) and returns `why` with
  // this op named in it. Every algorithm failure goes through here.
  Status fail(Status why);

 private:
  Transport& t_;
  const Op& op_;
  Deadline deadline_;
  const Tuning& tuning_;
  Scratch& scratch_;
  FrameHeader header_;
  int64_t inject_delay_ms_ = 0;
  bool inject_drop_ = false;
  // Who each pending request is waiting on, for the timeout message.
  struct Pending {
    Request* req;
    int peer;
    bool is_send;
    uint32_t chunk;
    uint16_t step;
  };
  std::vector<Pending> pending_;
};

// One entry point per op kind (runtime/algorithms/*.cc).
Status run_send(AlgoContext& ctx);
Status run_recv(AlgoContext& ctx);
Status run_allreduce(AlgoContext& ctx);
Status run_allgather(AlgoContext& ctx);
Status run_reduce_scatter(AlgoContext& ctx);
Status run_broadcast(AlgoContext& ctx);
Status run_barrier(AlgoContext& ctx);

// Element offsets that cut `len` elements into `parts` near-equal segments.
inline size_t segment_begin(size_t len, int parts, int i) {
  return len * static_cast<size_t>(i) / static_cast<size_t>(parts);
}

}  // namespace rcoll
