// Every knob of a communicator, in one object, so adding one never changes a
// signature. Fields left at their defaults are filled from the environment
// (RCOLL_* variables, then torchrun / Open MPI / Slurm ones), then defaults.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace rcoll {

class Store;

// kRing: reduce-scatter + allgather around a ring, bandwidth-optimal for large data.
// kDirect: every rank sends its whole input to every other rank once and reduces
// locally in rank order: one round of latency, for small data.
// kHalvingDoubling: the ring's slices reduced by recursive halving and gathered
// by recursive doubling: 2 log2(p) steps instead of 2(p-1), for power-of-two
// groups (others run the ring).
// kRecursiveDoubling: log2(p) exchanges of the whole buffer with rank r ^ 1,
// r ^ 2, ..., each reduced at once: fewer messages than kDirect for small data
// in power-of-two groups (others run kDirect). Like kDirect it is one slice:
// pinned on large data it needs 2x the buffer in scratch, and a failure re-runs
// the whole op.
enum class AllreduceAlgorithm : uint8_t { kAuto = 0, kRing, kDirect, kHalvingDoubling, kRecursiveDoubling };
// Broadcasts above the eager range, more than 2 ranks: a pipelined chain, or a
// star (the root sends every piece to every rank). kAuto: the star where the
// group's ranks all share one host of at most 2 CPUs, or the buffer is one
// piece; the chain otherwise (runtime/algorithms/broadcast.cc says why).
enum class BroadcastAlgorithm : uint8_t { kAuto = 0, kChain, kStar };

// Every rank must set these alike: transport and transports (as resolved, the
// chain in its order), chunk_bytes, pipeline_depth, socket_buffer_bytes,
// allreduce_algorithm, broadcast_algorithm, small_allreduce_bytes, recovery and
// shrink_on_death. create() compares them across the ranks before connecting;
// a difference is kInvalidArgument on every rank, naming the setting, both
// values and both ranks. The rest (timeouts, backup memory, the interface,
// congestion control, spinning) a rank may set for itself.
struct Options {
  // Identity. -1 = from the environment.
  int rank = -1;
  int world_size = -1;

  // Rendezvous. If null, one is made from RCOLL_STORE_ADDR / MASTER_ADDR+MASTER_PORT
  // (rank 0 hosts it when nobody else does) or RCOLL_STORE_FILE.
  std::shared_ptr<Store> store;
  // Namespace of this communicator in the store; several communicators may share a store.
  std::string name = "world";
  // Per-job secret checked on every connection (RCOLL_JOB_TOKEN). Empty = none.
  std::string job_token;

  // "auto" runs the fallback chain below; "tcp", "ucx" or "nccl" pins one
  // transport (no fallback). RCOLL_TRANSPORT overrides "auto".
  std::string transport = "auto";
  // The fallback chain, preferred first (RCOLL_TRANSPORTS=nccl,ucx,tcp). Empty =
  // nccl, ucx, tcp. Transports not built in, or not usable for host buffers,
  // are skipped (and said so at start-up). A transport that fails to connect on
  // any rank, or fails transport_failures_to_drop times within
  // transport_failure_window, is dropped for the next epoch by agreement of
  // every rank; after transport_probe_after, a recovery tries it again.
  std::vector<std::string> transports;
  // Why this chain, for the ready line (the PyTorch backend says why it put
  // TCP first on one host, and why it does not poll); nothing reads it otherwise.
  std::string transports_reason;
  int transport_failures_to_drop = 3;                          // RCOLL_TRANSPORT_FAILURES
  std::chrono::milliseconds transport_failure_window{60000};   // RCOLL_TRANSPORT_FAILURE_WINDOW_MS
  std::chrono::milliseconds transport_probe_after{300000};     // RCOLL_TRANSPORT_PROBE_MS
  // UCX endpoints' error handling (RCOLL_UCX_ERROR_MODE): "auto" (none on one
  // host, where UCX 1.13's shared memory cannot do peer mode; peer across
  // hosts), "peer" or "none". See transports/ucx/ucx_transport.h.
  std::string ucx_error_mode = "auto";
  // Microseconds a wait polls the transport (yielding the core between polls)
  // before it sleeps in the kernel (RCOLL_SPIN_US). -1 = 50. Waits for an op
  // on NCCL poll for at least 1 ms. See README.
  int spin_us = -1;
  // How device ops call NCCL (RCOLL_NCCL_BLOCKING): 0 = on a non-blocking
  // communicator (NCCL 2.28 enqueues each call's group on a thread of its
  // own: 18-34 us more per small op on an H200, docs/gpu.md); 1 = on a
  // communicator created blocking, whose calls one helper thread per
  // communicator enqueues, so a call that waits for a peer inside NCCL (a
  // first send to it) can still be aborted by rcoll's judging on the op's
  // thread, and whose init runs on a thread of its own, so its deadline
  // still holds (a rank that gives up on it leaves it to stop when NCCL
  // returns). Its stop (a revoke) runs on a thread of its own too. The
  // default: small ops take about two thirds of the non-blocking time
  // (bench/RESULTS.md, stop 50). -1 = from the environment, else 1.
  int nccl_blocking = -1;
  // NCCL syntax: "eth,ib" prefixes, "^docker" excludes, "=eth0" exact. RCOLL_SOCKET_IFNAME.
  std::string socket_ifname;

