// Multi-process correctness suite, one rank per process, started by rcoll-run:
//
//   rcoll-run -n 4 -- rcoll-correctness-worker [--sizes 0,1,7,4K+3,1M,64M] [--ops all]
//                                              [--dtypes all] [--big-dtypes all] [--big-bytes 16M]
//                                              [--repeat N | --duration SECONDS]
//                                              [--memory host|cuda]
//
// --memory cuda runs every op on device buffers: the inputs are copied to the
// GPU, the op gets device Buffers (MemoryKind::kCuda), and the results are
// copied back and checked as for host buffers. Without a usable GPU (or in a
// build without CUDA) the worker exits 77 (skipped), saying why.
// --stream-wait (with --memory cuda) runs the checked ops as NCCL users do:
// issued async on a stream of the worker's, which then waits for each on the
// GPU (Work::stream_wait, the host not waiting), and the results are copied
// back on that stream: under injected faults, a copy that ran behind an
// aborted first attempt instead of the recovered result shows as a mismatch.
//
// --duration runs the suite again and again until rank 0 has run it for that
// long (it broadcasts the decision after every pass, so every rank runs the
// same ops): the chaos tests (tests/chaos/) break the network while it runs.
//
// Every rank fills its inputs from a formula of (rank, element, op), so every
// rank can compute the expected result of every op on its own, in plain scalar
// code that shares nothing with rcoll's kernels: integer reductions wrap in the
// dtype's width, floating ones are computed in double. Inputs are small
// integers (and, for prod, +-1 and +-2), so sums and products are exact in every
// floating dtype and any wrong element, wrong placement or wrong order shows up
// as an exact mismatch. One pass with fractional float32 values checks the
// tolerance path. Exit code 0 = every check passed; 1 = a mismatch (printed).
#include <malloc.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <chrono>
#include <thread>
#include <cstring>
#include <string>
#include <vector>

#include "rcoll/rcoll.h"

#if RCOLL_WORKER_CUDA
#include <cuda_runtime.h>

#include "transports/nccl/nccl_comm.h"
#endif

namespace {

using rcoll::Buffer;
using rcoll::DataType;
using rcoll::ReduceOp;

int g_failures = 0;
int g_checks = 0;
// In-place ops that a rank's death failed (shrink mode) whose buffer did not
// hold its input again: counted across the suite's restart after the shrink.
int g_inputs_lost = 0;
bool g_device = false;  // --memory cuda
bool g_stream_wait = false;  // --stream-wait
void* g_stream = nullptr;    // its stream (a cudaStream_t)

// The options of a checked op: on the worker's stream under --stream-wait.
rcoll::OpOptions op_opts() {
  rcoll::OpOptions o;
  o.cuda_stream = g_stream;
  return o;
}
// Runs a checked op: the blocking call, or (--stream-wait) issued async on
// the worker's stream, which waits for it on the GPU.
template <typename Blocking, typename Async>
void call(Blocking blocking, Async async) {
  if (g_stream_wait) {
    rcoll::throw_if_error(async().stream_wait(g_stream));
  } else {
    blocking();
  }
}

#if RCOLL_WORKER_CUDA
void cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "FAIL: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  std::exit(1);
}

// Device copies of host buffers that keep their aliasing (an in-place op's one
// buffer, an allgather input inside its output): overlapping buffers share
// one device region at the same offsets.
class DeviceMirror {
 public:
  explicit DeviceMirror(std::vector<Buffer*> buffers) : buffers_(std::move(buffers)) {
    for (Buffer* b : buffers_) {
      host_.push_back(*b);
      if (b->bytes() == 0) continue;
      char* p = static_cast<char*>(b->data);
      bool merged = false;
      for (auto& r : regions_) {
        if (p < r.host + r.bytes && r.host < p + b->bytes()) {
          char* lo = std::min(r.host, p);
          char* hi = std::max(r.host + r.bytes, p + b->bytes());
          r.host = lo;
          r.bytes = static_cast<size_t>(hi - lo);
          merged = true;
        }
      }
      if (!merged) regions_.push_back({p, b->bytes(), nullptr});
    }
    for (auto& r : regions_) {
      cuda_check(cudaMalloc(&r.device, r.bytes), "cudaMalloc");
      // On the stream the op is ordered after (pageable memory: the copy is
      // staged before this returns, but may still be in flight on the GPU).
      cuda_check(cudaMemcpyAsync(r.device, r.host, r.bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(g_stream)),
                 "cudaMemcpyAsync to the device");
    }
    for (Buffer* b : buffers_) {
      b->memory = rcoll::MemoryKind::kCuda;
      if (b->bytes() == 0) continue;
      char* p = static_cast<char*>(b->data);
      for (auto& r : regions_)
        if (p >= r.host && p < r.host + r.bytes) b->data = r.device + (p - r.host);
    }
  }
  // Copies every region back to the host and restores the host buffers
  // (--stream-wait: on the stream that waited for the op).
  ~DeviceMirror() {
    cudaStream_t stream = static_cast<cudaStream_t>(g_stream);
    for (auto& r : regions_) {
      cuda_check(cudaMemcpyAsync(r.host, r.device, r.bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync to the host");
      cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      cuda_check(cudaFree(r.device), "cudaFree");
    }
    for (size_t i = 0; i < buffers_.size(); ++i) *buffers_[i] = host_[i];
  }

 private:
  struct Region {
    char* host;
    size_t bytes;
    char* device;
  };
  std::vector<Buffer*> buffers_;
  std::vector<Buffer> host_;
  std::vector<Region> regions_;
};

std::string no_device_reason(int ranks) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (n == 0) return "no CUDA device";
  // Ranks beyond the GPUs share them: a GPU that admits one process cannot.
  int mode = cudaComputeModeDefault;
  if (ranks > n && cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0) == cudaSuccess &&
      (mode == cudaComputeModeExclusiveProcess || mode == cudaComputeModeProhibited)) {
    return "GPU 0's compute mode admits one process, and " + std::to_string(ranks) + " ranks share " + std::to_string(n) + " GPU(s)";
  }
  return "";
}

