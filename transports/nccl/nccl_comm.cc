// The NCCL communicator of one epoch (transports/nccl/nccl_comm.h).
//
// Non-blocking (ncclConfig_t.blocking = 0) unless Config::blocking asks
// otherwise: init and every call may return ncclInProgress, after which the
// communicator's state is polled with ncclCommGetAsyncError until it
// settles, releasing the lock between polls so an abort from another thread
// gets in. Blocking, each group is enqueued on the communicator's enqueuer
// thread (Enqueuer, below) and issue() polls for it the same way, so a call
// that waits inside NCCL for a peer can still be cut short by rcoll's
// judging (the op's thread aborts the communicator); its init runs on a
// thread of its own (BlockingInit). Completion of each
// issued group is an event recorded behind it on the communicator's stream.
#include "transports/nccl/nccl_comm.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "base/hand_off.h"
#include "base/log.h"
#include "kernels/cuda_memory.h"
#include "kernels/stream_gate.h"

namespace rcoll::nccl {
namespace {

ncclDataType_t to_nccl(DataType d) {
  switch (d) {
    case DataType::kInt8: return ncclInt8;
    case DataType::kUint8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kUint32: return ncclUint32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUint64: return ncclUint64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBfloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
  }
  return ncclFloat32;
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return ncclAvg;
  }
  return ncclSum;
}

std::string cuda_error(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  std::string s = std::string(ncclGetErrorString(r));
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += ": " + std::string(last);
  return s;
}

// NCCL's enqueue of a group (on NCCL's thread, or blocking on the enqueuer)
// is polled without sleeping for this long (it takes microseconds unless
// peers must connect).
constexpr auto kSettleSpin = std::chrono::microseconds(1000);
// The enqueuer yields for this long after a group before it sleeps: the next
// op's group usually comes sooner, and is then taken without a wake-up.
constexpr auto kIdleSpin = std::chrono::microseconds(200);

// An NCCL failure's code: kDevice when the CUDA context is gone for good
// (NCCL reports it as an unhandled CUDA error), so nobody retries on it.
ErrorCode classify(ncclResult_t r, cudaStream_t stream) {
  if (r != ncclUnhandledCudaError) return ErrorCode::kTransport;
  const cudaError_t e = stream ? cudaStreamQuery(stream) : cudaPeekAtLastError();
  return kernels::cuda::error_code(e) == ErrorCode::kDevice ? ErrorCode::kDevice : ErrorCode::kTransport;
}

// ncclCommRevoke (NCCL 2.28 on): stops a communicator's calls in flight
// without freeing anything. Looked up at run time, so an older NCCL still loads.
using RevokeFn = ncclResult_t (*)(ncclComm_t, int);
RevokeFn revoke_entry() {
  static RevokeFn fn = reinterpret_cast<RevokeFn>(dlsym(RTLD_DEFAULT, "ncclCommRevoke"));
  return fn;
}

// ncclGroupStart, `calls` on `stream`, ncclGroupEnd, with the communicator's
// device current: the first call's failure, else ncclGroupEnd's result
// (ncclInProgress: a non-blocking communicator is still enqueuing it).
ncclResult_t enqueue(ncclComm_t comm, cudaStream_t stream, const std::vector<Call>& calls) {
  ncclResult_t r = ncclGroupStart();
  for (const Call& c : calls) {
    if (r != ncclSuccess && r != ncclInProgress) break;
    const ncclDataType_t t = to_nccl(c.dtype);
    switch (c.kind) {
      case CallKind::kAllReduce:
        r = ncclAllReduce(c.in, c.out, c.count, t, to_nccl(c.op), comm, stream);
        break;
      case CallKind::kAllGather:
        r = ncclAllGather(c.in, c.out, c.count, t, comm, stream);
        break;
      case CallKind::kReduceScatter:
        r = ncclReduceScatter(c.in, c.out, c.count, t, to_nccl(c.op), comm, stream);
        break;
      case CallKind::kBroadcast:
        r = ncclBroadcast(c.in, c.out, c.count, t, c.peer, comm, stream);
        break;
      case CallKind::kSend:
        r = ncclSend(c.in, c.count, t, c.peer, comm, stream);
        break;
      case CallKind::kRecv:
        r = ncclRecv(c.out, c.count, t, c.peer, comm, stream);
        break;
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  return r == ncclSuccess || r == ncclInProgress ? end : r;
}

// The thread a blocking communicator's groups are enqueued on
// (Config::blocking), with no lock held, so that the op's thread stays free
// to judge a group that waits inside NCCL for a peer (a first send to it, a
// lazily connected collective) and to abort the communicator under it. One
// group at a time: post() hands it over (a copy of the calls and of the
// handle: stop() may clear the communicator's), collect() takes ncclGroupEnd's
// result. The hand-off is a few atomics (base/hand_off.h): after a group the
// thread yields for kIdleSpin before it sleeps, and post() wakes it only if
// it sleeps, so back-to-back ops make no system call.
//
// What this relies on in NCCL (read in 2.28.9's source):
// - A group is the calling thread's (ncclGroupStart/End keep it in thread
//   locals): the whole group runs here, and a blocking communicator's
//   ncclGroupEnd launches it on this thread, touching no shared group job.
// - While it runs, nothing else calls NCCL on the communicator but the stop
//   (Impl::stop(), ~Comm) and ncclCommGetAsyncError, which poll() may ask
//   meanwhile (issue() waits on the enqueuer, not on NCCL). That one only
//   loads the communicator's error words atomically, as NCCL's own threads
//   store them, and its group job, which only a non-blocking communicator
//   has: it may run beside a blocking group. Everything else waits in
//   issue() (the runtime issues from one thread and waits for it) or fails
//   on a stopped communicator.
// - The stop is the interruption: ncclCommAbort and ncclCommRevoke first set
//   the abort flag, which every wait inside NCCL for a peer (bootstrap,
//   proxy and socket loops) polls, so the group returns with an error. They
//   do not wait for it, though: they go on to stop the proxy, drain the
//   streams and (the abort) free the communicator, milliseconds of work, so
//   the group must have unwound by then (microseconds once it sees the
//   flag), as PyTorch's watchdog also assumes. A revoke clears the flag when
//   done, so ~Comm aborts a communicator a group is still inside. A group
//   not yet begun when the stop comes is withdrawn: none starts on a stopped
//   communicator.
struct Group {
  ncclComm_t comm = nullptr;  // a copy of the handle: stop() may clear the communicator's
  std::vector<Call> calls;
};
class Enqueuer {
 public:
  Enqueuer(int device, cudaStream_t stream)
      : hand_off_(
            [device] {
              (void)pthread_setname_np(pthread_self(), "rcoll-nccl-enq");
              (void)cudaSetDevice(device);
            },
            [stream](Group& g) { return enqueue(g.comm, stream, g.calls); }, kIdleSpin) {}
  // Hands a group over; false while the last one is still in flight.
  bool post(ncclComm_t comm, const std::vector<Call>& calls) {
    return hand_off_.post(Group{comm, calls});
  }
  // Whether the group posted was enqueued: ncclGroupEnd's result into `r`.
  bool collect(ncclResult_t& r) { return hand_off_.collect(r); }
  // Takes back a group the thread has not begun (the communicator stops).
  void withdraw() { (void)hand_off_.withdraw(); }
  // Whether a group is inside NCCL.
  bool running() const { return hand_off_.running(); }

 private:
  // Its thread joins at destruction: a group still inside NCCL returns once
  // the communicator is stopped (~Comm).
  HandOff<Group, ncclResult_t> hand_off_;
};

// A failed or cancelled init's communicator: aborted (which frees, waiting
// for the whole GPU) now, or once no stream gate holds a stream.
void abort_or_defer(ncclComm_t comm) {
  (void)kernels::cuda::StreamGate::free_when_none_held([comm] { (void)ncclCommAbort(comm); });
}

}  // namespace

bool built() { return true; }

bool revocable() { return revoke_entry() != nullptr; }

std::string version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

const char* to_string(CallKind kind) {
  switch (kind) {
    case CallKind::kAllReduce: return "ncclAllReduce";
    case CallKind::kAllGather: return "ncclAllGather";
    case CallKind::kReduceScatter: return "ncclReduceScatter";
    case CallKind::kBroadcast: return "ncclBroadcast";
    case CallKind::kSend: return "ncclSend";
    case CallKind::kRecv: return "ncclRecv";
  }
  return "?";
}

Result<std::string> new_unique_id() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return Status(ErrorCode::kTransport, "ncclGetUniqueId failed: " + nccl_error(r, nullptr));
  return std::string(id.internal, sizeof(id.internal));
}

struct Comm::Impl {
  ncclComm_t comm = nullptr;
  // Set once its calls were told to stop: it takes no more calls.
  bool stopped = false;
  // Stops every call in flight: ncclCommAbort, which also frees NCCL's
  // memory, and that waits for the whole device. While a stream waits at a
  // stream gate of the process (kernels/stream_gate.h), perhaps for the very
  // recovery this failure starts, that might never end, and a revoke
  // (ncclCommRevoke) is no way out: NCCL's proxy thread still frees its
  // pinned memory then (cudaFreeHost, which waits for the whole GPU while
  // holding a lock of the CUDA driver that every later CUDA call of the
  // process needs: stop 47's and stop 52's stacks; stop 56's showed that a
  // revoke made once the recovery's own attempt was queued behind the old
  // calls hangs the same way). So under a held gate the stop is put off
  // (`put_off`): nothing is asked of NCCL, the calls in flight go on, and
  // finish_stop() (the runtime's, once no gate holds a stream) or the
  // destructor (release(), likewise) stops them.
  //
  // A blocking communicator's group the enqueuer has begun may still be
  // inside NCCL: the stop is what makes it return (see Enqueuer).
  //
  // Not put off: a group still being enqueued (issue() settling it, or the
  // enqueuer inside NCCL). It has no ticket yet, so nothing could be ordered
  // after it, and left to run it could launch later on buffers the next
  // attempt uses: it is revoked, as before stop 56 (the old race with the
  // free, for a stall during an enqueue only).
  void stop() {
    if (stopped || comm == nullptr) return;
    if (enqueuer) enqueuer->withdraw();  // a group not begun never starts
    stopped = true;
    // A group inside NCCL on the enqueuer must not have the communicator
    // freed under it: revoked (which frees nothing of what the group uses)
    // where NCCL can, and aborted by ~Comm, after which the group has returned.
    const bool group_inside = enqueuer && enqueuer->running() && revoke_entry() != nullptr;
    // Decided under the gates' lock: no hold() comes between the look and the stop.
    bool done = false;
    (void)kernels::cuda::StreamGate::free_if_none_held([&] {
      if (group_inside) {
        halt();
      } else {
        (void)ncclCommAbort(comm);
        comm = nullptr;
      }
      done = true;
    });
    if (done) return;
    if (revoke_entry() != nullptr && !group_inside && !enqueuing) {
      put_off = true;
      return;
    }
    halt();
  }
  bool put_off = false;    // stop() left NCCL alone: a gate held a stream
  bool enqueuing = false;  // issue() is settling a group (the lock released between polls)
  // A confirmation is the last work queued, and `unconfirmed` was recorded
  // just before it: what a put-off communicator's followers wait for.
  bool confirmation_last = false;
  cudaEvent_t unconfirmed = nullptr;
  // The calls in flight stop: revoked (a blocking communicator's on a thread
  // of its own), or aborted where NCCL cannot revoke.
  void halt() {
    if (RevokeFn revoke = revoke_entry(); revoke != nullptr) {
      revoked = true;  // NCCL refuses a second revoke (ncclInvalidArgument)
      if (enqueuer && revoke_aside(revoke)) return;
      const ncclResult_t r = revoke(comm, 0);
      if (r == ncclSuccess || r == ncclInProgress) return;
    }
    // No revoke (then no gate was made: the runtime asks revocable()), or
    // it failed: the abort has to free now.
    (void)ncclCommAbort(comm);
    comm = nullptr;
  }
  // A blocking communicator's revoke runs on a thread of its own: it returns
  // only once the communicator is quiescent (NCCL synchronises with its
  // kernels and stops its proxy, which frees pinned memory: a wait for the
  // whole GPU), and a caller's stream may be held at the stream gate for the
  // very op that failed, until the op's thread, after the recovery, opens
  // it. Made on the op's thread, that wait was stop 49's hang (DDP, a closed
  // link, blocking calls). A non-blocking revoke returns at once. ~Comm
  // waits for it (bounded) before it touches the communicator again.
  struct Revoke {
    std::atomic<bool> done{false};
    ncclResult_t result = ncclSuccess;  // read once `done`
  };
  std::thread revoker;
  std::shared_ptr<Revoke> revoke_state;
  bool revoked = false;  // ncclCommRevoke was called (by stop(); never twice)
  int device = 0;
  bool revoke_aside(RevokeFn revoke) {
    auto state = std::make_shared<Revoke>();
    try {
      revoker = std::thread([c = comm, revoke, state, d = device] {
        (void)pthread_setname_np(pthread_self(), "rcoll-nccl-stop");
        (void)cudaSetDevice(d);
        state->result = revoke(c, 0);
        state->done.store(true, std::memory_order_release);
      });
    } catch (const std::system_error&) {
      return false;  // no thread to be had: revoked on this one
    }
    revoke_state = std::move(state);
    return true;
  }
  cudaStream_t stream = nullptr;
  bool own_stream = false;
  bool pairwise = false;  // the last confirmation was between two ranks
  cudaEvent_t fence = nullptr;  // for ordering a caller's stream after this one
  int64_t* word = nullptr;      // device memory of the confirmation all-reduce (2 x int64)
  int64_t* pair = nullptr;      // pinned host memory it is copied from and back to
  bool own_pair = false;
  struct Pending {
    uint64_t ticket;
    cudaEvent_t event;
  };
  std::deque<Pending> pending;     // issued, not yet seen done; oldest first
  std::vector<cudaEvent_t> spare;  // events of retired tickets, reused
  uint64_t next_ticket = 1;
  uint64_t done_through = 0;  // every ticket up to here finished before any failure
  Status failed;              // set once: the abort's reason or the first error
  bool healthy() const { return failed.ok(); }
  std::unique_ptr<Enqueuer> enqueuer;  // blocking only: where its groups are enqueued
  // Whether the group issue() began is enqueued, its result then in `r`: the
  // enqueuer's word (blocking), else NCCL's state, asked while `r` (what
  // ncclGroupEnd said, at first) is ncclInProgress.
  bool settled(ncclResult_t& r) {
    if (enqueuer) return enqueuer->collect(r);
    if (r != ncclInProgress) return true;
    ncclResult_t state = ncclSuccess;
    if (const ncclResult_t q = ncclCommGetAsyncError(comm, &state); q != ncclSuccess) {
      r = q;
      return true;
    }
    r = state;
    return r != ncclInProgress;
  }
};

Comm::Comm(const Config& config) : config_(config), impl_(std::make_unique<Impl>()) {}

Status Comm::failure(ErrorCode code, const std::string& what) const {
  return Status(code, ErrorContext{config_.rank, -1, 0, static_cast<int64_t>(config_.epoch), "nccl"}, what);
}

Result<std::unique_ptr<Comm>> Comm::create(std::string_view unique_id, const Config& config) {
  std::unique_ptr<Comm> c(new Comm(config));
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return c->failure(ErrorCode::kInvalidArgument, "an NCCL unique id is " + std::to_string(sizeof(id.internal)) +
                                                       " bytes, got " + std::to_string(unique_id.size()));
  }
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    return c->failure(ErrorCode::kInvalidArgument,
                      "rank " + std::to_string(config.rank) + " of " + std::to_string(config.size) + " is not a valid NCCL rank");
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  if (Status s = c->prepare_device(); !s.ok()) return s;
  if (Status s = c->init(&id); !s.ok()) return s;
  if (config.blocking) {
    try {
      c->impl_->enqueuer = std::make_unique<Enqueuer>(config.device, c->impl_->stream);
    } catch (const std::system_error& e) {  // no thread to be had (a process at its limit)
      return c->failure(ErrorCode::kTransport,
                        std::string("could not start the thread that enqueues a blocking "
                                    "NCCL communicator's calls: ") +
                            e.what());
    }
  }
  return c;
}