  // Deadlines.
  // Per phase of setting up an epoch: listeners, connects and hello; then the
  // link timing, reading the other ranks' timing, and (at creation) the
  // heartbeat channel's connects, each of which gets at least this much again.
  // So creation gives up after at most about 4x this, after the join
  // (join_timeout) (RCOLL_CONNECT_TIMEOUT_MS).
  std::chrono::milliseconds connect_timeout{8000};
  // How long creation waits for every rank to arrive (a rank pulling its
  // container image or loading a checkpoint first starts late) before the
  // connect phases and their connect_timeout begin: a late rank is logged
  // and waited for, not a failure (RCOLL_JOIN_TIMEOUT_MS; 0 = connect_timeout;
  // the PyTorch backend uses the process group's timeout).
  std::chrono::milliseconds join_timeout{0};
  std::chrono::milliseconds store_timeout{30000};   // store waits during setup
  // Progress deadline of one op: how long it may move no bytes before the data
  // plane counts as hung (RCOLL_OP_TIMEOUT_MS). 0 = derived: deadline_floor plus
  // deadline_slack times the time a window of slices takes at the measured speed.
  std::chrono::milliseconds op_timeout{0};
  std::chrono::milliseconds deadline_floor{10000};
  // The longest an op may go on with no slice completing, once a stall of it
  // was judged hung (every rank in the op, no bytes moving), counted across
  // its recoveries, recovery time included (RCOLL_HANG_TIMEOUT_MS; 0 = no
  // bound but max_recoveries_per_op attempts of the progress deadline each).
  // Past it the op fails with kTimeout and the communicator with it. The
  // first attempt's progress deadline is at most half of it (so a recovery
  // fits), each later one what is left of it. A live rank that has not
  // reached the op (a straggler) is not a hang: straggler_timeout bounds it.
  // The PyTorch backend sets it to the process group's timeout unless the
  // variable is set.
  std::chrono::milliseconds hang_timeout{0};
  double deadline_slack = 4.0;

