// What a communicator counts as it runs, for Communicator::counters(): written
// by the thread that owns the data plane (the progress thread, or a caller
// running a blocking op), read from any thread. One place, so that a new
// counter is declared, reset and reported together.
#pragma once

#include <atomic>
#include <cstdint>

#include "rcoll/communicator.h"

namespace rcoll {

struct Tally {
  std::atomic<uint64_t> ops_done{0};
  std::atomic<uint64_t> held_bytes{0};  // scratch, replay log, pool, staging
  // Bytes moved by the current epoch's transport (as it last reported them),
  // and by the transports of earlier epochs.
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> bytes_sent_before{0};
  std::atomic<uint64_t> bytes_received_before{0};
  std::atomic<uint64_t> recoveries{0};
  std::atomic<int64_t> recovery_micros{0};
  std::atomic<uint64_t> fallbacks{0};  // the transport chain's (NCCL's are NcclPlane's)
  std::atomic<uint64_t> probes{0};
  std::atomic<uint64_t> injected{0};  // faults fired (RCOLL_INJECT)
  std::atomic<uint64_t> delays_injected{0};
  // Taken by a shrink: how many there were, and the two counts at the last one.
  std::atomic<uint64_t> shrinks{0};
  std::atomic<uint64_t> recoveries_at_shrink{0};
  std::atomic<uint64_t> faults_at_shrink{0};

  // The transport of an epoch reports its own totals; at its end they join
  // the earlier epochs'.
  void transport_moved(uint64_t sent, uint64_t received) {
    bytes_sent = sent;
    bytes_received = received;
  }
  void retire_transport(uint64_t sent, uint64_t received) {
    bytes_sent_before += sent;
    bytes_received_before += received;
    bytes_sent = 0;
    bytes_received = 0;
  }
  void note_recovery(int64_t micros) {
    ++recoveries;
    recovery_micros += micros;
  }
  void note_shrink() {
    recoveries_at_shrink = recoveries.load();
    faults_at_shrink = injected.load();
    ++shrinks;
  }
  // The fields of `c` this tally counts (the rest describe the epoch).
  void fill(Counters& c) const {
    c.ops = ops_done;
    c.held_bytes = held_bytes;
    c.bytes_sent = bytes_sent_before + bytes_sent;
    c.bytes_received = bytes_received_before + bytes_received;
    c.recoveries = recoveries;
    c.recovery_seconds = static_cast<double>(recovery_micros.load()) / 1e6;
    c.faults_injected = injected;
    c.delays_injected = delays_injected;
    c.shrinks = shrinks;
    c.recoveries_at_shrink = recoveries_at_shrink;
    c.faults_at_shrink = faults_at_shrink;
    c.fallbacks = fallbacks;
    c.probes = probes;
  }
};

}  // namespace rcoll
