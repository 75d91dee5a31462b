// A gate that CUDA streams wait at, on the GPU, until the host says so: the
// host opens it op by op ("every op up to seq N has its verdict"), and a
// stream told to wait for op N goes on once the gate has opened that far.
//
// Why a host-written word and not an event: an op on NCCL may run more than
// once (an aborted NCCL kernel exits normally, leaving a partly written
// result, and the recovery runs the op again on a new communicator). An
// event behind the first attempt would let the caller's stream go on with
// that partial result. The gate opens only when the runtime has seen the
// op's final outcome, however many attempts it took.
//
// The word is 32 bits of pinned, device-mapped host memory, and a stream
// waits with cuStreamWaitValue32's cyclic greater-or-equal, so sequence
// numbers may wrap. The memory is never freed: a wait queued on some stream
// may still read it after its communicator is gone, so the gates of a
// process share one arena that lives as long as the process (4 KiB, 1024
// gates per page).
//
// Such a wait is invisible to CUDA's scheduler: CUDA multiplexes streams onto
// a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), and work that lands
// behind a closed gate in the same queue waits too. So a gate is only ever
// closed on work already queued (the runtime opens it as soon as that work is
// seen done), never on work yet to be queued. See runtime/nccl_ops.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "rcoll/status.h"

namespace rcoll::kernels::cuda {

class StreamGate {
 public:
  // A gate opened through `opened` (every wait for a seq <= opened passes).
  // kUnsupported where this build, driver or device has no stream memory
  // operations (the caller then waits on the host instead).
  static Result<std::unique_ptr<StreamGate>> create(uint32_t opened);
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  // Host side: every op up to `seq` has its verdict. Never blocks. Ends a
  // hold for an op up to `seq`.
  void open_through(uint64_t seq);
  uint32_t opened() const;
  // Work queued on `stream` after this waits (on the GPU) until the gate is
  // open through `seq`. Returns at once.
  Status enqueue_wait(void* stream, uint64_t seq) const;

  // A stream now waits at this gate for op `seq` (the runtime queued its
  // verdict), until open_through(seq). While any gate of the process holds
  // a stream, nothing may wait for the whole GPU: freeing pinned memory or
  // NCCL's would wait for that stream, whose verdict may wait for this very
  // thread (its recovery) or for a peer that waits for it. Such frees go
  // through free_when_none_held. Called before the wait is queued.
  void hold(uint64_t seq);
  static bool any_held();
  // Runs `free` (something that waits for the whole GPU: cudaFreeHost,
  // NCCL's destroy or abort) now if no gate of the process holds a stream,
  // and returns true; else keeps it for free_deferred and returns false. A
  // hold() meanwhile waits until `free` has returned, so no stream starts
  // waiting at a gate during it. A free may free more (nested calls).
  static bool free_when_none_held(std::function<void()> free);
  // The same, but nothing is kept: false means `free` did not run.
  static bool free_if_none_held(const std::function<void()>& free);
  // Runs the frees kept since, if no gate holds a stream now (the runtime
  // calls it at every op's end and when idle). No lock when none is kept.
  static void free_deferred();

 private:
  explicit StreamGate(volatile uint32_t* word, uint64_t device_address) : word_(word), device_address_(device_address) {}
  volatile uint32_t* word_;
  uint64_t device_address_;  // the word as the GPU sees it (a CUdeviceptr)
  // The runtime calls hold() and open_through() for a communicator's ops
  // one at a time: an op executes on the progress thread or, blocking, on
  // the caller's, never two at once (the communicator's running flag and
  // lock), and close() opens only after the progress thread ended. So these
  // take no lock of their own.
  bool holding_ = false;
  uint64_t held_seq_ = 0;
};

}  // namespace rcoll::kernels::cuda