// The device, the stream, the fence event, the confirmation word and its
// host pair: what every call on the communicator uses.
Status Comm::prepare_device() {
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return failure(ErrorCode::kUnsupported,
                   "no usable CUDA device for NCCL: " +
                       (e != cudaSuccess ? cuda_error(e) : std::string("no device")));
  }
  if (config_.device < 0 || config_.device >= devices) {
    return failure(ErrorCode::kInvalidArgument, "CUDA device " + std::to_string(config_.device) +
                                                    " does not exist (this host has " +
                                                    std::to_string(devices) + ")");
  }
  if (cudaError_t e = cudaSetDevice(config_.device); e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaSetDevice(" + std::to_string(config_.device) +
                                              ") failed: " + cuda_error(e));
  }
  Impl& m = *impl_;
  m.device = config_.device;
  m.stream = static_cast<cudaStream_t>(config_.stream);
  if (m.stream == nullptr) {
    if (cudaError_t e = cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking); e != cudaSuccess) {
      return failure(ErrorCode::kTransport, "cudaStreamCreateWithFlags failed: " + cuda_error(e));
    }
    m.own_stream = true;
  }
  for (cudaEvent_t* ev : {&m.fence, &m.unconfirmed}) {
    if (cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming); e != cudaSuccess) {
      return failure(ErrorCode::kTransport, "cudaEventCreateWithFlags failed: " + cuda_error(e));
    }
  }
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&m.word), 2 * sizeof(int64_t), m.stream); e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaMallocAsync of 16 bytes failed: " + cuda_error(e));
  }
  m.pair = static_cast<int64_t*>(config_.confirm_host);
  if (m.pair == nullptr) {
    if (cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&m.pair), 2 * sizeof(int64_t),
                                      cudaHostAllocPortable);
        e != cudaSuccess) {
      return failure(ErrorCode::kTransport, "cudaHostAlloc of 16 bytes failed: " + cuda_error(e));
    }
    m.own_pair = true;
  }
  return Status();
}

