// Device buffers on the host transports (UCX, TCP): an op on CUDA memory runs
// as the same op on page-locked host copies of its buffers, so everything the
// runtime guarantees for host ops (slices, ledger, backups, recovery, fallback
// down the chain) holds for it unchanged.
//
//   issue:      an event is recorded on the caller's stream (runtime/op.h)
//   stage_in:   rcoll's own stream waits for that event, copies the input to
//               the pinned buffer; the host waits for both (bounded by the
//               straggler timeout: the caller's own kernels may still run)
//   host op:    the runtime runs the op on the pinned copies
//   stage_out:  the output is copied back on rcoll's stream, the caller's
//               stream is made to wait for that copy, and the host waits for it
//
// The pinned buffer grows to the largest op and is kept until the
// communicator closes (freeing pinned memory can wait for the whole GPU). Reductions of staged
// data run on the host (kernels/cpu_reduce.h); copies are whole-op, not yet
// overlapped with the transfers slice by slice.
#pragma once

#include <cstddef>

#include "kernels/cuda_memory.h"
#include "rcoll/status.h"
#include "base/deadline.h"
#include "runtime/op.h"

namespace rcoll {

class DeviceStaging {
 public:
  struct Limits {
    // How long the op may wait for the caller's stream to reach it (its own
    // kernels still running): the straggler timeout.
    Clock::duration caller_stream = std::chrono::minutes(30);
    // A copy may take this plus its bytes at a pessimistic 1 GB/s.
    Clock::duration copy_floor = std::chrono::seconds(10);
  };

  // Whether `rank` reads the op's input / writes its output (a broadcast's
  // root only reads, its other ranks only write; a send only reads).
  static bool reads_input(const Op& op, int rank);
  static bool writes_output(const Op& op, int rank);

  // The op on pinned host copies of its buffers, the input copied in.
  Result<Op> stage_in(const Op& op, int rank, const Limits& limits);
  // Copies the host op's output back to the device op's output and orders the
  // caller's stream after it.
  Status stage_out(const Op& op, const Op& host, int rank, const Limits& limits);

  // A group (Op::group) of device sends and receives: the same group on
  // pinned host copies of its members' buffers (one buffer, members one
  // after the other), once the caller's stream reached it, its sends'
  // inputs copied in.
  Result<Op> stage_in_group(const Op& carrier, const Limits& limits);
  // Copies the host group's receives back to the device group's buffers and
  // orders the caller's stream after them.
  Status stage_out_group(const Op& carrier, const Op& host, const Limits& limits);

  size_t held() const { return pinned_.capacity(); }
  // Frees everything (at close, with the communicator's device current).
  void reset() {
    pinned_.release();
    done_.reset();
    stream_.reset();
  }

 private:
  Status prepare();
  kernels::cuda::PinnedBuffer pinned_;
  kernels::cuda::Stream stream_;
  kernels::cuda::Event done_;
};

}  // namespace rcoll
