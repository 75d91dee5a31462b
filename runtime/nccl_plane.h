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
  // The streams of the epochs' NCCL communicators, made once each, so a
  // recovery queues its work on a stream (and a hardware queue) that was
  // there before any verdict waited (see queue_verdict). One serves every
  // epoch, each new communicator queued behind the last one's calls, unless
  // a stopped communicator still runs on it (its stop put off while a gate
  // holds a stream, nccl::Comm::abort): then its calls may never end, and
  // the next takes a stream no such communicator uses (stream_for_next).
  static constexpr int kStreams = 4;
  kernels::cuda::Stream streams[kStreams];
  // The index of the stream for the next communicator.
  int stream_for_next() const {
    auto taken = [this](int i) {
      const void* s = streams[i].get();
      if (s == nullptr) return false;
      if (retired && retired->stop_put_off() && retired->stream() == s) return true;
      for (const auto& c : graveyard)
        if (c && c->stop_put_off() && c->stream() == s) return true;
      return false;
    };
    for (int i = 0; i < kStreams; ++i)
      if (!taken(i)) return i;
    return 0;  // every one taken (kStreams recoveries of one op): behind stream 0's calls
  }
  // Device memory that holds an op's input, bytes [0, bytes) of op seq's:
  // allocated in order on device_stream (declared first: it outlives them).
  struct KeptInput {
    kernels::cuda::DeviceBuffer buffer;
    uint64_t seq = 0;
    size_t bytes = 0;
    bool holds(uint64_t op_seq, size_t op_bytes) const {
      return seq == op_seq && bytes >= op_bytes;
    }
    void clear() {
      seq = 0;
      bytes = 0;
    }
  };
  kernels::cuda::Stream device_stream;
  kernels::cuda::Event device_event;
  // The input of the current in-place all-reduce confirmed on its own.
  KeptInput backup;
  // Collectives without a confirmation of their own (runtime/nccl_ops.cc,
  // "settled later"): each keeps its whole input here, alternating, and the
  // slot of the last one completed (`last_kept`, -1 for none) stays until
  // the next one completes or a confirmation shows every rank done. A peer
  // that failed inside it is replayed from here.
  KeptInput kept[2];
  int last_kept = -1;
  // Whether a kept input is copied inside the op's NCCL group (a send and a
  // receive to this rank) rather than by a copy before it (env.h).
  bool keep_in_group = true;
  // Where a replay's output goes (never the caller's buffer).
  kernels::cuda::DeviceBuffer replay_sink;
  // The fingerprints of every collective completed on NCCL, folded in order
  // (the same on every rank, which all complete the same collectives, however
  // a recovery resumed them): every confirmation carries them, so a desync
  // among those that settle later is reported at the next confirmation of
  // any collective. `agreed_through`: the collective seq of the last
  // confirmation seen to agree here (the reported range starts after it).
  uint64_t completed_hash = 0;
  uint64_t agreed_through = 0;
  void reset_settling() {  // collective seqs start over (a shrink)
    completed_hash = 0;
    agreed_through = 0;
    last_kept = -1;
  }
  std::atomic<uint64_t> replays{0};  // completed ops run again here for a peer
  // Communicators stopped only at their op's end (a gate held a stream).
  std::atomic<uint64_t> stops_put_off{0};
  KeptInput* holding(uint64_t seq, size_t bytes) {
    if (backup.holds(seq, bytes)) return &backup;
    for (KeptInput& k : kept)
      if (k.holds(seq, bytes)) return &k;
    return nullptr;
  }

  // The current communicator (stopped) becomes the retired one; a retired
  // one before it goes to the graveyard.
  void retire() {
    if (retired) graveyard.push_back(std::move(retired));
    retired = std::move(comm);
  }
  // Whether a communicator here still runs calls its stop left alone.
  bool any_put_off() const {
    if ((comm && comm->stop_put_off()) || (retired && retired->stop_put_off())) return true;
    for (const auto& c : graveyard)
      if (c->stop_put_off()) return true;
    return false;
  }
  // Once no gate of the process holds a stream: stops every communicator
  // whose stop was put off, all before any is freed (freeing one waits for
  // the whole GPU, the others' calls included), then frees the graveyard's
  // (with `device` current). While a gate holds one, nothing: they stay
  // here, where stream_for_next sees them.
  void bury(int device) {
    if (kernels::cuda::StreamGate::any_held()) return;
    if (comm) comm->finish_stop();
    if (retired) retired->finish_stop();
    for (auto& c : graveyard) c->finish_stop();
    for (auto& c : graveyard) (void)nccl::release(std::move(c), device);
    graveyard.clear();
  }
};

}  // namespace rcoll