// A blocking communicator's init, on a thread of its own so that the init's
// deadline and a peer giving up (Config::cancelled) still end the caller's
// wait: a blocking ncclCommInitRankConfig returns only once every rank has
// joined (or failed). A caller that gives up leaves it behind, and the thread
// stops what it made once NCCL returns (a rank that died closes its sockets,
// so NCCL's bootstrap fails; a frozen one holds it until it thaws): a thread
// left waiting, not a job.
namespace {
struct BlockingInit {
  std::mutex mu;
  bool done = false;
  bool abandoned = false;  // the caller gave up on it
  ncclComm_t comm = nullptr;
  ncclResult_t result = ncclInProgress;
  std::string name;  // the config's commName points here
};
}  // namespace

// NCCL's init, polled until it settles: the other ranks must join by the
// deadline, and a rank that gave up on it (config.cancelled) cuts it short.
Status Comm::init(const void* unique_id) {
  Impl& m = *impl_;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  // Non-blocking unless asked: init and every call then return at once and
  // are polled, so a deadline or an abort from another thread cuts in. A
  // blocking communicator's init runs on a thread of its own (above).
  cfg.blocking = config_.blocking ? 1 : 0;
  const std::string name = "rcoll epoch " + std::to_string(config_.epoch);
  cfg.commName = name.c_str();
  const auto started = Clock::now();
  auto last_asked = started;
  const ncclUniqueId& id = *static_cast<const ncclUniqueId*>(unique_id);
  std::shared_ptr<BlockingInit> job;
  ncclResult_t r = ncclInProgress;
  if (config_.blocking) {
    job = std::make_shared<BlockingInit>();
    job->name = name;
    try {
      std::thread([job, id, cfg, size = config_.size, rank = config_.rank,
                   device = config_.device]() mutable {
        (void)pthread_setname_np(pthread_self(), "rcoll-nccl-init");
        (void)cudaSetDevice(device);
        cfg.commName = job->name.c_str();
        ncclComm_t made = nullptr;
        const ncclResult_t result = ncclCommInitRankConfig(&made, size, id, rank, &cfg);
        std::lock_guard<std::mutex> lock(job->mu);
        job->comm = made;
        job->result = result;
        job->done = true;
        if (job->abandoned && made != nullptr) abort_or_defer(made);
      }).detach();
    } catch (const std::system_error& e) {  // no thread to be had
      return failure(
          ErrorCode::kTransport,
          std::string("could not start the thread of a blocking NCCL init: ") + e.what());
    }
  } else {
    r = ncclCommInitRankConfig(&m.comm, config_.size, id, config_.rank, &cfg);
  }
  // Whether the init settled, its outcome then in `r` (and the communicator in m.comm).
  auto settled = [&]() {
    if (job) {
      std::lock_guard<std::mutex> lock(job->mu);
      if (!job->done) return false;
      m.comm = job->comm;
      r = job->result;
      return true;
    }
    if (r != ncclInProgress && r != ncclSuccess) return true;
    if (m.comm == nullptr) {
      r = ncclInternalError;  // "success" without a communicator
      return true;
    }
    ncclResult_t state = ncclSuccess;
    r = ncclCommGetAsyncError(m.comm, &state);
    if (r == ncclSuccess) r = state;
    return r != ncclInProgress;
  };
  // Stops an init this rank gives up on (the thread's, once it returns).
  auto give_up = [&]() {
    if (job) {
      std::lock_guard<std::mutex> lock(job->mu);
      job->abandoned = true;
      if (job->done && job->comm != nullptr) abort_or_defer(job->comm);
    } else {
      abort_or_defer(m.comm);
    }
    m.comm = nullptr;
  };
  while (!settled()) {
    if (config_.cancelled && Clock::now() - last_asked >= std::chrono::milliseconds(10)) {
      last_asked = Clock::now();
      if (config_.cancelled()) {
        give_up();
        return failure(ErrorCode::kAborted, "NCCL init cancelled: another rank gave up on it");
      }
    }
    if (config_.init_deadline.expired()) {
      give_up();
      return failure(
          ErrorCode::kTimeout,
          "NCCL init of " + std::to_string(config_.size) + " ranks did not finish within " +
              std::to_string(std::chrono::duration_cast<Millis>(Clock::now() - started).count()) +
              " ms (a rank missing or stuck?); " +
              (job ? "left it to stop when NCCL returns" : "aborted it"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (r != ncclSuccess) {
    const std::string why = nccl_error(r, m.comm);
    if (m.comm) abort_or_defer(m.comm);
    m.comm = nullptr;
    return failure(r == ncclUnhandledCudaError ? ErrorCode::kUnsupported : ErrorCode::kTransport,
                   "NCCL init of " + std::to_string(config_.size) + " ranks failed: " + why);
  }
  return Status();
}

Comm::~Comm() {
  Impl& m = *impl_;
  if (m.revoker.joinable()) {
    // A revoke still inside NCCL 10 s on (a stream held at a gate of another
    // communicator, say) keeps the communicator: nothing here may free it
    // under the revoke.
    const Deadline bound = Deadline::after(std::chrono::seconds(10));
    while (!m.revoke_state->done.load(std::memory_order_acquire) && !bound.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (m.revoke_state->done.load(std::memory_order_acquire)) {
      m.revoker.join();
      if (const ncclResult_t r = m.revoke_state->result; r != ncclSuccess && r != ncclInProgress) {
        RCOLL_LOG(kWarn,
                  "rank %d, epoch %u: revoking the blocking NCCL communicator failed (%s); "
                  "aborting it instead once no call is inside NCCL",
                  config_.rank, config_.epoch, ncclGetErrorString(r));
      }
    } else {
      RCOLL_LOG(
          kWarn,
          "rank %d, epoch %u: revoking a blocking NCCL communicator had not returned 10 s on; "
          "leaving its thread and the communicator's memory behind",
          config_.rank, config_.epoch);
      m.revoker.detach();
      m.comm = nullptr;
      if (m.enqueuer && m.enqueuer->running()) (void)m.enqueuer.release();
    }
  }
  if (m.enqueuer) {
    // The enqueuer goes first: nothing may finalise or destroy the
    // communicator under a group. One still inside NCCL was given up on
    // (the communicator failed): it is made to return without freeing what
    // it uses (a revoke, unless stop() made one: NCCL refuses a second,
    // and an abort would free under the group), and waited for within a
    // bound; one that still does not return is left with its communicator
    // (a thread and its memory lost, logged), rather than this destructor
    // waiting for ever or freeing under it.
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (m.enqueuer->running() && m.comm != nullptr && !m.revoked) {
        if (RevokeFn revoke = revoke_entry(); revoke != nullptr) {
          m.revoked = true;
          (void)revoke(m.comm, 0);
        }
      }
    }
    const Deadline bound = Deadline::after(std::chrono::seconds(10));
    while (m.enqueuer->running() && !bound.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (m.enqueuer->running()) {
      RCOLL_LOG(kWarn,
                "rank %d, epoch %u: a blocking NCCL call was still inside NCCL 10 s after its "
                "communicator was "
                "stopped; leaving its thread and the communicator's memory behind",
                config_.rank, config_.epoch);
      (void)m.enqueuer.release();
      m.comm = nullptr;
    } else {
      m.enqueuer.reset();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (m.comm) {
    // A healthy communicator is finalised (its calls drain) within a bound;
    // one that does not settle, or has failed, is aborted.
    bool finalized = false;
    const ncclResult_t started = m.healthy() ? ncclCommFinalize(m.comm) : ncclInternalError;
    if (started == ncclSuccess || started == ncclInProgress) {
      const Deadline bound = Deadline::after(std::chrono::seconds(5));
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(m.comm, &state) == ncclSuccess && state == ncclInProgress && !bound.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      finalized = state == ncclSuccess;
    }
    if (finalized) {
      (void)ncclCommDestroy(m.comm);
    } else {
      (void)ncclCommAbort(m.comm);
    }
    m.comm = nullptr;
  }
  for (const auto& p : m.pending) (void)cudaEventDestroy(p.event);
  for (cudaEvent_t e : m.spare) (void)cudaEventDestroy(e);
  if (m.fence) (void)cudaEventDestroy(m.fence);
  if (m.unconfirmed) (void)cudaEventDestroy(m.unconfirmed);
  if (m.word) (void)cudaFreeAsync(m.word, m.stream);  // behind the stream's work: no device-wide wait
  if (m.pair && m.own_pair) (void)cudaFreeHost(m.pair);
  if (m.stream && m.own_stream) (void)cudaStreamDestroy(m.stream);
}

Result<uint64_t> Comm::issue(const std::vector<Call>& calls, const Waiter& waiter) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = enqueue_group(lock, calls, waiter); !s.ok()) return s;
  return record_ticket();
}

Status Comm::enqueue_group(std::unique_lock<std::mutex>& lock, const std::vector<Call>& calls,
                           const Waiter& waiter) {
  Impl& m = *impl_;
  if (!m.healthy()) return m.failed;
  (void)cudaSetDevice(
      config_.device);  // the calling thread's current device (record_ticket's event)
  ncclResult_t r = ncclInProgress;
  if (!m.enqueuer) {
    r = enqueue(m.comm, m.stream, calls);
  } else if (!m.enqueuer->post(m.comm, calls)) {
    return failure(ErrorCode::kInternal,
                   "a group was issued while the last one was still being enqueued "
                   "(issue() is for one thread at a time)");
  }
  // The group may still be being enqueued, by NCCL's thread (non-blocking)
  // or the enqueuer (blocking). Settle it, letting an abort from another
  // thread in between polls.
  m.confirmation_last = false;
  m.enqueuing = true;
  struct Settling {
    bool& flag;
    ~Settling() { flag = false; }
  } settling{m.enqueuing};
  PollPause pause(kSettleSpin);
  while (!m.settled(r)) {
    lock.unlock();
    pause();
    Status verdict = waiter ? waiter() : Status();
    lock.lock();
    if (!m.healthy()) return m.failed;
    if (!verdict.ok()) {
      m.failed = Status(verdict.code(), verdict.context(),
                        std::string(to_string(calls.front().kind)) + " was still being enqueued (waiting for peers): " +
                            verdict.message() + "; aborted the communicator");
      m.stop();
      return m.failed;
    }
  }
  if (r != ncclSuccess) {
    m.failed = failure(classify(r, m.stream), std::string(to_string(calls.front().kind)) + " of " +
                                                  std::to_string(calls.front().count) + " elements failed: " + nccl_error(r, m.comm));
    m.stop();
    return m.failed;
  }
  return Status();
}

// An event behind everything on the stream so far, as the next ticket.
Result<uint64_t> Comm::record_ticket() {
  Impl& m = *impl_;
  cudaEvent_t ev = nullptr;
  if (!m.spare.empty()) {
    ev = m.spare.back();
    m.spare.pop_back();
  } else if (cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaEventCreateWithFlags failed: " + cuda_error(e));
  }
  if (cudaError_t e = cudaEventRecord(ev, m.stream); e != cudaSuccess) {
    m.spare.push_back(ev);
    return failure(ErrorCode::kTransport, "cudaEventRecord failed: " + cuda_error(e));
  }
  const uint64_t ticket = m.next_ticket++;
  m.pending.push_back({ticket, ev});
  return ticket;
}

Result<uint64_t> Comm::issue_confirmation(uint64_t fingerprint, const Waiter& waiter, int peer) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(mu_);
  if (!m.healthy()) return m.failed;
  // 62 bits, so that negating never overflows.
  const auto h = static_cast<int64_t>(fingerprint & ((uint64_t{1} << 62) - 1));
  m.pairwise = peer >= 0;
  m.pair[0] = h;
  // All ranks: the max of (h, -h) is (max h, -min h). Pairwise: the slot
  // the peer's h lands in, filled with something no h equals.
  m.pair[1] = m.pairwise ? -1 : -h;
  // Everything before the confirmation, for a put-off communicator's
  // followers (order_after_locked).
  if (cudaError_t e = cudaEventRecord(m.unconfirmed, m.stream); e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaEventRecord failed: " + cuda_error(e));
  }
  if (cudaError_t e =
          cudaMemcpyAsync(m.word, m.pair, 2 * sizeof(int64_t), cudaMemcpyHostToDevice, m.stream);
      e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaMemcpyAsync failed: " + cuda_error(e));
  }
  Status s =
      peer >= 0
          ? enqueue_group(
                lock,
                {Call{CallKind::kSend, m.word, nullptr, 1, DataType::kInt64, ReduceOp::kSum, peer},
                 Call{CallKind::kRecv, nullptr, m.word + 1, 1, DataType::kInt64, ReduceOp::kSum,
                      peer}},
                waiter)
          : enqueue_group(
                lock,
                {Call{CallKind::kAllReduce, m.word, m.word, 2, DataType::kInt64, ReduceOp::kMax}},
                waiter);
  if (!s.ok()) return s;
  // Back into the pinned pair before the ticket's event: done means readable.
  if (cudaError_t e = cudaMemcpyAsync(m.pair, m.word, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost, m.stream); e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaMemcpyAsync failed: " + cuda_error(e));
  }
  auto t = record_ticket();
  if (t.ok()) m.confirmation_last = true;
  return t;
}

bool Comm::fingerprints_agree() const {
  std::lock_guard<std::mutex> lock(mu_);
  const Impl& m = *impl_;
  return m.pairwise ? m.pair[0] == m.pair[1] : m.pair[0] == -m.pair[1];
}

Status Comm::copy(void* dst, const void* src, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Impl& m = *impl_;
  if (!m.healthy()) return m.failed;
  if (bytes == 0) return Status();
  m.confirmation_last = false;
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m.stream);
      e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaMemcpyAsync of " + std::to_string(bytes) +
                                              " bytes failed: " + cuda_error(e));
  }
  return Status();
}

Result<bool> Comm::poll(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  Impl& m = *impl_;
  if (ticket <= m.done_through) return true;
  if (!m.healthy()) return m.failed;
  // Which events fired, then whether NCCL reported an asynchronous error (a
  // peer gone, a network failure): only with none do they count as done, in
  // case a failing NCCL ended its kernels early. (Asking may overlap a
  // blocking communicator's group on its enqueuer: see Enqueuer.)
  size_t fired = 0;
  for (const auto& p : m.pending) {
    const cudaError_t e = cudaEventQuery(p.event);
    if (e == cudaErrorNotReady) break;
    if (e != cudaSuccess) {
      m.failed = Status(kernels::cuda::error_code(e), ErrorContext{config_.rank, -1, 0, static_cast<int64_t>(config_.epoch), "nccl"},
                        "cudaEventQuery failed: " + cuda_error(e) + "; aborted the communicator");
      m.stop();
      return m.failed;
    }
    ++fired;
  }
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t r = ncclCommGetAsyncError(m.comm, &state); r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
    m.failed = failure(classify(r != ncclSuccess ? r : state, m.stream),
                       "NCCL reported an asynchronous error: " + nccl_error(r != ncclSuccess ? r : state, m.comm) +
                                                  "; aborted the communicator");
    m.stop();
    return m.failed;
  }
  for (; fired > 0; --fired) {
    m.done_through = m.pending.front().ticket;
    m.spare.push_back(m.pending.front().event);
    m.pending.pop_front();
  }
  return ticket <= m.done_through;
}