// The caller's stream: an async all-reduce on a stream whose real input
// arrives only after 300 ms of other work queued there must reduce that
// input, not the poison underneath (rcoll starts after the work queued on the
// stream when the op was issued). The result is read back on the same stream.
void test_stream_order(rcoll::Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  const size_t n = 1 << 20;
  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  float* host = nullptr;
  cuda_check(cudaMallocHost(reinterpret_cast<void**>(&host), n * sizeof(float)), "cudaMallocHost");
  float* dev = nullptr;
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&dev), n * sizeof(float)), "cudaMalloc");
  std::vector<float> poison(n, -1000.0f);
  cuda_check(cudaMemcpy(dev, poison.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((r + 1) * static_cast<int>(i % 5));
  cuda_check(cudaLaunchHostFunc(stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }, nullptr),
             "cudaLaunchHostFunc");
  cuda_check(cudaMemcpyAsync(dev, host, n * sizeof(float), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  rcoll::OpOptions o;
  o.cuda_stream = stream;
  Buffer b{dev, n, DataType::kFloat32, rcoll::MemoryKind::kCuda};
  rcoll::throw_if_error(comm.allreduce_async(b, b, ReduceOp::kSum, o).wait());
  cuda_check(cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  ++g_checks;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(p * (p + 1) / 2 * static_cast<int>(i % 5));
    if (host[i] != want && bad++ < 5) {
      std::fprintf(stderr, "MISMATCH rank %d: stream-ordered allreduce: element %zu is %g, expected %g\n", r, i,
                   static_cast<double>(host[i]), static_cast<double>(want));
    }
  }
  if (bad > 0) {
    std::fprintf(stderr, "FAIL rank %d: stream-ordered allreduce: %zu of %zu elements wrong\n", r, bad, n);
    ++g_failures;
  }
  cudaFree(dev);
  cudaFreeHost(host);
  cudaStreamDestroy(stream);
}

// --desync-at K: 40 all-reduces of 64 floats on the device, in which rank 1
// runs its K-th as a max where the others sum. Collectives that small settle
// later (no confirmation of their own), so the ranks learn of it at the next
// confirmation: every rank must fail there with kDesync naming the range of
// seqs, within RCOLL_NCCL_CONFIRM_EVERY collectives of the K-th. Returns the
// process's exit code.
int test_desync(rcoll::Communicator& comm, int k) {
  const int r = comm.rank();
  float* dev = nullptr;
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&dev), 64 * sizeof(float)), "cudaMalloc");
  cuda_check(cudaMemset(dev, 0, 64 * sizeof(float)), "cudaMemset");
  Buffer b{dev, 64, DataType::kFloat32, rcoll::MemoryKind::kCuda};
  int failed_at = 0;
  std::string what;
  for (int i = 1; i <= 40 && failed_at == 0; ++i) {
    const ReduceOp op = i == k && r == 1 ? ReduceOp::kMax : ReduceOp::kSum;
    rcoll::Status s = comm.allreduce_async(b, b, op).wait();
    if (!s.ok()) {
      failed_at = i;
      if (s.code() != rcoll::ErrorCode::kDesync) {
        std::fprintf(stderr, "FAIL rank %d: all-reduce %d failed with %s, expected kDesync\n", r, i,
                     s.to_string().c_str());
        return 1;
      }
      what = s.message();
    }
  }
  cudaFree(dev);
  const char* every = std::getenv("RCOLL_NCCL_CONFIRM_EVERY");
  const int window = every != nullptr ? std::atoi(every) : 16;
  if (failed_at < k || failed_at >= k + window ||
      what.find("collectives at seqs") == std::string::npos) {
    std::fprintf(
        stderr, "FAIL rank %d: the desync at all-reduce %d was %s (%s)\n", r, k,
        failed_at == 0 ? "never reported" : ("reported at " + std::to_string(failed_at)).c_str(),
        what.c_str());
    return 1;
  }
  std::printf("rank %d: the desync at all-reduce %d was reported at all-reduce %d: %s\n", r, k,
              failed_at, what.c_str());
  return 0;
}
#endif

// Runs `op` with `buffers` on host memory, or (--memory cuda) on device copies
// of them that are copied back afterwards.
template <typename F>
void run_on(std::vector<Buffer*> buffers, F op) {
  if (!g_device) {
    op();
    return;
  }
#if RCOLL_WORKER_CUDA
  DeviceMirror mirror(std::move(buffers));
  op();
#endif
}

// The value rank r contributes at element i of an op salted with `salt`.
int base_value(int r, size_t i, int salt, ReduceOp op, bool is_unsigned) {
  if (op == ReduceOp::kProd) {
    static constexpr int kProdValues[] = {1, -1, 2, -2};
    int v = kProdValues[(i * 5 + static_cast<size_t>(r) * 3 + static_cast<size_t>(salt)) % 4];
    return is_unsigned ? (v < 0 ? -v : v) : v;
  }
  int v = static_cast<int>((i * 7 + static_cast<size_t>(r) * 13 + static_cast<size_t>(salt) * 5) % 9);
  return is_unsigned ? v : v - 4;
}

