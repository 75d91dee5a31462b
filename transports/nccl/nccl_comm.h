// One NCCL communicator for one epoch: created non-blocking or blocking
// (Config::blocking) with its own init deadline, its collectives issued on a
// stream it owns, each call's completion marked by a CUDA event that the
// runtime polls (with ncclCommGetAsyncError), and an abort that is
// serialised with every other call on it, so it never races one. Like every transport it never
// retries and never recovers: a failure is reported, and the runtime builds the next epoch's
// communicator from a new unique id it distributes through the store.
//
// An aborted NCCL kernel exits normally, so an event that fires after abort()
// is not a success: calls pending at the abort report kAborted, and their
// output (for in-place calls, their input too) may be partly written.
//
// No NCCL or CUDA header here: streams are void* (a cudaStream_t).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rcoll/status.h"
#include "rcoll/types.h"
#include "base/deadline.h"

namespace rcoll::nccl {

// NCCL refuses two ranks on one GPU of one host. Where this host's ranks
// outnumber its GPUs (a one-GPU test machine), each rank becomes its own NCCL
// "host": NCCL_HOSTID = `tag`-`rank`, always this rank's (one id inherited by
// every rank is the refused case), over sockets on loopback unless NCCL_NET
// and NCCL_SOCKET_IFNAME say otherwise. Call before NCCL's first use.
inline void one_host_per_rank_if_sharing(const std::string& tag, int rank, int local_ranks,
                                         int devices) {
  if (local_ranks <= devices) return;
  const std::string host_id = tag + "-" + std::to_string(rank);
  setenv("NCCL_HOSTID", host_id.c_str(), 1);
  setenv("NCCL_NET", "Socket", 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
}

// Whether this build has the NCCL transport.
bool built();
// "2.28.9", or why there is none.
std::string version();
// Whether the NCCL loaded can stop a communicator's calls without the caller
// freeing its memory (ncclCommRevoke, NCCL 2.28 on; its proxy thread still
// frees pinned memory, docs/gpu.md). Without it, aborting frees at once,
// which waits for the whole GPU: a stream may then not wait on the GPU for a
// recovery (the runtime makes no stream gate).
bool revocable();

// A fresh ncclUniqueId as bytes, for the store. Made by one rank per epoch.
Result<std::string> new_unique_id();

enum class CallKind : uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kSend, kRecv };
const char* to_string(CallKind kind);

// One NCCL call on device memory. `count` is per rank: elements reduced
// (all-reduce), contributed (all-gather), received (reduce-scatter),
// broadcast, sent or received.
struct Call {
  CallKind kind = CallKind::kAllReduce;
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int peer = -1;  // the root of a broadcast, the other side of a send or recv
};

class Comm {
 public:
  struct Config {
    int rank = 0;
    int size = 1;
    int device = 0;
    uint32_t epoch = 0;
    // Init is polled until done, and given up when this passes or when
    // `cancelled` (asked every few ms) says another rank gave up.
    Deadline init_deadline = Deadline::after(std::chrono::seconds(60));
    std::function<bool()> cancelled;
    // 16 bytes of pinned host memory for the confirmation, outliving the
    // communicator (freeing pinned memory can wait for the whole GPU, so the
    // runtime allocates it once) and not the last epoch's (its stream may
    // still copy a confirmation back); null = the communicator allocates its own.
    void* confirm_host = nullptr;
    // The stream calls are issued on, outliving the communicator (the
    // runtime keeps one for every epoch); null = the communicator makes its own.
    void* stream = nullptr;
    // A communicator created blocking (Options::nccl_blocking): no thread
    // per call, but one of the communicator's own that enqueues every
    // group, so that a call waiting inside NCCL for a peer can still be cut
    // short by `waiter` (the caller aborts the communicator under it). Its
    // init runs on a thread of its own: given up on, it is left to stop
    // what it made once NCCL returns.
    bool blocking = false;
  };
  // Joins the communicator `unique_id` names (bytes from new_unique_id()).
  // kInvalidArgument for a malformed id, kUnsupported without a usable GPU,
  // kTimeout when the other ranks do not join by the deadline.
  static Result<std::unique_ptr<Comm>> create(std::string_view unique_id, const Config& config);
  ~Comm();  // a healthy communicator is destroyed, a failed one aborted (its enqueuer joined first)
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // While a group is still being enqueued (a first call may wait for its
  // peers to connect), by NCCL's thread or, blocking, by the communicator's
  // own, `waiter` is asked between polls (PollPause: at most 1 ms apart)
  // whether to keep waiting; a non-OK answer aborts the communicator with it.
  using Waiter = std::function<Status()>;