void Comm::abort(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  Impl& m = *impl_;
  if (!m.healthy()) return;
  m.failed = failure(ErrorCode::kAborted, "the NCCL communicator was aborted: " + why.message());
  // Events of calls in flight may still fire (an aborted kernel exits
  // normally): they stay pending and poll() reports them failed.
  m.stop();
}

bool Comm::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !impl_->healthy();
}

bool Comm::stop_put_off() const {
  std::lock_guard<std::mutex> lock(mu_);
  return impl_->put_off;
}

void* Comm::stream() const { return impl_->stream; }

void Comm::finish_stop() {
  std::lock_guard<std::mutex> lock(mu_);
  Impl& m = *impl_;
  if (!m.put_off || m.comm == nullptr) return;
  m.put_off = false;
  (void)cudaSetDevice(config_.device);  // a revoke on this thread (non-blocking) uses it
  m.halt();
}

Status Comm::order_after_me(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return order_after_locked(stream);
}

Status Comm::order_after_locked(void* stream) {
  Impl& m = *impl_;
  if (m.put_off && m.confirmation_last) {
    // Its calls run on, and the confirmation queued last may wait for ever
    // (a peer failed before it issued its own): everything before it.
    if (cudaError_t e = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), m.unconfirmed, 0);
        e != cudaSuccess) {
      return failure(ErrorCode::kTransport, "cudaStreamWaitEvent failed: " + cuda_error(e));
    }
    return Status();
  }
  if (cudaError_t e = cudaEventRecord(m.fence, m.stream); e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaEventRecord failed: " + cuda_error(e));
  }
  if (cudaError_t e = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), m.fence, 0); e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaStreamWaitEvent failed: " + cuda_error(e));
  }
  return Status();
}

Status Comm::follow(Comm& previous) {
  std::scoped_lock lock(previous.mu_, mu_);
  if (Status s = previous.order_after_locked(impl_->stream); !s.ok())
    return failure(s.code(), s.message());
  return Status();
}

Status Comm::order_after_event(void* event) {
  std::lock_guard<std::mutex> lock(mu_);
  Impl& m = *impl_;
  if (cudaError_t e = cudaStreamWaitEvent(m.stream, static_cast<cudaEvent_t>(event), 0); e != cudaSuccess) {
    return failure(ErrorCode::kTransport, "cudaStreamWaitEvent failed: " + cuda_error(e));
  }
  return Status();
}

bool release(std::unique_ptr<Comm> comm, int device) {
  if (!comm) return true;
  std::shared_ptr<Comm> owned(std::move(comm));  // the kept free may be copied
  return kernels::cuda::StreamGate::free_when_none_held([owned, device]() mutable {
    kernels::cuda::ScopedDevice on;
    if (device >= 0) (void)on.enter(device);
    owned.reset();
  });
}

}  // namespace rcoll::nccl