bool is_unsigned(DataType d) {
  return d == DataType::kUint8 || d == DataType::kUint32 || d == DataType::kUint64;
}

void store_value(DataType d, void* base, size_t i, double v) {
  switch (d) {
    case DataType::kInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case DataType::kUint8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DataType::kUint32: static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DataType::kUint64: static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v); break;
    case DataType::kFloat16: static_cast<rcoll::float16*>(base)[i] = rcoll::to_float16(static_cast<float>(v)); break;
    case DataType::kBfloat16: static_cast<rcoll::bfloat16*>(base)[i] = rcoll::to_bfloat16(static_cast<float>(v)); break;
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[i] = v; break;
  }
}

double load_value(DataType d, const void* base, size_t i) {
  switch (d) {
    case DataType::kInt8: return static_cast<const int8_t*>(base)[i];
    case DataType::kUint8: return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DataType::kUint32: return static_cast<const uint32_t*>(base)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kUint64: return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case DataType::kFloat16: return rcoll::to_float(static_cast<const rcoll::float16*>(base)[i]);
    case DataType::kBfloat16: return rcoll::to_float(static_cast<const rcoll::bfloat16*>(base)[i]);
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    case DataType::kFloat64: return static_cast<const double*>(base)[i];
  }
  return 0;
}

// Wraps an exact integer into the dtype's width, as two's complement hardware does.
double wrap(DataType d, int64_t v) {
  switch (d) {
    case DataType::kInt8: return static_cast<int8_t>(static_cast<uint8_t>(v));
    case DataType::kUint8: return static_cast<uint8_t>(v);
    case DataType::kInt32: return static_cast<int32_t>(static_cast<uint32_t>(v));
    case DataType::kUint32: return static_cast<uint32_t>(v);
    default: return static_cast<double>(v);
  }
}

// Fractional float32 inputs for the tolerance pass.
double frac_value(int r, size_t i, int salt) {
  return static_cast<double>(static_cast<float>(0.001 * static_cast<double>((i * 31 + static_cast<size_t>(r) * 17 + static_cast<size_t>(salt)) % 1000) - 0.37));
}

struct Case {
  DataType dtype;
  ReduceOp op;
  size_t count;
  int salt;
  bool fractional = false;
};

double input(const Case& c, int r, size_t i) {
  if (c.fractional) return frac_value(r, i, c.salt);
  return base_value(r, i, c.salt, c.op, is_unsigned(c.dtype));
}

// The expected reduction over all ranks of element i.
double expected_reduce(const Case& c, int p, size_t i) {
  if (c.fractional) {
    double acc = 0;
    for (int r = 0; r < p; ++r) acc += input(c, r, i);
    return c.op == ReduceOp::kAvg ? acc / p : acc;
  }
  int64_t acc = static_cast<int64_t>(input(c, 0, i));
  for (int r = 1; r < p; ++r) {
    auto v = static_cast<int64_t>(input(c, r, i));
    switch (c.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = v < acc ? v : acc; break;
      case ReduceOp::kMax: acc = v > acc ? v : acc; break;
    }
  }
  if (c.op == ReduceOp::kAvg) return static_cast<double>(acc) / p;
  return wrap(c.dtype, acc);
}

double tolerance(const Case& c, double expected) {
  if (!c.fractional && c.op != ReduceOp::kAvg) return 0;  // exact
  double rel = 0;
  switch (c.dtype) {
    case DataType::kFloat16: rel = 4e-3; break;
    case DataType::kBfloat16: rel = 3e-2; break;
    case DataType::kFloat32: rel = 1e-5; break;
    default: rel = 1e-12; break;
  }
  return rel * (std::fabs(expected) + 1.0);
}

std::string describe(const char* what, const Case& c, int p) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s %s x %zu %s%s at %d ranks", what, rcoll::to_string(c.dtype), c.count,
                rcoll::to_string(c.op), c.fractional ? " (fractional)" : "", p);
  return buf;
}

// Every input pattern repeats with this period (a multiple of 9, 4 and 1000,
// the periods of the three formulas), so expected values are computed once per
// residue and tiled. The period is not a power of two, so a chunk or segment
// written to the wrong place still shows up as a mismatch.
constexpr size_t kPeriod = 9000;

// Typed bytes of `count` elements whose value at i is table[(offset + i) % kPeriod].
std::vector<char> tile(DataType d, const std::vector<double>& table, size_t count, size_t offset = 0) {
  const size_t es = rcoll::size_of(d);
  std::vector<char> period(kPeriod * es);
  for (size_t j = 0; j < kPeriod; ++j) store_value(d, period.data(), j, table[j]);
  std::vector<char> out(count * es + 1);
  size_t i = 0;
  while (i < count) {
    size_t j = (offset + i) % kPeriod, n = std::min(count - i, kPeriod - j);
    std::memcpy(out.data() + i * es, period.data() + j * es, n * es);
    i += n;
  }
  return out;
}

std::vector<double> input_table(const Case& c, int r) {
  std::vector<double> t(kPeriod);
  for (size_t j = 0; j < kPeriod; ++j) t[j] = input(c, r, j);
  return t;
}

std::vector<double> reduced_table(const Case& c, int p) {
  std::vector<double> t(kPeriod);
  for (size_t j = 0; j < kPeriod; ++j) t[j] = expected_reduce(c, p, j);
  return t;
}

