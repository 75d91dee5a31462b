// NCCL communicator across processes (transports/nccl/nccl_comm.h), one rank
// per process, started by rcoll-run. Several processes may share one GPU as
// separate NCCL ranks: each gets its own NCCL_HOSTID (and NCCL_NET=Socket,
// NCCL_SOCKET_IFNAME=lo unless set), as on a one-GPU test machine.
//
//   rcoll-run -n 2 -- rcoll-nccl-worker [--sizes 1,4099,1M] [--stall-ms 3000]
//
// 1. Epoch 0's unique id is made by rank 0 and shared through the job's store.
// 2. Every call kind x dtype x size is checked against a host reference:
//    inputs are small integers, so every dtype's result is exact.
// 3. A stalled rank: the last rank does not join an all-reduce for
//    --stall-ms; the others see no completion by their deadline, abort, and
//    must see the call fail (kAborted), not succeed. The stalled rank learns of
//    the abort through the store and aborts too.
// 4. Rebuild: epoch 1's communicator from a new unique id; the all-reduce is
//    run again and checked.
// Exit 0: every check passed; 1: a failure (printed); 77: no usable GPU.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rcoll/store.h"
#include "rcoll/types.h"
#include "transports/nccl/nccl_comm.h"

namespace {

using rcoll::DataType;
using rcoll::ReduceOp;
using rcoll::nccl::Call;
using rcoll::nccl::CallKind;
using rcoll::nccl::Comm;
using Clock = std::chrono::steady_clock;
using rcoll::Deadline;

int g_rank = 0, g_size = 1, g_failures = 0, g_checks = 0;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "FAIL rank %d: %s\n", g_rank, what.c_str());
  std::exit(1);
}
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorName(e));
}
template <typename T>
T take(rcoll::Result<T> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}

void store_value(DataType d, char* p, size_t i, double v) {
  switch (d) {
    case DataType::kInt8: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::kUint8: reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::kUint32: reinterpret_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case DataType::kInt64: reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::kUint64: reinterpret_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    case DataType::kFloat16: reinterpret_cast<rcoll::float16*>(p)[i] = rcoll::to_float16(static_cast<float>(v)); break;
    case DataType::kBfloat16: reinterpret_cast<rcoll::bfloat16*>(p)[i] = rcoll::to_bfloat16(static_cast<float>(v)); break;
    case DataType::kFloat32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: reinterpret_cast<double*>(p)[i] = v; break;
  }
}

// Rank r's element i: small positive integers, exact in every dtype after a
// sum over up to 8 ranks.
double input(int r, size_t i) { return static_cast<double>((r + 1) * static_cast<int>(i % 7 + 1) % 13); }

// Host bytes of `count` elements of value f(i).
template <typename F>
std::vector<char> pattern(DataType d, size_t count, F f) {
  std::vector<char> v(count * rcoll::size_of(d) + 1);
  for (size_t i = 0; i < count; ++i) store_value(d, v.data(), i, f(i));
  return v;
}