  // Recovery. When an op fails (deadline, transport error, a peer's abort
  // notice) the communicator aborts the data plane, agrees with every rank on
  // where each op got to, reconnects (epoch + 1) and resumes from there.
  bool recovery = true;                                // RCOLL_RECOVERY=0 turns it off
  std::chrono::milliseconds recovery_timeout{30000};   // RCOLL_RECOVERY_TIMEOUT_MS
  int max_recoveries_per_op = 8;
  // Shrink mode (RCOLL_SHRINK=1): when a rank dies, the survivors agree on the
  // new group and go on without it. The op that saw the death, and every op
  // issued before the shrink, fail with kPeerDead; rank() and size() then
  // describe the new group, and ops issued from there on run in it.
  bool shrink_on_death = false;
  // A peer whose heartbeats stop for this long is suspect (RCOLL_LIVENESS_MS);
  // a peer whose process died is reported within it.
  std::chrono::milliseconds liveness_budget{1500};
  // Heartbeats to every peer (P(P-1) per interval) instead of to the two ring
  // neighbours, which tell every rank when one turns silent, and to the peers
  // a stalled op asks (RCOLL_HEARTBEATS_TO_ALL=1). For comparison: the
  // sparse default tells the same straggler, silent and dead cases apart.
  bool heartbeats_to_all = false;
  // How long an op waits for a live peer that has not reached it yet (a rank
  // restoring a checkpoint, say) before failing (RCOLL_STRAGGLER_TIMEOUT_S, or
  // RCOLL_STRAGGLER_TIMEOUT_MS).
  std::chrono::milliseconds straggler_timeout{30 * 60 * 1000};
  // Memory for input backups that make slices re-runnable (in-place windows, tails of completed ops).
  size_t backup_bytes = 256u << 20;
  // Collectives on NCCL of less than 1 MiB of input settle later: no
  // confirmation (an NCCL all-reduce) of their own; every
  // nccl_confirm_every-th collective seq is confirmed, carrying the
  // fingerprints of every collective before it (each keeps its input on the
  // device until the next completes, for a peer's replay), so a desync among
  // them is reported up to this many collectives late, naming the range.
  // 1 = every op confirmed (RCOLL_NCCL_CONFIRM_EVERY; -1 = from the
  // environment, else 16; the same on every rank). See docs/gpu.md.
  int nccl_confirm_every = -1;

  // Chunking: bytes per frame and frames in flight per link. 0 = adaptive:
  // chosen at every epoch from the slowest link as timed when the epoch was
  // connected (covering twice its bandwidth-delay product; 128 KiB x 4 on a
  // loopback). A value pins it (RCOLL_CHUNK_BYTES, RCOLL_PIPELINE_DEPTH).
  size_t chunk_bytes = 0;
  int pipeline_depth = 0;
  // Socket buffer size for the TCP transport (RCOLL_SOCKET_BUFFER_BYTES); 0 =
  // chosen by rcoll (4 MiB), else at least 64 KiB (create() refuses less:
  // a window under one loopback segment stalls TCP). The same on every rank:
  // it also bounds what a send may have in flight, which decides how long
  // the replay log keeps it.
  size_t socket_buffer_bytes = 0;
  // TCP congestion control of the data plane's sockets (RCOLL_TCP_CONGESTION):
  // "auto" = reno when the data plane runs over loopback (there BBR's pacing
  // held 16-64 MiB allreduce and broadcast to 0.5-0.7x of reno's busbw at 2
  // ranks), else the kernel's default; "default" = always the kernel's; or a
  // name the kernel allows (net.ipv4.tcp_allowed_congestion_control). One the
  // kernel refuses is logged and the default kept.
  std::string tcp_congestion = "auto";

  AllreduceAlgorithm allreduce_algorithm = AllreduceAlgorithm::kAuto;
  // Up to this many bytes allreduce uses the direct algorithm (kAuto only); for
  // power-of-two groups above 2 ranks, recursive doubling up to this x 4/p
  // (64 KiB at 4 ranks, 32 KiB at 8).
  size_t small_allreduce_bytes = 64 * 1024;
  // RCOLL_BROADCAST_ALGO (auto, chain, star). Every rank must pin the same
  // (checked at creation, as for the other settings listed above Options).
  BroadcastAlgorithm broadcast_algorithm = BroadcastAlgorithm::kAuto;
};

// Per-op knobs.
struct OpOptions {
  // Override of the op's progress deadline (how long it may move no bytes
  // before it is judged); 0 = the communicator's. It never ends the wait for
  // a live rank that is merely late: straggler_timeout does.
  std::chrono::milliseconds timeout{0};
  // Override of how long this op waits for a live rank that has not reached
  // it (Options::straggler_timeout); 0 = the communicator's. Past it the op
  // fails with kTimeout naming the late rank, and the communicator with it
  // (the ranks no longer agree on which op is which). With `timeout`, this
  // bounds the whole op, lateness included.
  std::chrono::milliseconds straggler_timeout{0};
  // For device buffers (MemoryKind::kCuda): the CUDA stream (a cudaStream_t)
  // the caller orders them on; nullptr = the legacy default stream. The op
  // starts after the work queued on it when the op is issued, and once the op
  // is done (Work::wait returned), work queued on it afterwards sees the
  // result. Ignored for host buffers.
  void* cuda_stream = nullptr;
};

}  // namespace rcoll
