// One issued op as the runtime sees it: what it is, its place in the op
// sequence, its buffers and the Work its caller waits on.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rcoll/communicator.h"
#include "rcoll/options.h"
#include "rcoll/types.h"
#include "transports/frame.h"

namespace rcoll {

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  uint64_t seq = 0;
  int rank = -1;  // the issuing rank, for the messages of Work's waits
  // Device ops on NCCL issued asynchronously (Op::gated): once the op's GPU
  // work and its verdict are queued, `issued` is set and `verdict_event`
  // fires when the communicator's stream gate opens through this op (its
  // final outcome is known, after any recoveries): what Work::stream_wait
  // makes a caller's stream wait for.
  bool issued = false;
  // CUDA events of this state's device ops (timing disabled), made once on
  // the communicator's device and reused with the state: where the caller's
  // stream was at issue, and the verdict. Destroyed with the state.
  void* ready_event = nullptr;
  void* verdict_event = nullptr;

  WorkState() = default;
  WorkState(const WorkState&) = delete;
  WorkState& operator=(const WorkState&) = delete;
  ~WorkState();

  void finish(Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      done = true;
    }
    cv.notify_all();
  }
  void mark_issued() {
    {
      std::lock_guard<std::mutex> lock(mu);
      issued = true;
    }
    cv.notify_all();
  }
};

// What Op::describe() says, as plain fields: kept per op where formatting the
// text each time would cost more than a small op (the flight recorder).
struct OpBrief {
  OpKind kind = OpKind::kNone;
  bool is_send = false;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  uint64_t seq = 0;
  size_t count = 0;
  int root = -1;
  int peer = -1;
  std::string describe() const;
};

struct Op {
  OpKind kind = OpKind::kNone;
  bool is_send = false;  // for kSendRecv
  // Local issue order on this rank: 1, 2, 3, ... (the `op` of RCOLL_INJECT).
  uint64_t seq = 0;
  // The number peers match on: the collective sequence for collectives (equal
  // on every rank), the per-peer send/recv sequence for point to point.
  uint64_t match_seq = 0;
  Buffer in;
  Buffer out;
  ReduceOp reduce = ReduceOp::kSum;
  int root = -1;  // broadcast
  int peer = -1;  // send/recv
  OpOptions options;
  std::shared_ptr<WorkState> work;
  // Device buffers (MemoryKind::kCuda): the device they are on (set by
  // validate) and an event recorded on the caller's stream when the op was
  // issued, which the op's first device work waits for (the work state's
  // ready_event, kept alive with it).
  int device = -1;
  std::shared_ptr<void> stream_ready;
  // Issued asynchronously on device buffers: the runtime queues a verdict
  // event for Work::stream_wait when it runs on NCCL.
  bool gated = false;
  // A collective on device buffers of a one-rank communicator (set at
  // issue): a copy queued on the caller's stream at issue (queue_one_rank_copy), which
  // needs no mark of where that stream was (stream_ready stays empty).
  bool one_rank = false;
  // A group (Communicator::group_async): its sends and receives, each a
  // numbered send/recv op of its own (seq, match_seq), run together. The
  // carrier itself has kind kNone, the first member's seq and the Work.
  std::shared_ptr<std::vector<Op>> group;

  size_t element_size() const { return size_of(out.dtype); }
  bool in_place() const { return in.data == out.data; }
  bool on_device() const { return in.memory == MemoryKind::kCuda || out.memory == MemoryKind::kCuda; }
  // The header every frame of this op starts from (fingerprint filled in).
  FrameHeader frame_template(uint32_t epoch, int sender_rank) const;
  // "allreduce seq 7 (float32 x 1048576, sum)"; "group of seq 7..9 (2 sends, 1 recv)"
  std::string describe() const;
  OpBrief brief() const {
    return OpBrief{kind, is_send, out.dtype, reduce, seq, kind == OpKind::kAllgather ? in.count : out.count, root, peer};
  }
};

// Checks an op against the communicator it is issued on. Returns
// kInvalidArgument with a message that names the problem and the values, or
// kUnsupported for device buffers where there is no CUDA. Sets op.device.
Status validate(Op& op, int rank, int size);
// Checks a group (Op::group) and each of its members: kInvalidArgument for a
// bad member, a receive buffer that overlaps another member's buffer, or
// members on different devices (the host counts as one). Sets the carrier's
// device (its members', or -1 on the host).
Status validate_group(Op& carrier, int rank, int size);

}  // namespace rcoll