class Device {
 public:
  explicit Device(size_t bytes) { cuda_check(cudaMalloc(&p_, bytes + 1), "cudaMalloc"); }
  ~Device() { cudaFree(p_); }
  char* get() const { return static_cast<char*>(p_); }
  // From pageable memory cudaMemcpy may return before the copy lands; the
  // NCCL calls that read it run on a stream of their own, so the copy is
  // waited for (without this, a 4-rank reduce-scatter on an H200 read stale input).
  void put(const std::vector<char>& h) {
    cuda_check(cudaMemcpy(p_, h.data(), h.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }
  std::vector<char> fetch(size_t bytes) const {
    std::vector<char> h(bytes + 1);
    cuda_check(cudaMemcpy(h.data(), p_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return h;
  }

 private:
  void* p_ = nullptr;
};

// How long NCCL may take to enqueue a call (its first calls wait for peers to connect).
Comm::Waiter within(std::chrono::seconds limit) {
  const Deadline until = Deadline::after(limit);
  return [until] {
    return until.expired() ? rcoll::Status(rcoll::ErrorCode::kTimeout, "still enqueuing after the test's limit") : rcoll::Status();
  };
}

void wait_done(Comm& comm, uint64_t ticket, const std::string& what) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    auto done = comm.poll(ticket);
    if (!done.ok()) die(what + ": " + done.status().to_string());
    if (done.value()) return;
    if (Clock::now() > deadline) die(what + ": not done after 60 s");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void check(const std::string& what, const std::vector<char>& got, const std::vector<char>& want, size_t bytes) {
  ++g_checks;
  if (std::memcmp(got.data(), want.data(), bytes) == 0) return;
  ++g_failures;
  std::fprintf(stderr, "FAIL rank %d: %s: result differs from the reference\n", g_rank, what.c_str());
}

// Every call kind on `count` elements of `d`.
void run_calls(Comm& comm, DataType d, size_t count) {
  const size_t es = rcoll::size_of(d), n = static_cast<size_t>(g_size);
  const std::string tag = std::string(rcoll::to_string(d)) + " x " + std::to_string(count);
  auto mine = pattern(d, count, [](size_t i) { return input(g_rank, i); });
  Device in(count * es * n), out(count * es * n);
  const Comm::Waiter enqueue = within(std::chrono::seconds(60));

  // All-reduce, sum and max.
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    in.put(mine);
    const uint64_t t = take(comm.issue(Call{CallKind::kAllReduce, in.get(), out.get(), count, d, op}, enqueue), "issue");
    wait_done(comm, t, "allreduce " + tag);
    auto want = pattern(d, count, [&](size_t i) {
      double acc = op == ReduceOp::kSum ? 0 : -1e300;
      for (int q = 0; q < g_size; ++q) acc = op == ReduceOp::kSum ? acc + input(q, i) : std::max(acc, input(q, i));
      return acc;
    });
    check(std::string("allreduce ") + rcoll::to_string(op) + " " + tag, out.fetch(count * es), want, count * es);
  }
  // All-gather: block q is rank q's input.
  in.put(mine);
  uint64_t t = take(comm.issue(Call{CallKind::kAllGather, in.get(), out.get(), count, d}, enqueue), "issue");
  wait_done(comm, t, "allgather " + tag);
  auto gathered = pattern(d, count * n, [&](size_t i) { return input(static_cast<int>(i / count), i % count); });
  check("allgather " + tag, out.fetch(count * es * n), gathered, count * es * n);
  // Reduce-scatter of size x count elements: this rank's block of the sum.
  in.put(pattern(d, count * n, [](size_t i) { return input(g_rank, i); }));
  t = take(comm.issue(Call{CallKind::kReduceScatter, in.get(), out.get(), count, d, ReduceOp::kSum}, enqueue), "issue");
  wait_done(comm, t, "reduce_scatter " + tag);
  auto block = pattern(d, count, [&](size_t i) {
    double acc = 0;
    for (int q = 0; q < g_size; ++q) acc += input(q, static_cast<size_t>(g_rank) * count + i);
    return acc;
  });
  check("reduce_scatter " + tag, out.fetch(count * es), block, count * es);
  // Broadcast from the last rank, in place.
  const int root = g_size - 1;
  in.put(mine);
  t = take(comm.issue(Call{CallKind::kBroadcast, in.get(), in.get(), count, d, ReduceOp::kSum, root}, enqueue), "issue");
  wait_done(comm, t, "broadcast " + tag);
  check("broadcast " + tag, in.fetch(count * es), pattern(d, count, [&](size_t i) { return input(root, i); }), count * es);
  // A ring of send/recv, both in one group.
  if (g_size > 1) {
    const int to = (g_rank + 1) % g_size, from = (g_rank - 1 + g_size) % g_size;
    in.put(mine);
    t = take(comm.issue(std::vector<Call>{Call{CallKind::kSend, in.get(), nullptr, count, d, ReduceOp::kSum, to},
                                          Call{CallKind::kRecv, nullptr, out.get(), count, d, ReduceOp::kSum, from}},
                        enqueue),
             "issue");
    wait_done(comm, t, "send/recv " + tag);
    check("send/recv " + tag, out.fetch(count * es), pattern(d, count, [&](size_t i) { return input(from, i); }), count * es);
  }
}

std::unique_ptr<Comm> join(rcoll::Store& store, uint32_t epoch) {
  const std::string key = "nccl/" + std::to_string(epoch) + "/id";
  if (g_rank == 0) {
    std::string id = take(rcoll::nccl::new_unique_id(), "new_unique_id");
    if (rcoll::Status s = store.set(key, rcoll::Bytes(id.begin(), id.end())); !s.ok()) die("store set: " + s.to_string());
  }
  auto bytes = take(store.get(key, std::chrono::seconds(60)), "store get");
  Comm::Config cfg;
  cfg.rank = g_rank;
  cfg.size = g_size;
  cfg.epoch = epoch;
  cfg.init_deadline = Deadline::after(std::chrono::seconds(60));
  const auto started = Clock::now();
  auto comm = take(Comm::create(std::string(bytes.begin(), bytes.end()), cfg), "NCCL init");
  std::printf("rank %d/%d: epoch %u NCCL communicator up in %.0f ms\n", g_rank, g_size, epoch,
              std::chrono::duration<double, std::milli>(Clock::now() - started).count());
  return comm;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes{1, 4099, 1u << 20};
  long stall_ms = 3000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--sizes") {
      sizes.clear();
      for (const char* p = argv[i + 1]; *p;) {
        char* end = nullptr;
        sizes.push_back(std::strtoul(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
      }
    } else if (k == "--stall-ms") {
      stall_ms = std::atol(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::printf("SKIP: no usable CUDA device: %s\n", e != cudaSuccess ? cudaGetErrorName(e) : "none");
    return 77;
  }
  g_rank = std::atoi(std::getenv("RCOLL_RANK") ? std::getenv("RCOLL_RANK") : "0");
  g_size = std::atoi(std::getenv("RCOLL_WORLD_SIZE") ? std::getenv("RCOLL_WORLD_SIZE") : "1");
  // Ranks share the GPU: a GPU that admits one process at a time cannot run this.
  int mode = cudaComputeModeDefault;
  if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0) == cudaSuccess && g_size > devices &&
      (mode == cudaComputeModeExclusiveProcess || mode == cudaComputeModeProhibited)) {
    std::printf("SKIP: GPU 0's compute mode admits one process, and %d ranks share %d GPU(s)\n", g_size, devices);
    return 77;
  }
  const char* local_size = std::getenv("RCOLL_LOCAL_WORLD_SIZE");
  rcoll::nccl::one_host_per_rank_if_sharing("rcoll-nccl-worker", g_rank,
                                            local_size ? std::atoi(local_size) : g_size, devices);
  const char* addr = std::getenv("RCOLL_STORE_ADDR");
  if (!addr) die("RCOLL_STORE_ADDR is not set: run under rcoll-run");
  rcoll::TcpStoreOptions so;
  const std::string a = addr;
  so.host = a.substr(0, a.rfind(':'));
  so.port = static_cast<uint16_t>(std::atoi(a.c_str() + a.rfind(':') + 1));
  so.token = std::getenv("RCOLL_JOB_TOKEN") ? std::getenv("RCOLL_JOB_TOKEN") : "";
  auto store = take(rcoll::connect_tcp_store(so), "connect to the store");

  std::printf("rank %d/%d: NCCL %s\n", g_rank, g_size, rcoll::nccl::version().c_str());
  auto comm = join(*store, 0);
  for (DataType d : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16, DataType::kInt32, DataType::kInt64,
                     DataType::kUint8, DataType::kFloat64})
    for (size_t count : sizes) run_calls(*comm, d, count);
  std::printf("rank %d/%d: %d checks, %d failed\n", g_rank, g_size, g_checks, g_failures);

  if (g_size > 1) {
    // The stall: every rank but the last issues an all-reduce the last does not join.
    const size_t count = 1u << 16;
    Device buf(count * 4);
    const bool stalled = g_rank == g_size - 1;
    // The same call once on every rank first: its connections are then up,
    // so below only the stalled rank's absence holds it back.
    buf.put(pattern(DataType::kFloat32, count, [](size_t i) { return input(g_rank, i); }));
    wait_done(*comm, take(comm->issue(Call{CallKind::kAllReduce, buf.get(), buf.get(), count, DataType::kFloat32},
                                      within(std::chrono::seconds(60))),
                          "issue"),
              "warm-up allreduce");
    if (!stalled) {
      buf.put(pattern(DataType::kFloat32, count, [](size_t i) { return input(g_rank, i); }));
      const uint64_t t = take(comm->issue(Call{CallKind::kAllReduce, buf.get(), buf.get(), count, DataType::kFloat32},
                                          within(std::chrono::seconds(10))),
                              "issue");
      const auto started = Clock::now();
      bool done = false;
      while (Clock::now() - started < std::chrono::milliseconds(stall_ms / 2)) {
        auto r = comm->poll(t);
        if (!r.ok()) die("poll during the stall: " + r.status().to_string());
        if ((done = r.value())) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (done) die("an all-reduce completed although rank " + std::to_string(g_size - 1) + " never joined it");
      comm->abort(rcoll::Status(rcoll::ErrorCode::kTimeout, "no progress (the test's stalled rank)"));
      auto after = comm->poll(t);
      if (after.ok()) die("poll after abort said the call " + std::string(after.value() ? "succeeded" : "is pending"));
      if (after.status().code() != rcoll::ErrorCode::kAborted) die("poll after abort: " + after.status().to_string());
      std::printf("rank %d/%d: aborted after %.0f ms: %s\n", g_rank, g_size,
                  std::chrono::duration<double, std::milli>(Clock::now() - started).count(), after.status().to_string().c_str());
      if (g_rank == 0) (void)store->set("nccl/0/aborted", rcoll::Bytes{1});
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
      if (!store->get("nccl/0/aborted", std::chrono::seconds(60)).ok()) die("never told of the abort");
      comm->abort(rcoll::Status(rcoll::ErrorCode::kAborted, "a peer aborted epoch 0"));
    }
    // Rebuild: epoch 1 from a new unique id, and the all-reduce again.
    comm.reset();
    comm = join(*store, 1);
    buf.put(pattern(DataType::kFloat32, count, [](size_t i) { return input(g_rank, i); }));
    const uint64_t t = take(comm->issue(Call{CallKind::kAllReduce, buf.get(), buf.get(), count, DataType::kFloat32},
                                        within(std::chrono::seconds(10))),
                            "issue");
    wait_done(*comm, t, "allreduce after the rebuild");
    check("allreduce after the rebuild", buf.fetch(count * 4), pattern(DataType::kFloat32, count, [](size_t i) {
            double acc = 0;
            for (int q = 0; q < g_size; ++q) acc += input(q, i);
            return acc;
          }),
          count * 4);
  }
  std::printf("rank %d/%d: %d checks, %d failed%s\n", g_rank, g_size, g_checks, g_failures, g_failures ? "" : ": ok");
  return g_failures ? 1 : 0;
}