// Compares `got` element by element with `want` (typed bytes of the same dtype).
// Exact cases compare bytes; the others allow the dtype's tolerance.
void check(const std::string& what, int rank, const Case& c, const void* got, const std::vector<char>& want, size_t n) {
  ++g_checks;
  const size_t es = rcoll::size_of(c.dtype);
  const bool exact = !c.fractional && c.op != ReduceOp::kAvg;
  if (exact && std::memcmp(got, want.data(), n * es) == 0) return;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    double w = load_value(c.dtype, want.data(), i), g = load_value(c.dtype, got, i);
    bool wrong = exact ? std::memcmp(static_cast<const char*>(got) + i * es, want.data() + i * es, es) != 0
                       : (std::fabs(g - w) > tolerance(c, w) || std::isnan(g));
    if (wrong) {
      if (bad < 5) std::fprintf(stderr, "MISMATCH rank %d: %s: element %zu is %.9g, expected %.9g\n", rank, what.c_str(), i, g, w);
      ++bad;
    }
  }
  if (bad > 0) {
    std::fprintf(stderr, "FAIL rank %d: %s: %zu of %zu elements wrong\n", rank, what.c_str(), bad, n);
    ++g_failures;
  }
}

std::vector<char> make_buffer(const Case& c, size_t count) {
  return std::vector<char>(count * rcoll::size_of(c.dtype) + 1);  // +1: data() is never null
}

// For an avg case the tiled "want" is computed in double and rounded to the
// dtype once; the check then allows the dtype's tolerance.
void test_allreduce(rcoll::Communicator& comm, const Case& c, bool in_place) {
  const int p = comm.size(), r = comm.rank();
  auto mine = input_table(c, r);
  auto in = tile(c.dtype, mine, c.count);
  auto want = tile(c.dtype, reduced_table(c, p), c.count);
  Buffer bin{in.data(), c.count, c.dtype};
  if (in_place) {
    try {
      run_on({&bin}, [&] {
        call([&] { comm.allreduce(bin, c.op); },
             [&] { return comm.allreduce_async(bin, bin, c.op, op_opts()); });
      });
    } catch (const rcoll::Error& e) {
      // Shrink mode: an in-place op that a death failed gives its buffer
      // back holding the input, so the caller can run it again as it was.
      if (e.code() == rcoll::ErrorCode::kPeerDead) {
        const auto original = tile(c.dtype, mine, c.count);
        const bool kept = std::memcmp(in.data(), original.data(), original.size()) == 0;
        std::printf("%s: %s after the death (%zu elements compared with its input)\n",
                    describe("allreduce in place", c, p).c_str(),
                    kept ? "buffer holds its input again" : "INPUT LOST", c.count);
        if (!kept) ++g_inputs_lost;
      }
      throw;
    }
    check(describe("allreduce in place", c, p), r, c, in.data(), want, c.count);
  } else {
    auto out = make_buffer(c, c.count);
    Buffer bout{out.data(), c.count, c.dtype};
    run_on({&bin, &bout}, [&] {
      call([&] { comm.allreduce(bin, bout, c.op); }, [&] { return comm.allreduce_async(bin, bout, c.op, op_opts()); });
    });
    check(describe("allreduce", c, p), r, c, out.data(), want, c.count);
    Case exact = c;
    exact.fractional = false;
    exact.op = ReduceOp::kSum;
    check(describe("allreduce leaves its input untouched", c, p), r, exact, in.data(), tile(c.dtype, mine, c.count), c.count);
  }
}

// Allgather: rank q's block holds input(q, i) for i in [0, count).
void test_allgather(rcoll::Communicator& comm, const Case& c, bool in_place) {
  const int p = comm.size(), r = comm.rank();
  const size_t es = rcoll::size_of(c.dtype), block = c.count * es;
  auto out = make_buffer(c, c.count * static_cast<size_t>(p));
  auto mine = tile(c.dtype, input_table(c, r), c.count);
  std::vector<char> want(block * static_cast<size_t>(p) + 1);
  for (int q = 0; q < p; ++q) {
    auto theirs = tile(c.dtype, input_table(c, q), c.count);
    std::memcpy(want.data() + block * static_cast<size_t>(q), theirs.data(), block);
  }
  Buffer bin{mine.data(), c.count, c.dtype};
  if (in_place) {
    std::memcpy(out.data() + block * static_cast<size_t>(r), mine.data(), block);
    bin.data = out.data() + block * static_cast<size_t>(r);
  }
  Buffer bout{out.data(), c.count * static_cast<size_t>(p), c.dtype};
  run_on({&bin, &bout}, [&] { call([&] { comm.allgather(bin, bout); }, [&] { return comm.allgather_async(bin, bout, op_opts()); }); });
  check(describe(in_place ? "allgather in place" : "allgather", c, p), r, c, out.data(), want, c.count * static_cast<size_t>(p));
}

// Reduce-scatter: element i of rank q's input is input(q, i); rank r receives
// block r of the reduction, i.e. the reduced pattern from offset r * count.
void test_reduce_scatter(rcoll::Communicator& comm, const Case& c) {
  const int p = comm.size(), r = comm.rank();
  const size_t total = c.count * static_cast<size_t>(p);
  auto in = tile(c.dtype, input_table(c, r), total);
  auto out = make_buffer(c, c.count);
  Buffer bin{in.data(), total, c.dtype}, bout{out.data(), c.count, c.dtype};
  run_on({&bin, &bout}, [&] {
    call([&] { comm.reduce_scatter(bin, bout, c.op); }, [&] { return comm.reduce_scatter_async(bin, bout, c.op, op_opts()); });
  });
  auto want = tile(c.dtype, reduced_table(c, p), c.count, c.count * static_cast<size_t>(r));
  check(describe("reduce_scatter", c, p), r, c, out.data(), want, c.count);
}

