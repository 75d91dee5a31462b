// The device side of a communicator: the NCCL communicator of each epoch
// (and the stopped ones not yet freed), the streams and the stream gate that
// device ops wait at, the in-place backup, and what decides whether device
// collectives still run on NCCL. The runtime's NCCL steps (nccl_epoch.cc,
// nccl_ops.cc) work on it; owned by the thread that holds the data plane,
// except where a member says otherwise. Declaration order is destruction
// order, reversed: each member outlives the ones declared after it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "kernels/cuda_memory.h"
#include "kernels/stream_gate.h"
#include "runtime/nccl_phases.h"
#include "transports/nccl/nccl_comm.h"

namespace rcoll {

struct NcclPlane {
  NcclPhases phases;
  kernels::cuda::PinnedBuffer
      confirm_host;                  // every epoch's confirmations (declared first: outlives them)
  std::unique_ptr<nccl::Comm> comm;  // the current epoch's
  std::unique_ptr<nccl::Comm> retired;  // the last epoch's, until a new one follows it
  // Stopped communicators whose memory is not freed yet: freeing waits for
  // the whole GPU, so it waits until no stream is held at the stream gate
  // (the end of an op, bury()); see nccl::Comm::abort.
  std::vector<std::unique_ptr<nccl::Comm>> graveyard;
  uint32_t epoch = 0;
  std::string off;  // why device collectives no longer run on NCCL ("" = they do)
  bool restart_staged = false;
  std::deque<Clock::time_point> failures;  // recoveries of ops on NCCL
  std::string cannot_join;   // this rank could not (or would not) join an epoch's communicator
  size_t init_failures = 0;  // inits in a row that did not complete
  std::string last_init_failure;
  std::atomic<uint64_t> ops{0};  // ops completed on NCCL
  std::atomic<uint64_t> fallbacks{0};
  std::atomic<bool> dropped{false};  // for counters(), from any thread
  // Device ops issued asynchronously: the stream gate Work::stream_wait waits
  // at (kernels/stream_gate.h), opened as each op ends, and the stream the
  // verdicts queue on (made with the gate, at the first such op, under the
  // communicator's queue lock). The gate's owner is set once and never
  // reset; `gate` is read from any thread.
  std::unique_ptr<kernels::cuda::StreamGate> gate_owner;
  std::atomic<kernels::cuda::StreamGate*> gate{nullptr};
  bool gate_tried = false;
  kernels::cuda::Stream verdict_stream;
  // The stream of every epoch's NCCL communicator: one for all of them, made
  // once, so a recovery queues its work on a stream (and a hardware queue)
  // that was there before any verdict waited (see run_nccl_slices).
  kernels::cuda::Stream stream;
  // Inputs of the current in-place all-reduce on NCCL, bytes [0, backed_up)
  // of op backup_seq's buffer; allocated in order on device_stream
  // (declared first: it outlives the buffer).
  kernels::cuda::Stream device_stream;
  kernels::cuda::Event device_event;
  kernels::cuda::DeviceBuffer backup;
  size_t backed_up = 0;
  uint64_t backup_seq = 0;

  // The current communicator (stopped) becomes the retired one; a retired
  // one before it goes to the graveyard.
  void retire() {
    if (retired) graveyard.push_back(std::move(retired));
    retired = std::move(comm);
  }
  // Frees the graveyard's communicators (with `device` current), each once no
  // gate of this process holds a stream (nccl::release).
  void bury(int device) {
    for (auto& c : graveyard) (void)nccl::release(std::move(c), device);
    graveyard.clear();
  }
};

}  // namespace rcoll
