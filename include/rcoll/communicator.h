// The communicator: a group of ranks and the collectives between them.
//
//   rcoll::Communicator comm = rcoll::Communicator::create();   // from the environment
//   std::vector<float> grad(n);
//   comm.allreduce(rcoll::Buffer::of(grad), rcoll::ReduceOp::kSum);  // in place, blocking
//
// Every op has an async form (name_async) returning a Work, and a blocking form
// that throws rcoll::Error. Ops run in issue order, one at a time per
// communicator, on a progress thread the communicator owns. An op is in place
// when its input and output are the same memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "rcoll/options.h"
#include "rcoll/status.h"
#include "rcoll/types.h"

namespace rcoll {

class CommunicatorImpl;
struct WorkState;

// Handle to one issued op. Cheap to copy; all copies observe the same op.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}

  // Waits for the op. Returns its final Status, or kWaitTimeout if `timeout`
  // expired first (the op keeps running and can be waited for again). For a
  // device op, work queued afterwards on any stream sees the result.
  Status wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) const;
  // NCCL's way: makes `cuda_stream` (a cudaStream_t; nullptr = the legacy
  // default stream) wait, on the GPU, for the op's result, and returns
  // without waiting for it on the host. For an async op on device buffers
  // that runs on NCCL, it returns once the op's GPU work is queued (the ops
  // before it have finished); the stream then waits for rcoll's verdict on
  // the op, not for a first attempt that a recovery may have aborted, so
  // work queued after this never sees a partial result. If the op fails for
  // good, the stream is let go (its output is then undefined): the failure
  // is what status() and wait() return, and later ops fail too. Any other op
  // (host buffers, staged device ops, blocking calls) is waited for here,
  // as wait() does. Returns kOk, or the op's error if it already failed, or
  // kWaitTimeout if `timeout` expired before either (nothing was queued on
  // the stream then; the op keeps running and can be waited for again).
  Status stream_wait(void* cuda_stream, std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) const;
  bool done() const;
  // The final status once done(); kOk while still running.
  Status status() const;
  // The op's sequence number on this communicator (1, 2, 3, ... in issue order).
  uint64_t seq() const;

 private:
  std::shared_ptr<WorkState> state_;
};

struct Counters {
  uint64_t ops = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t recoveries = 0;
  // Moves down the transport chain (a transport dropped for failing), and
  // moves back up to a preferred one after its cool-down.
  uint64_t fallbacks = 0;
  uint64_t probes = 0;
  double recovery_seconds = 0;
  // RCOLL_INJECT faults applied on this rank: those that break the data plane
  // (close-link, drop-chunk: each costs one recovery) and delays (stall, delay-chunk).
  uint64_t faults_injected = 0;
  uint64_t delays_injected = 0;
  // Shrink mode: how many times the group went on without a dead rank, and
  // recoveries and faults_injected as they stood when it last did (taken by
  // the thread that counts them, at the shrink: what follows is exactly the
  // new group's).
  uint64_t shrinks = 0;
  uint64_t recoveries_at_shrink = 0;
  uint64_t faults_at_shrink = 0;
  int64_t epoch = 0;
  std::string transport;
  // Where ops on device buffers run: "nccl", or "staged" (through pinned
  // host memory over `transport`), and how many ops (a group counting once)
  // completed on NCCL.
  std::string device_transport;
  uint64_t nccl_ops = 0;
  // Collectives this rank completed on NCCL and ran again, in a recovery,
  // for a peer that had not completed them (from their input kept on the
  // device: docs/gpu.md).
  uint64_t nccl_replays = 0;
  // NCCL communicators whose stop a recovery put off to the end of the op,
  // because a CUDA stream waited at the stream gate (docs/gpu.md: "Never
  // stopped under a held gate"): their calls ran on beside the next epoch's.
  uint64_t nccl_stops_put_off = 0;
  // Host memory rcoll holds now for staging, input backups and reuse. Grows to
  // the working set; released after a few idle seconds.
  uint64_t held_bytes = 0;
  // Adaptive chunking: the frame size and frames in flight chosen for new
  // collectives from the slowest link as timed when the current epoch was
  // connected (one-way latency, bytes/s), unless pinned by Options.
  uint64_t chunk_bytes = 0;
  int pipeline_depth = 0;
  double link_latency_us = 0;
  double link_bandwidth = 0;
};

// One send or receive of a group (Communicator::group_async).
struct PeerOp {
  bool is_send = false;
  Buffer data;
  int peer = -1;
  static PeerOp send(Buffer data, int peer) { return PeerOp{true, data, peer}; }
  static PeerOp recv(Buffer data, int peer) { return PeerOp{false, data, peer}; }
};