void test_broadcast(rcoll::Communicator& comm, const Case& c, int root) {
  const int p = comm.size(), r = comm.rank();
  auto buf = tile(c.dtype, input_table(c, r), c.count);
  Buffer b{buf.data(), c.count, c.dtype};
  run_on({&b}, [&] { call([&] { comm.broadcast(b, root); }, [&] { return comm.broadcast_async(b, root, op_opts()); }); });
  check(describe(("broadcast from root " + std::to_string(root)).c_str(), c, p), r, c, buf.data(),
        tile(c.dtype, input_table(c, root), c.count), c.count);
}

// A burst of small broadcasts from one root, issued back to back and then
// waited for: small broadcasts are eager (no acknowledgement), so the root runs
// ahead of its receivers, and a fault meanwhile makes it re-run them from its
// replay log. Each broadcast has its own contents; every one is checked.
// After every 4th an empty all-reduce: it talks to no one, so it must not
// count as proof that the receivers caught up.
void test_broadcast_burst(rcoll::Communicator& comm, const Case& c, int root, int n) {
  const int p = comm.size(), r = comm.rank();
  std::vector<std::vector<char>> bufs;
  std::vector<rcoll::Work> works;
  for (int k = 0; k < n; ++k) {
    Case ck = c;
    ck.salt = c.salt + k;
    bufs.push_back(tile(c.dtype, input_table(ck, r), c.count));
  }
  char none = 0;
  const Buffer empty{&none, 0, c.dtype};
  for (int k = 0; k < n; ++k) {
    works.push_back(comm.broadcast_async(Buffer{bufs[k].data(), c.count, c.dtype}, root));
    if (k % 4 == 3) works.push_back(comm.allreduce_async(empty, empty, ReduceOp::kSum));
  }
  for (auto& w : works) rcoll::throw_if_error(w.wait());
  for (int k = 0; k < n; ++k) {
    Case ck = c;
    ck.salt = c.salt + k;
    check(describe(("broadcast " + std::to_string(k + 1) + " of a burst of " + std::to_string(n) + " from root " +
                    std::to_string(root)).c_str(), ck, p),
          r, ck, bufs[k].data(), tile(c.dtype, input_table(ck, root), c.count), c.count);
  }
}

// Ring send/recv: every rank sends to r+1 and receives from r-1. Even ranks
// send first, odd ranks receive first, so blocking calls cannot deadlock.
void test_send_recv(rcoll::Communicator& comm, const Case& c) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const int to = (r + 1) % p, from = (r - 1 + p) % p;
  auto out = tile(c.dtype, input_table(c, r), c.count);
  auto in = make_buffer(c, c.count);
  Buffer bout{out.data(), c.count, c.dtype}, bin{in.data(), c.count, c.dtype};
  run_on({&bout, &bin}, [&] {
    auto send = [&] { call([&] { comm.send(bout, to); }, [&] { return comm.send_async(bout, to, op_opts()); }); };
    auto recv = [&] { call([&] { comm.recv(bin, from); }, [&] { return comm.recv_async(bin, from, op_opts()); }); };
    if (r % 2 == 0) {
      send();
      recv();
    } else {
      recv();
      send();
    }
  });
  check(describe("send/recv", c, p), r, c, in.data(), tile(c.dtype, input_table(c, from), c.count), c.count);
}

// Alltoall: element i of rank q's input is input(q, i); rank r's output block q
// is block r of rank q's input, i.e. rank q's pattern from offset r * block.
// Blocks are count / p elements (rounded up), so the op moves about `count`
// elements in all, as the other collectives do.
void test_alltoall(rcoll::Communicator& comm, const Case& c) {
  const int p = comm.size(), r = comm.rank();
  const size_t block = (c.count + static_cast<size_t>(p) - 1) / static_cast<size_t>(p);
  const size_t total = block * static_cast<size_t>(p), es = rcoll::size_of(c.dtype);
  auto in = tile(c.dtype, input_table(c, r), total);
  auto out = make_buffer(c, total);
  Buffer bin{in.data(), total, c.dtype}, bout{out.data(), total, c.dtype};
  run_on({&bin, &bout}, [&] { call([&] { comm.alltoall(bin, bout); }, [&] { return comm.alltoall_async(bin, bout, op_opts()); }); });
  std::vector<char> want(total * es + 1);
  for (int q = 0; q < p; ++q) {
    auto theirs = tile(c.dtype, input_table(c, q), block, block * static_cast<size_t>(r));
    std::memcpy(want.data() + block * es * static_cast<size_t>(q), theirs.data(), block * es);
  }
  check(describe("alltoall", c, p), r, c, out.data(), want, total);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// "4K+3" = 4 KiB worth of elements plus 3 elements; "1M" = 1 MiB worth.
size_t parse_count(const std::string& spec, DataType d) {
  size_t plus = spec.find('+');
  std::string bytes_part = spec.substr(0, plus);
  size_t extra = plus == std::string::npos ? 0 : std::stoul(spec.substr(plus + 1));
  size_t mult = 1;
  char last = bytes_part.empty() ? '0' : bytes_part.back();
  if (last == 'K') mult = 1024;
  if (last == 'M') mult = 1024 * 1024;
  if (mult > 1) {
    size_t bytes = std::stoul(bytes_part.substr(0, bytes_part.size() - 1)) * mult;
    return bytes / rcoll::size_of(d) + extra;
  }
  return std::stoul(bytes_part) + extra;  // a plain number is an element count
}

}  // namespace