  // Enqueues `calls` as one NCCL group (a send and a recv that must overlap,
  // say) on the communicator's stream and returns a ticket whose event fires
  // when they are done on this rank. Tickets complete in issue order. A
  // ticket's call that fails reports its error at poll(), as does the abort.
  // From one thread at a time (blocking, an issue() while the last group is
  // still being enqueued fails: kInternal).
  Result<uint64_t> issue(const std::vector<Call>& calls, const Waiter& waiter);
  Result<uint64_t> issue(const Call& call, const Waiter& waiter) { return issue(std::vector<Call>{call}, waiter); }

  // An all-reduce (max) of (fingerprint, -fingerprint), queued behind the
  // op's calls on the stream (or issued once this rank saw them done). Each
  // rank's runs only after its calls are done, so when it is done here,
  // every rank's calls are: nothing of them can need running again anywhere;
  // and fingerprints_agree() then tells whether every rank ran the same op.
  // With `peer` >= 0 (a send or receive), the same between the pair only: a
  // send of this rank's fingerprint to `peer` and a receive of the peer's,
  // as one group.
  Result<uint64_t> issue_confirmation(uint64_t fingerprint, const Waiter& waiter, int peer = -1);
  // After the confirmation's ticket is done: max == -max(-x) iff all equal
  // (pairwise: the peer's fingerprint equals this rank's).
  bool fingerprints_agree() const;
  // A device-to-device copy on the communicator's stream, ordered before
  // every call issued after it (no ticket: what a copy of an op's input needs).
  Status copy(void* dst, const void* src, size_t bytes);

  // Done (true), still running (false), or the error that ended it: an
  // asynchronous NCCL error, a CUDA error, or the abort.
  Result<bool> poll(uint64_t ticket);

  // Fails the communicator with `why` (it takes no more calls) and stops
  // every call in flight. Idempotent, callable from any thread. It does not
  // wait for the calls in flight to finish. It frees NCCL's memory at once
  // (ncclCommAbort), which waits for the whole GPU, unless a stream gate of
  // the process holds a stream (kernels/stream_gate.h), perhaps waiting for
  // the recovery this abort starts. Then the stop is put off: NCCL is not
  // called at all, and the calls in flight go on. (Stopping NCCL frees
  // pinned memory even when it only revokes: its proxy's cudaFreeHost waits
  // for the whole GPU, the held stream included, holding a lock of the CUDA
  // driver that every later CUDA call of the process needs, the recovery's
  // too: stop 52's and stop 56's stacks.) finish_stop() or the destructor
  // makes it, once no gate holds a stream. Not put off while a group is still
  // being enqueued: it has no ticket to be ordered after, and could launch
  // later on buffers the next attempt uses.
  void abort(const Status& why);
  bool aborted() const;
  // Whether abort() put the stop off: the calls in flight still run.
  bool stop_put_off() const;
  // Makes a stop abort() put off (ncclCommRevoke: every call in flight ends,
  // nothing is freed yet); for once no gate holds a stream. The runtime
  // stops every such communicator before it frees any: freeing one waits
  // for the whole GPU, the others' calls included.
  void finish_stop();
  // The stream its calls run on.
  void* stream() const;

  // Work on `stream` after this waits for everything queued so far. Once its
  // stop was put off, where a confirmation was the last work queued, for
  // everything before it: a confirmation a peer never joined (it failed
  // first) waits for ever, and no stop ends it until the gate opens.
  Status order_after_me(void* stream);
  // Calls issued after this wait for `event` (recorded on a caller's stream).
  Status order_after_event(void* event);
  // Calls issued after this wait for everything queued on `previous` (the
  // last epoch's communicator, aborted or not: its kernels may still be
  // draining, and copies queued behind them still run), as order_after_me().
  Status follow(Comm& previous);

 private:
  struct Impl;
  explicit Comm(const Config& config);
  Status failure(ErrorCode code, const std::string& what) const;
  Status prepare_device();
  Status init(const void* unique_id);  // an ncclUniqueId
  Result<uint64_t> record_ticket();  // under mu_
  Status order_after_locked(void* stream);  // order_after_me, under mu_
  // Enqueues `calls` as one group under `lock` (released while it settles).
  Status enqueue_group(std::unique_lock<std::mutex>& lock, const std::vector<Call>& calls,
                       const Waiter& waiter);

  Config config_;
  mutable std::mutex mu_;  // every NCCL call on the communicator, abort included
  std::unique_ptr<Impl> impl_;
};

// Destroys `comm` (which waits for the whole GPU) with `device` current, now
// if no stream gate of the process holds a stream (kernels/stream_gate.h),
// else once none does (StreamGate::free_deferred). Returns whether it was
// destroyed now.
bool release(std::unique_ptr<Comm> comm, int device);

}  // namespace rcoll::nccl