class Communicator {
 public:
  // Joins the group described by `options` and the environment. Blocks until
  // every rank has arrived (waiting up to options.join_timeout for late ones,
  // and naming them) and connected, or gives up within about 4 x
  // options.connect_timeout after that (one for the connects, and one each
  // for the phases after them: see Options::connect_timeout). Throws rcoll::Error.
  static Communicator create(Options options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();  // closes: waits for issued ops, then tears down

  int rank() const;
  int size() const;
  const Options& options() const;

  // Point to point. The receiver's count and dtype must equal the sender's.
  Work send_async(Buffer data, int peer, OpOptions op = {});
  Work recv_async(Buffer data, int peer, OpOptions op = {});
  // A group of sends and receives that progress together, as NCCL's
  // ncclGroupStart() ... ncclGroupEnd() around ncclSend/ncclRecv: any
  // pattern that NCCL completes (every send matched by a receive of the same
  // count and dtype on its peer, grouped there or not, the k-th send to a
  // peer pairing with that peer's k-th receive from this rank) completes
  // here, whatever the order of `ops`: a pipeline stage's send to the next stage and receive
  // from the previous one, a ring exchange, a halo exchange. Ungrouped, a
  // large send completes only once its receiver takes the bytes, so stages
  // that each post a send before their receive (or a receive before their
  // send, around a ring) wait on each other for ever. Each send and receive
  // is numbered, kept in the ledger and resumed after a recovery as its
  // ungrouped form would be. Buffers all on the host or all on one CUDA
  // device (kInvalidArgument for a mix). On a device with NCCL in the chain
  // the group is one NCCL group (op.cuda_stream orders it, Work::stream_wait
  // waits for it, as for any device op), resumed after a recovery member by
  // member; its peers must issue their counterparts as a group too (NCCL
  // users write batch_isend_irecv on both sides), since a group confirms with
  // each peer once for all the members between them (counterparts issued
  // one by one hang, and fail once the recoveries an op allows are spent).
  // And it completes only once each peer's group holding the counterparts
  // moved all its data: a peer group that also waits on a third rank which
  // waits on this rank's next op hangs here where raw NCCL completes; rings,
  // pipelines and halo exchanges, grouped alike on every rank, do not.
  // Without NCCL it is staged through pinned host memory. The Work completes when all of them
  // have; an empty group completes at once. Buffers of a group's receives
  // must not overlap each other or its sends (kInvalidArgument).
  Work group_async(std::span<const PeerOp> ops, OpOptions op = {});
  // out = reduce(in of every rank). in.data == out.data: in place.
  Work allreduce_async(Buffer in, Buffer out, ReduceOp reduce, OpOptions op = {});
  // out (size * in.count elements) = concatenation of every rank's in, in rank order.
  Work allgather_async(Buffer in, Buffer out, OpOptions op = {});
  // in has size * out.count elements; rank r's out = reduce over ranks of block r of in.
  Work reduce_scatter_async(Buffer in, Buffer out, ReduceOp reduce, OpOptions op = {});
  // Every rank's data becomes root's data.
  Work broadcast_async(Buffer data, int root, OpOptions op = {});
  Work barrier_async(OpOptions op = {});
  // in and out have size * n elements each: block q of in goes to rank q, and
  // block q of out comes from rank q (pairwise exchange; buffers must not overlap).
  Work alltoall_async(Buffer in, Buffer out, OpOptions op = {});

  // Blocking forms: wait, and throw rcoll::Error on failure.
  void send(Buffer data, int peer, OpOptions op = {});
  void recv(Buffer data, int peer, OpOptions op = {});
  void group(std::span<const PeerOp> ops, OpOptions op = {});
  void allreduce(Buffer data, ReduceOp reduce, OpOptions op = {});
  void allreduce(Buffer in, Buffer out, ReduceOp reduce, OpOptions op = {});
  void allgather(Buffer in, Buffer out, OpOptions op = {});
  void reduce_scatter(Buffer in, Buffer out, ReduceOp reduce, OpOptions op = {});
  void broadcast(Buffer data, int root, OpOptions op = {});
  void barrier(OpOptions op = {});
  void alltoall(Buffer in, Buffer out, OpOptions op = {});

  // Waits for issued ops, then closes every connection. Later ops fail with kClosed.
  void close();
  Counters counters() const;
  // A multi-line report for humans: identity, epoch, transport, counters, the
  // progress deadline in force, and the flight recorder's last ops.
  std::string diagnostics() const;

 private:
  explicit Communicator(std::unique_ptr<CommunicatorImpl> impl);
  std::unique_ptr<CommunicatorImpl> impl_;
};

}  // namespace rcoll