int main(int argc, char** argv) {
  // The suite allocates and frees buffers of up to 64 MiB x ranks per case.
  // glibc maps each of those afresh and unmaps it on free, so every case paid
  // its page faults again (more than half of a 1-rank run's time was the
  // kernel zeroing pages). Kept in the heap, they are faulted in once.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::string sizes = "0,1,7,4K+3,1M,64M";
  std::string ops = "allreduce,allgather,reduce_scatter,broadcast,sendrecv,barrier,alltoall";
  std::string dtypes = "int8,uint8,int32,uint32,int64,uint64,float16,bfloat16,float32,float64";
  std::string big_dtypes = "all";  // dtypes that run at sizes >= big_bytes
  size_t big_bytes = 16u << 20;
  long expect_recoveries = -1;     // at least this many recoveries on this rank
  long expect_nccl_replays =
      -1;  // at least this many ops replayed on NCCL for a peer, all ranks together
  long max_recoveries = -1;        // at most this many
  bool recoveries_equal_faults = false;  // recoveries == data-plane faults injected on all ranks
  int repeat = 1;
  bool survive_shrink = false;
  std::string expect_transport;  // the transport the run must end on
  std::string expect_device_transport;  // where device collectives must end up: nccl or staged
  long expect_fallbacks = -1;    // exactly this many moves down the transport chain
  long expect_probes = -1;       // exactly this many moves back up
  double duration_s = 0;
  long expect_inflight_min = -1;  // adaptive chunking: chunk_bytes x pipeline_depth at the end, at least
  std::string memory = "host";
  int desync_at = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--sizes") sizes = argv[i + 1];
    else if (k == "--ops") ops = argv[i + 1];
    else if (k == "--dtypes") dtypes = argv[i + 1];
    else if (k == "--big-dtypes") big_dtypes = argv[i + 1];
    else if (k == "--big-bytes") big_bytes = parse_count(argv[i + 1], DataType::kUint8);
    else if (k == "--expect-recoveries") expect_recoveries = std::stol(argv[i + 1]);
    else if (k == "--expect-nccl-replays")
      expect_nccl_replays = std::stol(argv[i + 1]);
    else if (k == "--max-recoveries") max_recoveries = std::stol(argv[i + 1]);
    else if (k == "--recoveries-equal-faults") recoveries_equal_faults = std::string(argv[i + 1]) == "1";
    else if (k == "--repeat") repeat = std::stoi(argv[i + 1]);
    else if (k == "--survive-shrink") survive_shrink = std::string(argv[i + 1]) == "1";
    else if (k == "--expect-transport") expect_transport = argv[i + 1];
    else if (k == "--expect-device-transport") expect_device_transport = argv[i + 1];
    else if (k == "--expect-fallbacks") expect_fallbacks = std::stol(argv[i + 1]);
    else if (k == "--expect-probes") expect_probes = std::stol(argv[i + 1]);
    else if (k == "--duration") duration_s = std::stod(argv[i + 1]);
    else if (k == "--expect-inflight-min") expect_inflight_min = std::stol(argv[i + 1]);
    else if (k == "--memory") memory = argv[i + 1];
    else if (k == "--desync-at")
      desync_at = std::stoi(argv[i + 1]);
    else if (k == "--stream-wait") g_stream_wait = std::string(argv[i + 1]) == "1";
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (memory != "host" && memory != "cuda") {
    std::fprintf(stderr, "--memory: '%s' is not host or cuda\n", memory.c_str());
    return 2;
  }
  if (memory == "cuda") {
#if RCOLL_WORKER_CUDA
    const char* world = std::getenv("RCOLL_WORLD_SIZE");
    if (std::string why = no_device_reason(world ? std::atoi(world) : 1); !why.empty()) {
      std::printf("SKIP: --memory cuda: %s\n", why.c_str());
      return 77;
    }
    g_device = true;
    if (g_stream_wait) cuda_check(cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(&g_stream), cudaStreamNonBlocking),
                                  "cudaStreamCreateWithFlags");
    int devices = 0;
    (void)cudaGetDeviceCount(&devices);
    const char* rank = std::getenv("RCOLL_RANK");
    const char* local_size = std::getenv("RCOLL_LOCAL_WORLD_SIZE");
    rcoll::nccl::one_host_per_rank_if_sharing("rcoll-worker", rank ? std::atoi(rank) : 0,
                                              local_size ? std::atoi(local_size) : 1, devices);
#else
    std::printf("SKIP: --memory cuda: this worker was built without CUDA\n");
    return 77;
#endif
  }
  if (ops == "all") ops = "allreduce,allgather,reduce_scatter,broadcast,broadcast_burst,sendrecv,barrier,alltoall";
  auto has = [](const std::string& list, const std::string& item) {
    for (const auto& x : split(list))
      if (x == item) return true;
    return false;
  };

  try {
    rcoll::Communicator comm = rcoll::Communicator::create();
    const auto started = std::chrono::steady_clock::now();
    std::printf("rank %d/%d: communicator ready, running collectives\n", comm.rank(), comm.size());
    std::fflush(stdout);
#if RCOLL_WORKER_CUDA
    if (g_device && desync_at > 0) return test_desync(comm, desync_at);
    if (g_device && has(ops, "allreduce")) test_stream_order(comm);
#endif
    // Another pass? A fixed number, or (--duration) rank 0's clock, shared by a broadcast.
    auto another_pass = [&](int done) {
      if (duration_s <= 0) return done < repeat;
      std::vector<int32_t> go{0};
      if (comm.rank() == 0) {
        go[0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() < duration_s;
      }
      comm.broadcast(Buffer::of(go), 0);
      return go[0] != 0;
    };
    // With --survive-shrink, a rank death shrinks the group (RCOLL_SHRINK=1):
    // the op that saw it fails with kPeerDead, and the suite runs again, from
    // the start, on the survivors.
    int shrinks = 0;
    auto run_suite = [&]() {
    const int p = comm.size(), r = comm.rank();
    int salt = 0;
    int passes = 0;
    for (int pass = 0; another_pass(pass); ++pass, ++passes)
    for (const auto& dname : split(dtypes)) {
      DataType d = *rcoll::parse_data_type(dname);
      for (const auto& sspec : split(sizes)) {
        const size_t count = parse_count(sspec, d);
        if (count * rcoll::size_of(d) >= big_bytes && big_dtypes != "all" && !has(big_dtypes, dname)) continue;
        ++salt;
        for (int o = 0; o < rcoll::kNumReduceOps; ++o) {
          auto op = static_cast<ReduceOp>(o);
          if (op == ReduceOp::kAvg && !rcoll::is_floating(d)) continue;
          Case c{d, op, count, salt + o};
          if (has(ops, "allreduce")) {
            test_allreduce(comm, c, false);
            test_allreduce(comm, c, true);
          }
          if (has(ops, "reduce_scatter")) test_reduce_scatter(comm, c);
        }
        Case c{d, ReduceOp::kSum, count, salt};
        if (has(ops, "allgather")) {
          test_allgather(comm, c, false);
          test_allgather(comm, c, true);
        }
        if (has(ops, "broadcast")) test_broadcast(comm, c, salt % p);
        // Eager broadcasts are the small ones: up to 8 KiB, and over TCP above 2
        // ranks up to 256 KiB (kEagerBroadcastBytesTcp, runtime/algorithms/context.h;
        // 128 KiB where broadcasts above it run the star).
        if (has(ops, "broadcast_burst") && !g_device && count * rcoll::size_of(d) <= (256u << 10))
          test_broadcast_burst(comm, c, salt % p, 40);
        if (has(ops, "sendrecv")) test_send_recv(comm, c);
        if (has(ops, "alltoall")) test_alltoall(comm, c);
        if (has(ops, "barrier")) comm.barrier();
        if (d == DataType::kFloat32) {
          Case f{d, ReduceOp::kSum, count, salt, true};
          if (has(ops, "allreduce")) test_allreduce(comm, f, false);
          if (has(ops, "reduce_scatter")) test_reduce_scatter(comm, f);
          f.op = ReduceOp::kAvg;
          if (has(ops, "allreduce")) test_allreduce(comm, f, true);
        }
      }
      if (r == 0) std::printf("%s: done (%d checks so far, %d failed)\n", dname.c_str(), g_checks, g_failures);
      std::fflush(stdout);
    }
    comm.barrier();
    rcoll::Counters counters = comm.counters();
    if (duration_s > 0) std::printf("rank %d/%d: %d passes in %.1f s\n", r, p, passes,
                                    std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    std::printf("rank %d/%d: %d checks, %d failed, %llu ops, %llu bytes sent, %llu recoveries (%.1f ms recovering), %llu faults + %llu delays injected, transport %s (epoch %lld, %llu fallbacks, %llu probes)\n",
                r, p, g_checks, g_failures, static_cast<unsigned long long>(counters.ops),
                static_cast<unsigned long long>(counters.bytes_sent), static_cast<unsigned long long>(counters.recoveries),
                counters.recovery_seconds * 1000.0, static_cast<unsigned long long>(counters.faults_injected),
                static_cast<unsigned long long>(counters.delays_injected), counters.transport.c_str(),
                static_cast<long long>(counters.epoch), static_cast<unsigned long long>(counters.fallbacks),
                static_cast<unsigned long long>(counters.probes));
    std::printf("rank %d/%d: device collectives: %s (%llu ops on NCCL)\n", r, p, counters.device_transport.c_str(),
                static_cast<unsigned long long>(counters.nccl_ops));
    // "nccl" means they did run there, not only that NCCL is configured.
    if (expect_device_transport == "nccl" && counters.nccl_ops == 0) {
      std::fprintf(stderr, "FAIL rank %d: expected device collectives on NCCL, none ran there\n", r);
      ++g_failures;
    }
    if (!expect_device_transport.empty() && counters.device_transport != expect_device_transport) {
      std::fprintf(stderr, "FAIL rank %d: expected device collectives on %s, they are %s\n", r,
                   expect_device_transport.c_str(), counters.device_transport.c_str());
      ++g_failures;
    }
    if (!expect_transport.empty() && counters.transport != expect_transport) {
      std::fprintf(stderr, "FAIL rank %d: expected to end on transport %s, ended on %s\n", r, expect_transport.c_str(),
                   counters.transport.c_str());
      ++g_failures;
    }
    if (expect_fallbacks >= 0 && counters.fallbacks != static_cast<uint64_t>(expect_fallbacks)) {
      std::fprintf(stderr, "FAIL rank %d: expected %ld transport fallbacks, counted %llu\n", r, expect_fallbacks,
                   static_cast<unsigned long long>(counters.fallbacks));
      ++g_failures;
    }
    if (expect_probes >= 0 && counters.probes != static_cast<uint64_t>(expect_probes)) {
      std::fprintf(stderr, "FAIL rank %d: expected %ld probes back up the transport chain, counted %llu\n", r,
                   expect_probes, static_cast<unsigned long long>(counters.probes));
      ++g_failures;
    }
    if (r == 0) {
      std::printf("rank 0: link latency %.1f us, %.2f GB/s; collectives use %llu-byte frames x %d in flight\n",
                  counters.link_latency_us, counters.link_bandwidth / 1e9, static_cast<unsigned long long>(counters.chunk_bytes),
                  counters.pipeline_depth);
    }
    if (expect_inflight_min >= 0 && counters.chunk_bytes * static_cast<uint64_t>(counters.pipeline_depth) <
                                        static_cast<uint64_t>(expect_inflight_min)) {
      std::fprintf(stderr, "FAIL rank %d: expected at least %ld bytes in flight per link, tuned to %llu x %d\n", r,
                   expect_inflight_min, static_cast<unsigned long long>(counters.chunk_bytes), counters.pipeline_depth);
      ++g_failures;
    }
    if (max_recoveries >= 0 && counters.recoveries > static_cast<uint64_t>(max_recoveries)) {
      std::fprintf(stderr, "FAIL rank %d: expected at most %ld recoveries, counted %llu\n", r, max_recoveries,
                   static_cast<unsigned long long>(counters.recoveries));
      ++g_failures;
    }
    if (recoveries_equal_faults) {
      // After a shrink, counted from the shrink on: the dead rank's faults
      // before it died are gone with it.
      // Both as they stood after the barrier above: every fault before it
      // and its recovery are done on every rank. (A fault landing in the
      // allreduce below counts in neither.)
      const uint64_t here = counters.faults_injected - counters.faults_at_shrink;
      const uint64_t recoveries = counters.recoveries - counters.recoveries_at_shrink;
      std::vector<uint64_t> faults{here};
      comm.allreduce(Buffer::of(faults), ReduceOp::kSum);
      std::printf(
          "rank %d: %llu data-plane faults injected on all ranks (%llu here), %llu recoveries%s\n",
          r, static_cast<unsigned long long>(faults[0]), static_cast<unsigned long long>(here),
          static_cast<unsigned long long>(recoveries),
          counters.shrinks > 0 ? " (since the shrink)" : "");
      if (faults[0] != recoveries || faults[0] == 0) {
        std::fprintf(stderr, "FAIL rank %d: %llu faults injected but %llu recoveries\n", r,
                     static_cast<unsigned long long>(faults[0]),
                     static_cast<unsigned long long>(recoveries));
        ++g_failures;
      }
    }
    if (expect_nccl_replays >= 0) {
      // A replay happens on the rank that completed the op, not the one the
      // fault struck: counted over every rank.
      std::vector<uint64_t> replays{counters.nccl_replays};
      comm.allreduce(Buffer::of(replays), ReduceOp::kSum);
      std::printf("rank %d: %llu ops replayed on NCCL for a peer, all ranks (%llu here)\n", r,
                  static_cast<unsigned long long>(replays[0]),
                  static_cast<unsigned long long>(counters.nccl_replays));
      if (replays[0] < static_cast<uint64_t>(expect_nccl_replays)) {
        std::fprintf(stderr,
                     "FAIL rank %d: expected at least %ld ops replayed on NCCL, counted %llu\n", r,
                     expect_nccl_replays, static_cast<unsigned long long>(replays[0]));
        ++g_failures;
      }
    }
    if (expect_recoveries >= 0 && counters.recoveries < static_cast<uint64_t>(expect_recoveries)) {
      std::fprintf(stderr, "FAIL rank %d: expected at least %ld recoveries, counted %llu\n", r, expect_recoveries,
                   static_cast<unsigned long long>(counters.recoveries));
      ++g_failures;
    }
    };
    for (;; ++shrinks) {
      try {
        run_suite();
        break;
      } catch (const rcoll::Error& e) {
        if (!survive_shrink || e.code() != rcoll::ErrorCode::kPeerDead || shrinks > 0) throw;
        std::printf("after a rank died the group shrank: now rank %d of %d (%s); running the suite again\n", comm.rank(),
                    comm.size(), e.what());
        // Every survivor must name the same op as the one the death failed
        // (shrink_rule.h), or a "run the failed op again" loop pairs
        // different ops on different ranks.
        const uint64_t seen = e.status().context().op_seq;
        std::vector<uint64_t> lo{seen}, hi{seen};
        comm.allreduce(Buffer::of(lo), ReduceOp::kMin);
        comm.allreduce(Buffer::of(hi), ReduceOp::kMax);
        if (lo[0] != hi[0]) {
          std::fprintf(
              stderr,
              "FAIL rank %d: the survivors disagree on the op the death failed: op %llu to %llu\n",
              comm.rank(), static_cast<unsigned long long>(lo[0]),
              static_cast<unsigned long long>(hi[0]));
          ++g_failures;
        } else {
          std::printf("rank %d: every survivor names op %llu as the one the death failed\n",
                      comm.rank(), static_cast<unsigned long long>(seen));
        }
        // The checks before the death count too (a wrong result there is
        // no less wrong); the op the death failed was not checked.
      }
    }
  } catch (const rcoll::Error& e) {
    std::fprintf(stderr, "rcoll error: %s\n", e.what());
    // Give the other ranks a moment to report their side of the failure before
    // this exit makes rcoll-run stop them.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return 3;
  }
  if (g_inputs_lost > 0) {
    std::fprintf(stderr,
                 "FAIL: %d in-place op(s) failed by a death did not give their input back\n",
                 g_inputs_lost);
  }
  return g_failures == 0 && g_inputs_lost == 0 ? 0 : 1;
}
