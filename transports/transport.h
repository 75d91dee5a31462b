// The one small interface every transport implements. A transport is one
// epoch of the data plane: it is connected once, moves framed chunks between
// ranks, and is aborted or destroyed; it never retries, never recovers and
// knows nothing of deadlines beyond the one it is handed.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "rcoll/status.h"
#include "base/deadline.h"
#include "transports/frame.h"

namespace rcoll {

// One posted send or receive. Owned by the caller; must outlive its completion
// (or the transport's abort/destruction).
struct Request {
  enum class State : uint8_t { kIdle, kPending, kDone, kFailed };
  State state = State::kIdle;
  Status status;
  bool finished() const { return state == State::kDone || state == State::kFailed; }
  bool failed() const { return state == State::kFailed; }
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual uint32_t epoch() const = 0;

  // Queues `header` plus header.payload_bytes from `data` to `peer`. Frames to
  // one peer leave in post order. `data` must stay valid until `req` finishes.
  virtual void post_send(int peer, const FrameHeader& header, const void* data, Request* req) = 0;

  // Receives the next frame from `peer` into `dst`. Frames from one peer are
  // matched in post order; the arriving header must equal `expected` (same op,
  // same position) or the request fails with kDesync / kInvalidArgument and the
  // connection is poisoned.
  virtual void post_recv(int peer, const FrameHeader& expected, void* dst, Request* req) = 0;

  // A receive of an empty frame that may come long after it is posted and
  // that nothing waits on until then (completion credits). Matched in post
  // order with the peer's other receives, as post_recv; but a transport that
  // polls its connections one by one need not look for it on every poll.
  virtual void post_background_recv(int peer, const FrameHeader& expected, Request* req) {
    post_recv(peer, expected, nullptr, req);
  }

  // Moves bytes until at least one request finishes or `until` passes.
  virtual void progress(Deadline until) = 0;

  // Fails every pending request with `why`, closes every connection. Idempotent.
  virtual void abort(const Status& why) = 0;

  // Fault injection: closes the connection to `peer` as a failing link would.
  // Pending and later requests on it fail; the peer sees the connection drop.
  virtual void break_link(int peer) = 0;

  // Bytes moved so far, for counters.
  virtual uint64_t bytes_sent() const = 0;
  virtual uint64_t bytes_received() const = 0;

  // The longest a segment lost on a link may wait before the transport sends
  // it again, where that is bounded and known (TCP with its retransmission
  // timeout capped); zero where not known. A link quiet for less may be
  // retransmitting, not hung: the stall judge's second look comes no sooner
  // (runtime/detection.cc, next_look).
  virtual Clock::duration retransmission_wait() const { return Clock::duration::zero(); }
};

}  // namespace rcoll
