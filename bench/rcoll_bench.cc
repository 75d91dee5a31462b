// rcoll-bench: nccl-tests-style bandwidth and latency table for rcoll's
// collectives, one process per rank, started by rcoll-run:
//
//   rcoll-run -n 4 -- rcoll-bench --op all --sizes 8:64M --check --json out.json
//
// Per size: `warmup` untimed ops, then `iters` ops timed as --time says
// (bench_report.h: Timing; by default the median of per-iteration times); the
// reported time is the maximum of that over ranks (an allreduce outside the
// timed region). algbw is size / time; busbw scales it with nccl-tests' factor
// for the op, so that it reads as the speed each link would need.
//
// --compare runs the baselines (Gloo, MPI) on the same sizes afterwards
// (bench/compare.h); --plot draws every row with gnuplot (bench/plot.h).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/bench_pattern.h"
#include "bench/bench_report.h"
#include "bench/child_process.h"
#include "bench/compare.h"
#include "bench/plot.h"
#include "rcoll/rcoll.h"

#if RCOLL_BENCH_CUDA
#include <cuda_runtime.h>

#include "transports/nccl/nccl_comm.h"
#endif

namespace {

using rcoll::AllreduceAlgorithm;
using rcoll::Buffer;
using rcoll::DataType;
using rcoll::ReduceOp;
using rcoll::bench::Reduction;
using rcoll::bench::Row;
using rcoll::bench::split_list;
using rcoll::bench::UsageError;

// kUsageHead, --time's line, kUsageTail.
constexpr const char* kUsageHead =
    "usage: rcoll-bench [options]      (one process per rank: rcoll-run -n N -- rcoll-bench ...)\n"
    "  --op OP        allreduce|allgather|reduce_scatter|broadcast|sendrecv|barrier|all  "
    "[allreduce]\n"
    "  --sizes LIST   MIN:MAX (doubling) or a comma list; suffixes K, M, G (x1024)  [8:64M]\n"
    "                 size = bytes per rank of the op's main buffer, as in nccl-tests: the buffer\n"
    "                 (allreduce, broadcast), the output (allgather), the input (reduce_scatter),\n"
    "                 the message (sendrecv: rank r sends to r+1 and receives from r-1)\n"
    "  --dtype T      int8|uint8|int32|uint32|int64|uint64|float16|bfloat16|float32|float64  "
    "[float32]\n"
    "  --redop R      sum|prod|min|max|avg (allreduce, reduce_scatter)  [sum]\n"
    "  --iters N      timed iterations per size  [20]\n"
    "  --warmup N     untimed iterations before them  [5]\n";
constexpr const char* kUsageTail =
    "  --check        after the timed iterations run one more op and verify every element\n"
    "  --json FILE    rank 0 writes the rows as JSON, each with \"library\": rcoll, gloo or mpi\n"
    "  --root R       broadcast root  [0]\n"
    "  --inplace      in-place ops (allreduce, allgather; broadcast is always in place)\n"
    "  --memory M     host|cuda: where the op's buffers are; cuda = device memory of GPU\n"
    "                 (RCOLL_LOCAL_RANK mod the GPUs), collectives on NCCL when it is in the\n"
    "                 chain (RCOLL_TRANSPORTS=nccl,tcp), else staged  [host]\n"
    "  --chunk BYTES  Options.chunk_bytes  [chosen by rcoll]\n"
    "  --window N     Options.pipeline_depth, chunks in flight  [chosen by rcoll]\n"
    "  --algo A       auto|ring|direct|hd|rd: Options.allreduce_algorithm  [auto]\n"
    "  --transport T  auto|tcp|ucx, a comma list, or all (every transport built in): with more\n"
    "                 than one, the same sizes run on each in turn and a side-by-side table\n"
    "                 (busbw, time, ratio to the first) follows  [auto: the fallback chain]\n"
    "  --compare LIST gloo, mpi or gloo,mpi (host memory), or nccl (--memory cuda: raw NCCL,\n"
    "                 rcoll-nccl-bench): afterwards rank 0 runs the same ops (of those, the ones\n"
    "                 they measure: allreduce, allgather, reduce_scatter, broadcast), sizes, "
    "iters,\n"
    "                 warmup, root, --time and --check with rcoll-gloo-bench (Gloo over TCP, "
    "under\n"
    "                 rcoll-run) and rcoll-mpi-bench (Open MPI, mpirun --mca btl tcp,self), both\n"
    "                 built next to rcoll-bench, then prints busbw, rcoll/LIB busbw ratios and\n"
    "                 times side by side.\n"
    "                 Needs --dtype float32, --redop sum, one --transport; --inplace, --chunk,\n"
    "                 --window and --algo apply to rcoll only\n"
    "  --compare-dir D   where the baselines' output (NAME.log) and rows (NAME.json) go\n"
    "                 [a temporary directory, removed unless a baseline failed]\n"
    "  --compare-timeout S   seconds each baseline may run before it is stopped  [3600]\n"
    "  --plot FILE    rank 0 draws a PNG with gnuplot: busbw against size, one panel per op, one\n"
    "                 line per library (and per transport)\n"
    "  --help         this text\n"
    "Time: per --time on each rank, max over ranks. GB/s = 1e9 B/s.\n"
    "Exit: 0 ok, 1 wrong results (--check) or --json/--plot not written, 2 bad arguments,\n"
    "3 rcoll error or a --compare baseline failed (its columns show n/a), 77 --memory cuda\n"
    "without a usable GPU (nothing measured). Once measured, rank 0\n"
    "alone goes on (baselines, files, plot) and its exit code is the run's; the others exit 0.\n";

const std::string& usage() {
  static const std::string text = std::string(kUsageHead) + rcoll::bench::kTimingUsage + kUsageTail;
  return text;
}

enum class OpId { kAllreduce, kAllgather, kReduceScatter, kBroadcast, kSendRecv, kBarrier };
constexpr OpId kAllOps[] = {OpId::kAllreduce, OpId::kAllgather, OpId::kReduceScatter,
                            OpId::kBroadcast, OpId::kSendRecv,  OpId::kBarrier};

const char* op_name(OpId op) {
  switch (op) {
    case OpId::kAllreduce: return "allreduce";
    case OpId::kAllgather: return "allgather";
    case OpId::kReduceScatter: return "reduce_scatter";
    case OpId::kBroadcast: return "broadcast";
    case OpId::kSendRecv: return "sendrecv";
    case OpId::kBarrier: return "barrier";
  }
  return "?";
}

bool reduces(OpId op) { return op == OpId::kAllreduce || op == OpId::kReduceScatter; }

struct Config {
  std::vector<OpId> ops{OpId::kAllreduce};
  bool all_ops = false;
  std::vector<uint64_t> sizes = rcoll::bench::parse_sizes("8:64M");
  std::string sizes_text = "8:64M";
  DataType dtype = DataType::kFloat32;
  ReduceOp redop = ReduceOp::kSum;
  int iters = 20;
  int warmup = 5;
  rcoll::bench::Timing timing = rcoll::bench::Timing::kMedian;
  bool check = false;
  std::string json;
  int root = 0;
  bool inplace = false;
  bool device = false;  // --memory cuda
  size_t chunk = 0;
  int window = 0;
  AllreduceAlgorithm algo = AllreduceAlgorithm::kAuto;
  std::vector<std::string> transports{"auto"};
  std::vector<std::string> compare;  // baseline libraries, in the order given
  std::string compare_dir;
  int compare_timeout_s = 3600;
  std::string plot;
  bool help = false;

  // Found by check_setup() before anything is measured.
  rcoll::bench::BaselinePrograms baselines;
  std::string gnuplot;
};

int parse_int(const std::string& flag, const std::string& text, int lo, int hi) {
  uint64_t v = rcoll::bench::parse_count(flag, text);
  if (v < static_cast<uint64_t>(lo) || v > static_cast<uint64_t>(hi)) {
    throw UsageError(flag + " " + text + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int>(v);
}

// What the baselines can measure the same way as rcoll.
void check_compare(const Config& c) {
  if (c.transports.size() > 1) {
    std::string list;
    for (const auto& t : c.transports) list += (list.empty() ? "" : ",") + t;
    throw UsageError("--compare measures rcoll on one transport, not " + std::to_string(c.transports.size()) +
                     " (--transport " + list + ")");
  }
  if (c.dtype != DataType::kFloat32) {
    throw UsageError(std::string("--compare: the baselines measure float32 only, not --dtype ") + rcoll::to_string(c.dtype));
  }
  bool any = false, any_reduces = false;
  for (OpId op : c.ops) {
    any = any || rcoll::bench::baseline_measures(op_name(op));
    any_reduces = any_reduces || reduces(op);
  }
  if (!any) {
    throw UsageError(std::string("--compare: the baselines do not measure ") + op_name(c.ops.front()) +
                     " (they measure allreduce, allgather, reduce_scatter, broadcast)");
  }
  if (any_reduces && c.redop != ReduceOp::kSum) {
    throw UsageError(std::string("--compare: the baselines reduce with sum only, not --redop ") + rcoll::to_string(c.redop));
  }
  for (const auto& lib : c.compare) {
    if ((lib == "nccl") != c.device) {
      throw UsageError("--compare " + lib + " measures " + (lib == "nccl" ? "device" : "host") + " buffers: " +
                       (c.device ? "drop --memory cuda" : "add --memory cuda"));
    }
  }
}

Config parse_args(int argc, char** argv) {
  Config c;
  rcoll::bench::ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& f = args.flag();
    if (f == "--help") {
      c.help = true;
    } else if (f == "--op") {
      std::string v = args.value();
      c.all_ops = v == "all";
      c.ops.clear();
      for (OpId op : kAllOps)
        if (c.all_ops || v == op_name(op)) c.ops.push_back(op);
      if (c.ops.empty()) throw UsageError("--op: unknown op '" + v + "' (allreduce|allgather|reduce_scatter|broadcast|sendrecv|barrier|all)");
    } else if (f == "--sizes") {
      c.sizes_text = args.value();
      c.sizes = rcoll::bench::parse_sizes(c.sizes_text);
    } else if (f == "--dtype") {
      std::string v = args.value();
      auto d = rcoll::parse_data_type(v);
      if (!d) throw UsageError("--dtype: unknown type '" + v + "'");
      c.dtype = *d;
    } else if (f == "--redop") {
      std::string v = args.value();
      auto r = rcoll::parse_reduce_op(v);
      if (!r) throw UsageError("--redop: unknown reduce op '" + v + "' (sum|prod|min|max|avg)");
      c.redop = *r;
    } else if (f == "--iters") {
      c.iters = parse_int(f, args.value(), 1, 1 << 30);
    } else if (f == "--warmup") {
      c.warmup = parse_int(f, args.value(), 0, 1 << 30);
    } else if (f == "--time") {
      c.timing = rcoll::bench::parse_timing(args.value());
    } else if (f == "--check") {
      c.check = true;
    } else if (f == "--json") {
      c.json = args.value();
      if (c.json.empty()) throw UsageError("--json needs a file name");
    } else if (f == "--root") {
      c.root = parse_int(f, args.value(), 0, 1 << 20);
    } else if (f == "--inplace") {
      c.inplace = true;
    } else if (f == "--chunk") {
      std::string v = args.value();
      auto b = rcoll::bench::parse_bytes(v);
      if (!b || *b > (uint64_t{1} << 32)) throw UsageError("--chunk: '" + v + "' is not a size up to 4G (examples: 64K, 1M)");
      c.chunk = static_cast<size_t>(*b);
    } else if (f == "--window") {
      c.window = parse_int(f, args.value(), 1, 1 << 16);
    } else if (f == "--algo") {
      std::string v = args.value();
      if (v == "auto") c.algo = AllreduceAlgorithm::kAuto;
      else if (v == "ring") c.algo = AllreduceAlgorithm::kRing;
      else if (v == "direct") c.algo = AllreduceAlgorithm::kDirect;
      else if (v == "hd") c.algo = AllreduceAlgorithm::kHalvingDoubling;
      else if (v == "rd") c.algo = AllreduceAlgorithm::kRecursiveDoubling;
      else throw UsageError("--algo: unknown algorithm '" + v + "' (auto|ring|direct|hd|rd)");
    } else if (f == "--transport") {
      std::string v = args.value();
      c.transports.clear();
      if (v == "all") {
        for (const auto& t : rcoll::available_transports())
          if (t != "nccl") c.transports.push_back(t);
      } else {
        for (const std::string& t : split_list(v)) {
          const auto built = rcoll::available_transports();
          if (t != "auto" && std::find(built.begin(), built.end(), t) == built.end()) {
            std::string list;
            for (const auto& b : built) list += " " + b;
            throw UsageError("--transport: '" + t + "' is not auto or a transport built into this rcoll (built:" + list + ")");
          }
          c.transports.push_back(t);
        }
      }
    } else if (f == "--compare") {
      c.compare = rcoll::bench::parse_libraries(args.value());
    } else if (f == "--memory") {
      const std::string v = args.value();
      if (v != "host" && v != "cuda") throw UsageError("--memory: '" + v + "' is not host or cuda");
      c.device = v == "cuda";
#if !RCOLL_BENCH_CUDA
      if (c.device) throw UsageError("--memory cuda: this rcoll-bench was built without CUDA");
#endif
    } else if (f == "--compare-dir") {
      c.compare_dir = args.value();
      if (c.compare_dir.empty()) throw UsageError("--compare-dir needs a directory");
    } else if (f == "--compare-timeout") {
      c.compare_timeout_s = parse_int(f, args.value(), 1, 1 << 24);
    } else if (f == "--plot") {
      c.plot = args.value();
      if (c.plot.empty()) throw UsageError("--plot needs a file name");
    } else {
      args.unknown();
    }
  }
  if (c.redop == ReduceOp::kAvg && !rcoll::is_floating(c.dtype)) {
    throw UsageError(std::string("--redop avg needs a floating --dtype (") + rcoll::to_string(c.dtype) + " would truncate)");
  }
  if (!c.compare.empty()) check_compare(c);
  return c;
}

// The programs --compare and --plot start, and a --compare-dir to write in.
// Throws UsageError naming what is missing.
void check_setup(Config& c) {
  if (!c.compare.empty()) c.baselines = rcoll::bench::find_baseline_programs(c.compare);
  if (!c.compare_dir.empty() && ::mkdir(c.compare_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw UsageError("--compare-dir " + c.compare_dir + ": cannot create it: " + std::strerror(errno));
  }
  if (!c.compare_dir.empty() && ::access(c.compare_dir.c_str(), W_OK | X_OK) != 0) {
    throw UsageError("--compare-dir " + c.compare_dir + ": cannot write in it: " + std::strerror(errno));
  }
  if (!c.plot.empty()) {
    c.gnuplot = rcoll::bench::find_on_path("gnuplot");
    if (c.gnuplot.empty()) throw UsageError("--plot needs gnuplot (Debian package gnuplot-nox)");
  }
}

// ------------------------------------------------------------ typed helpers

template <typename F>
decltype(auto) with_dtype(DataType d, F&& f) {
  switch (d) {
    case DataType::kInt8: return f.template operator()<int8_t>();
    case DataType::kUint8: return f.template operator()<uint8_t>();
    case DataType::kInt32: return f.template operator()<int32_t>();
    case DataType::kUint32: return f.template operator()<uint32_t>();
    case DataType::kInt64: return f.template operator()<int64_t>();
    case DataType::kUint64: return f.template operator()<uint64_t>();
    case DataType::kFloat16: return f.template operator()<rcoll::float16>();
    case DataType::kBfloat16: return f.template operator()<rcoll::bfloat16>();
    case DataType::kFloat32: return f.template operator()<float>();
    case DataType::kFloat64: return f.template operator()<double>();
  }
  return f.template operator()<float>();
}

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, rcoll::float16> || std::is_same_v<T, rcoll::bfloat16>) {
    return rcoll::to_float(v);
  } else {
    return static_cast<double>(v);
  }
}

// Integers narrow modulo 2^bits (C++20), as the library's wrapping kernels do.
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, rcoll::float16>) {
    return rcoll::to_float16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, rcoll::bfloat16>) {
    return rcoll::to_bfloat16(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<int64_t>(std::llround(v)));
  } else {
    return static_cast<T>(v);
  }
}

// Relative tolerance of avg (a division rounds); every other result is exact.
double avg_tolerance(DataType d) {
  switch (d) {
    case DataType::kFloat16: return 4e-3;
    case DataType::kBfloat16: return 3e-2;
    case DataType::kFloat32: return 1e-6;
    default: return 1e-12;
  }
}

Reduction reduction_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return Reduction::kSum;
    case ReduceOp::kProd: return Reduction::kProd;
    case ReduceOp::kMin: return Reduction::kMin;
    case ReduceOp::kMax: return Reduction::kMax;
    case ReduceOp::kAvg: return Reduction::kAvg;
  }
  return Reduction::kSum;
}

// Page-aligned host memory, touched once so that first-use page faults stay
// out of the measurement.
class HostBuffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    ptr_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, rounded)));
    if (!ptr_) throw std::bad_alloc();
    std::memset(ptr_.get(), 0, bytes);
  }
  std::byte* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> ptr_;
  size_t bytes_;
};

// Device memory mirroring a HostBuffer (--memory cuda): the host side is
// filled and checked, the device side is what the ops run on.
class DeviceMirror {
 public:
  explicit DeviceMirror(size_t bytes) : bytes_(bytes) {
#if RCOLL_BENCH_CUDA
    if (cudaError_t e = cudaMalloc(&p_, std::max<size_t>(bytes, 1)); e != cudaSuccess) {
      throw std::runtime_error(std::string("cudaMalloc of ") + std::to_string(bytes) + " bytes: " + cudaGetErrorName(e));
    }
#endif
  }
  ~DeviceMirror() {
#if RCOLL_BENCH_CUDA
    cudaFree(p_);
#endif
  }
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(p_); }
  void upload(const std::byte* host) { copy(p_, host, true); }
  void download(std::byte* host) const { copy(host, p_, false); }

 private:
  void copy(void* dst, const void* src, bool up) const {
#if RCOLL_BENCH_CUDA
    if (bytes_ == 0) return;
    if (cudaError_t e = cudaMemcpy(dst, src, bytes_, up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost); e != cudaSuccess) {
      throw std::runtime_error(std::string("cudaMemcpy: ") + cudaGetErrorName(e));
    }
#endif
  }
  void* p_ = nullptr;
  size_t bytes_;
};

// ------------------------------------------------------------ the benchmark

// Buffers and sizes of one op at one requested size.
struct Layout {
  uint64_t size = 0;       // reported bytes (rounded down to whole elements per rank)
  uint64_t count = 0;      // reported elements
  size_t in_count = 0;     // elements of the input buffer
  size_t out_count = 0;    // elements of the output buffer (0: in place, one buffer)
};

class Bench {
 public:
  Bench(rcoll::Communicator& comm, const Config& cfg)
      : comm_(comm), cfg_(cfg), rank_(comm.rank()), n_(comm.size()), es_(rcoll::size_of(cfg.dtype)) {}

  Row run(OpId op, uint64_t size);

 private:
  Layout layout(OpId op, uint64_t size) const;
  void setup(OpId op, const Layout& l);
  void run_once(OpId op);
  uint64_t check(OpId op);
  void fill_inputs(OpId op);

  int salt(OpId op) const { return static_cast<int>(op) + 1; }
  Reduction red(OpId op) const { return reduces(op) ? reduction_of(cfg_.redop) : Reduction::kSum; }
  bool is_unsigned() const {
    return cfg_.dtype == DataType::kUint8 || cfg_.dtype == DataType::kUint32 || cfg_.dtype == DataType::kUint64;
  }
  double pattern(OpId op, int r, uint64_t i) const {
    return static_cast<double>(rcoll::bench::pattern_value(r, i, salt(op), red(op), is_unsigned()));
  }
  double reduced(OpId op, uint64_t i) const {
    auto v = static_cast<double>(rcoll::bench::reduce_pattern(n_, i, salt(op), red(op), is_unsigned()));
    return red(op) == Reduction::kAvg ? v / n_ : v;
  }
  Buffer buf(void* p, size_t count) const {
    return Buffer{p, count, cfg_.dtype, cfg_.device ? rcoll::MemoryKind::kCuda : rcoll::MemoryKind::kHost};
  }
  std::byte* elem(const HostBuffer& b, size_t i) const { return b.data() + i * es_; }
  // What the ops run on: the host buffers, or (--memory cuda) their device mirrors.
  std::byte* a() const { return cfg_.device ? da_->data() : a_->data(); }
  std::byte* b() const { return cfg_.device ? db_->data() : b_->data(); }
  void upload() {
    if (!cfg_.device) return;
    da_->upload(a_->data());
    db_->upload(b_->data());
  }
  void download() {
    if (!cfg_.device) return;
    da_->download(a_->data());
    db_->download(b_->data());
  }

  template <typename F>
  void fill(void* p, size_t count, F value_of);
  template <typename F>
  uint64_t verify(OpId op, const void* p, size_t count, F want_of);

  rcoll::Communicator& comm_;
  const Config& cfg_;
  const int rank_, n_;
  const size_t es_;
  Layout l_;
  std::unique_ptr<HostBuffer> a_, b_;  // input (or the one buffer) and output
  std::unique_ptr<DeviceMirror> da_, db_;
};

Layout Bench::layout(OpId op, uint64_t size) const {
  Layout l;
  const uint64_t n = static_cast<uint64_t>(n_);
  switch (op) {
    case OpId::kAllreduce:
    case OpId::kBroadcast:
    case OpId::kSendRecv:
      l.count = size / es_;
      l.size = l.count * es_;
      l.in_count = l.count;
      l.out_count = op == OpId::kBroadcast || (op == OpId::kAllreduce && cfg_.inplace) ? 0 : l.count;
      break;
    case OpId::kAllgather:  // size = output bytes; count = elements per rank
      l.count = size / es_ / n;
      l.size = l.count * n * es_;
      l.in_count = cfg_.inplace ? 0 : l.count;
      l.out_count = l.count * n;
      break;
    case OpId::kReduceScatter:  // size = input bytes; count = elements per rank
      l.count = size / es_ / n;
      l.size = l.count * n * es_;
      l.in_count = l.count * n;
      l.out_count = l.count;
      break;
    case OpId::kBarrier: break;
  }
  return l;
}

template <typename F>
void Bench::fill(void* p, size_t count, F value_of) {
  with_dtype(cfg_.dtype, [&]<typename T>() {
    T* v = static_cast<T*>(p);
    for (size_t i = 0; i < count; ++i) v[i] = from_double<T>(value_of(i));
  });
}

// Compares element i with want_of(i) narrowed to the dtype; prints the first
// few mismatches of this rank on stderr. Returns the number of wrong elements.
template <typename F>
uint64_t Bench::verify(OpId op, const void* p, size_t count, F want_of) {
  const double tol = red(op) == Reduction::kAvg ? avg_tolerance(cfg_.dtype) : 0;
  return with_dtype(cfg_.dtype, [&]<typename T>() {
    const T* v = static_cast<const T*>(p);
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      const double want = to_double(from_double<T>(want_of(i)));
      const double got = to_double(v[i]);
      const bool ok = tol == 0 ? got == want : std::fabs(got - want) <= tol * (std::fabs(want) + 1);
      if (!ok && ++wrong <= 5) {
        std::fprintf(stderr, "rcoll-bench: rank %d: %s of %llu bytes: element %zu is %g, expected %g\n", rank_,
                     op_name(op), static_cast<unsigned long long>(l_.size), i, got, want);
      }
    }
    return wrong;
  });
}

void Bench::setup(OpId op, const Layout& l) {
  l_ = l;
  a_.reset();
  b_.reset();
  da_.reset();
  db_.reset();
  a_ = std::make_unique<HostBuffer>(l.in_count * es_);
  b_ = std::make_unique<HostBuffer>(l.out_count * es_);
  if (cfg_.device) {
    da_ = std::make_unique<DeviceMirror>(l.in_count * es_);
    db_ = std::make_unique<DeviceMirror>(l.out_count * es_);
  }
  fill_inputs(op);
  upload();
}

// The --check pattern in every input (the timed ops run on it too, so they
// see ordinary small values, never NaN or denormals).
void Bench::fill_inputs(OpId op) {
  const size_t c = l_.count;
  switch (op) {
    case OpId::kAllreduce:
    case OpId::kSendRecv:
      fill(a_->data(), c, [&](size_t i) { return pattern(op, rank_, i); });
      break;
    case OpId::kBroadcast:
      if (rank_ == cfg_.root) fill(a_->data(), c, [&](size_t i) { return pattern(op, rank_, i); });
      break;
    case OpId::kAllgather: {
      void* mine = cfg_.inplace ? elem(*b_, static_cast<size_t>(rank_) * c) : a_->data();
      fill(mine, c, [&](size_t i) { return pattern(op, rank_, i); });
      break;
    }
    case OpId::kReduceScatter:
      fill(a_->data(), c * static_cast<size_t>(n_), [&](size_t i) { return pattern(op, rank_, i); });
      break;
    case OpId::kBarrier: break;
  }
}

void Bench::run_once(OpId op) {
  const size_t c = l_.count;
  switch (op) {
    case OpId::kAllreduce: {
      Buffer in = buf(a(), c);
      comm_.allreduce(in, cfg_.inplace ? in : buf(b(), c), cfg_.redop);
      break;
    }
    case OpId::kAllgather: {
      Buffer out = buf(b(), c * static_cast<size_t>(n_));
      comm_.allgather(cfg_.inplace ? buf(b() + static_cast<size_t>(rank_) * c * es_, c) : buf(a(), c), out);
      break;
    }
    case OpId::kReduceScatter:
      // rcoll needs separate input and output here, so --inplace does not apply.
      comm_.reduce_scatter(buf(a(), c * static_cast<size_t>(n_)), buf(b(), c), cfg_.redop);
      break;
    case OpId::kBroadcast:
      comm_.broadcast(buf(a(), c), cfg_.root);
      break;
    case OpId::kSendRecv: {
      // Ops on one communicator run one at a time, in issue order, and a send
      // completes only once the socket took its bytes; if every rank sent first,
      // large messages would fill the socket buffers and deadlock. Even ranks
      // send first, odd ranks receive first: the ring always has a receiver.
      const int right = (rank_ + 1) % n_, left = (rank_ - 1 + n_) % n_;
      Buffer send = buf(a(), c), recv = buf(b(), c);
      rcoll::Work w1, w2;
      if (rank_ % 2 == 0) {
        w1 = comm_.send_async(send, right);
        w2 = comm_.recv_async(recv, left);
      } else {
        w1 = comm_.recv_async(recv, left);
        w2 = comm_.send_async(send, right);
      }
      rcoll::throw_if_error(w1.wait());
      rcoll::throw_if_error(w2.wait());
      break;
    }
    case OpId::kBarrier:
      comm_.barrier();
      break;
  }
}

// Refills the inputs, poisons every output element with (expected + 1), runs
// the op once more and counts the elements that differ from the reference.
uint64_t Bench::check(OpId op) {
  const size_t c = l_.count;
  const size_t n = static_cast<size_t>(n_);
  const int left = (rank_ - 1 + n_) % n_;
  auto gathered = [&](size_t j) { return pattern(op, static_cast<int>(j / std::max<size_t>(c, 1)), j % std::max<size_t>(c, 1)); };
  auto scattered = [&](size_t i) { return reduced(op, static_cast<uint64_t>(rank_) * c + i); };
  auto root_data = [&](size_t i) { return pattern(op, cfg_.root, i); };
  auto from_left = [&](size_t i) { return pattern(op, left, i); };
  auto all = [&](size_t i) { return reduced(op, i); };
  auto plus1 = [](auto f) { return [f](size_t i) { return f(i) + 1; }; };

  switch (op) {
    case OpId::kAllreduce:
      if (cfg_.inplace) {
        fill_inputs(op);
      } else {
        fill(b_->data(), c, plus1(all));
      }
      break;
    case OpId::kAllgather:
      fill(b_->data(), c * n, plus1(gathered));
      fill_inputs(op);
      break;
    case OpId::kReduceScatter: fill(b_->data(), c, plus1(scattered)); break;
    case OpId::kBroadcast:
      if (rank_ == cfg_.root) {
        fill_inputs(op);
      } else {
        fill(a_->data(), c, plus1(root_data));
      }
      break;
    case OpId::kSendRecv: fill(b_->data(), c, plus1(from_left)); break;
    case OpId::kBarrier: return 0;
  }
  upload();
  comm_.barrier();
  run_once(op);
  download();
  switch (op) {
    case OpId::kAllreduce: return verify(op, (cfg_.inplace ? a_ : b_)->data(), c, all);
    case OpId::kAllgather: return verify(op, b_->data(), c * n, gathered);
    case OpId::kReduceScatter: return verify(op, b_->data(), c, scattered);
    case OpId::kBroadcast: return verify(op, a_->data(), c, root_data);
    case OpId::kSendRecv: return verify(op, b_->data(), c, from_left);
    case OpId::kBarrier: break;
  }
  return 0;
}

Row Bench::run(OpId op, uint64_t size) {
  setup(op, layout(op, size));
  comm_.barrier();
  double time_us = rcoll::bench::time_per_op(
      cfg_.timing, cfg_.warmup, cfg_.iters, [&] { run_once(op); }, [this] { comm_.barrier(); });
  comm_.allreduce(Buffer{&time_us, 1, DataType::kFloat64}, ReduceOp::kMax);

  int64_t wrong = cfg_.check ? static_cast<int64_t>(check(op)) : 0;
  if (cfg_.check) comm_.allreduce(Buffer{&wrong, 1, DataType::kInt64}, ReduceOp::kSum);

  Row row;
  row.op = op_name(op);
  row.size = l_.size;
  row.count = l_.count;
  row.dtype = op == OpId::kBarrier ? "-" : rcoll::to_string(cfg_.dtype);
  row.redop = reduces(op) ? rcoll::to_string(cfg_.redop) : "none";
  row.root = op == OpId::kBroadcast ? cfg_.root : -1;
  row.time_us = time_us;
  row.wrong = static_cast<uint64_t>(wrong);
  const rcoll::Counters counters = comm_.counters();
  row.transport = !cfg_.device || op == OpId::kBarrier ? counters.transport
                  : counters.device_transport == "nccl" && op != OpId::kSendRecv ? "nccl"
                                                                                 : counters.transport + "/staged";
  row.library = "rcoll";
  rcoll::bench::set_bandwidth(row, n_);
  a_.reset();
  b_.reset();
  da_.reset();
  db_.reset();
  return row;
}

std::string describe_sizes(const Config& c) {
  if (c.sizes.empty()) return "none";
  return c.sizes_text + " (" + std::to_string(c.sizes.size()) + " sizes, " + std::to_string(c.sizes.front()) + " .. " +
         std::to_string(c.sizes.back()) + " B)";
}

std::string auto_or(uint64_t v) { return v ? std::to_string(v) : "auto"; }

// Runs every op and size on one transport. Rank 0 appends its rows to `rows`.
// What a run over several transports writes in its one JSON file, and who reports it.
struct RunTotals {
  uint64_t recoveries = 0;
  uint64_t fallbacks = 0;
  int ranks = 0;
  int rank = 0;
};

int run_one(const Config& cfg, const std::string& transport_choice, std::vector<Row>* rows, RunTotals* totals) {
  rcoll::Options options;
  options.transport = transport_choice;
  options.name = "bench-" + transport_choice;
  options.chunk_bytes = cfg.chunk;
  options.pipeline_depth = cfg.window;
  options.allreduce_algorithm = cfg.algo;
#if RCOLL_BENCH_CUDA
  if (cfg.device) {
    // One GPU per local rank where there are enough; ranks share them round robin otherwise.
    int devices = 0;
    if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
      throw std::runtime_error(std::string("--memory cuda: no usable CUDA device (") +
                               (e != cudaSuccess ? cudaGetErrorName(e) : "none") + ")");
    }
    const char* local = std::getenv("RCOLL_LOCAL_RANK");
    if (cudaError_t e = cudaSetDevice((local ? std::atoi(local) : 0) % devices); e != cudaSuccess) {
      throw std::runtime_error(std::string("cudaSetDevice: ") + cudaGetErrorName(e));
    }
    // As rcoll-nccl-bench does, so the two are compared on the same NCCL transport.
    const char* rank = std::getenv("RCOLL_RANK");
    const char* local_size = std::getenv("RCOLL_LOCAL_WORLD_SIZE");
    rcoll::nccl::one_host_per_rank_if_sharing("rcoll-bench", rank ? std::atoi(rank) : 0,
                                              local_size ? std::atoi(local_size) : 1, devices);
  }
#endif
  rcoll::Communicator comm = rcoll::Communicator::create(options);
  const int rank = comm.rank(), n = comm.size();
  const bool leader = rank == 0;
  totals->rank = rank;

  // Arguments that depend on the world size: every rank sees the same ones and
  // fails the same way.
  std::vector<OpId> ops = cfg.ops;
  std::vector<std::string> notes;
  if (cfg.root >= n) {
    if (leader)
      std::fprintf(stderr, "rcoll-bench: --root %d is not a rank (0..%d)\n%s", cfg.root, n - 1,
                   usage().c_str());
    comm.barrier();  // so that the launcher does not stop rank 0 before it has said why
    return 2;
  }
  if (n < 2) {
    if (!cfg.all_ops && ops.front() == OpId::kSendRecv) {
      if (leader) std::fprintf(stderr, "rcoll-bench: --op sendrecv needs at least 2 ranks (start with rcoll-run -n N)\n");
      return 2;
    }
    std::erase(ops, OpId::kSendRecv);
    if (cfg.all_ops) notes.push_back("sendrecv skipped: it needs at least 2 ranks");
  }
  if (cfg.inplace && std::find(ops.begin(), ops.end(), OpId::kReduceScatter) != ops.end()) {
    notes.push_back("reduce_scatter runs out of place: rcoll requires separate input and output for it");
  }
  // An unwritable --json or --plot file is a bad argument; find out before measuring.
  int32_t files_ok = 1;
  for (const auto& [flag, path] : {std::pair{"--json", &cfg.json}, std::pair{"--plot", &cfg.plot}}) {
    if (!leader || path->empty()) continue;
    FILE* f = std::fopen(path->c_str(), "a");
    if (f == nullptr) {
      std::fprintf(stderr, "rcoll-bench: cannot write %s file '%s': %s\n", flag, path->c_str(), std::strerror(errno));
      files_ok = 0;
    } else {
      std::fclose(f);
    }
  }
  comm.broadcast(Buffer{&files_ok, 1, DataType::kInt32}, 0);
  if (!files_ok) return 2;

  const std::string transport = comm.counters().transport;
  rcoll::bench::Report report(false, cfg.check, cfg.timing);
  if (leader) {
    std::string op_list;
    for (OpId op : ops) op_list += std::string(op_list.empty() ? "" : ",") + op_name(op);
    std::vector<std::string> pre = {
        std::string("rcoll-bench  rcoll ") + rcoll::version_string(),
        "ranks: " + std::to_string(n) + "  transport: " + transport + "  ops: " + op_list,
        "sizes: " + describe_sizes(cfg) + "  dtype: " + rcoll::to_string(cfg.dtype) +
            "  redop: " + rcoll::to_string(cfg.redop) + "  root: " + std::to_string(cfg.root),
        "warmup: " + std::to_string(cfg.warmup) + "  iters: " + std::to_string(cfg.iters) +
            "  check: " + (cfg.check ? "on" : "off") + "  " +
            (cfg.inplace ? "in-place" : "out-of-place"),
        "options: chunk_bytes " + auto_or(cfg.chunk) + "  pipeline_depth " +
            auto_or(static_cast<uint64_t>(cfg.window)) + "  allreduce_algorithm " +
            (cfg.algo == AllreduceAlgorithm::kRing                ? "ring"
             : cfg.algo == AllreduceAlgorithm::kDirect            ? "direct"
             : cfg.algo == AllreduceAlgorithm::kHalvingDoubling   ? "hd"
             : cfg.algo == AllreduceAlgorithm::kRecursiveDoubling ? "rd"
                                                                  : "auto"),
        std::string("time: ") + rcoll::bench::describe(cfg.timing) +
            ", max over ranks; busbw as in nccl-tests"};
    for (const auto& note : notes) pre.push_back("note: " + note);
    report.print_header(pre);
  }

  Bench bench(comm, cfg);
  for (OpId op : ops) {
    if (op == OpId::kBarrier) {
      Row row = bench.run(op, 0);
      if (leader) report.add(std::move(row));
      continue;
    }
    for (uint64_t size : cfg.sizes) {
      Row row = bench.run(op, size);
      if (leader) report.add(std::move(row));
    }
  }

  // Every rank learns the total of wrong elements (each row's count is already summed over ranks).
  uint64_t wrong = 0;
  for (const auto& r : report.rows()) wrong += r.wrong;
  int64_t any_wrong = static_cast<int64_t>(wrong);
  comm.broadcast(Buffer{&any_wrong, 1, DataType::kInt64}, 0);

  const rcoll::Counters counters = comm.counters();
  int rc = any_wrong ? 1 : 0;
  if (leader) {
    report.print_footer(counters.recoveries, counters.fallbacks, n, counters.transport);
    rows->insert(rows->end(), report.rows().begin(), report.rows().end());
    totals->recoveries += counters.recoveries;
    totals->fallbacks += counters.fallbacks;
    totals->ranks = n;
  }
  // Ranks with nothing to print wait for rank 0: a launcher stops every rank
  // once one exits non-zero, which must not cut the table short.
  comm.barrier();
  comm.close();
  return rc;
}

// One line per op and size: each transport's busbw and time, and its busbw
// (or, for ops without a bandwidth, its speed) relative to the first transport.
void print_side_by_side(const Config& cfg, const std::vector<Row>& rows) {
  const auto& ts = cfg.transports;
  std::printf("# side by side (same sizes, one transport after the other in this run)\n");
  std::printf("# %14s %12s", "op", "size (B)");
  for (const auto& t : ts) std::printf(" %10s GB/s %10s us", t.c_str(), t.c_str());
  for (size_t i = 1; i < ts.size(); ++i) std::printf(" %12s", (ts[i] + "/" + ts[0]).c_str());
  std::printf("\n");
  // Rows of the first transport set the order; the others are found by op and size.
  const size_t per = rows.size() / ts.size();
  for (size_t k = 0; k < per; ++k) {
    const Row& base = rows[k];
    std::printf("  %14s %12llu", base.op.c_str(), static_cast<unsigned long long>(base.size));
    std::vector<const Row*> same;
    for (size_t i = 0; i < ts.size(); ++i) {
      const Row* r = nullptr;
      for (size_t j = i * per; j < (i + 1) * per && j < rows.size(); ++j) {
        if (rows[j].op == base.op && rows[j].size == base.size) r = &rows[j];
      }
      same.push_back(r);
      if (r) {
        std::printf(" %15.3f %13.2f", r->busbw, r->time_us);
      } else {
        std::printf(" %15s %13s", "-", "-");
      }
    }
    for (size_t i = 1; i < ts.size(); ++i) {
      if (!same[i] || !same[0] || same[i]->time_us <= 0) {
        std::printf(" %12s", "-");
      } else {
        // time ratio inverted: > 1 means faster than the first, for every op.
        std::printf(" %12.2f", same[0]->time_us / same[i]->time_us);
      }
    }
    std::printf("\n");
  }
  std::printf("# ratio = time on the first transport / time on this one (> 1: faster)\n#\n");
  std::fflush(stdout);
}

rcoll::bench::CompareOptions compare_options(const Config& cfg, int ranks) {
  rcoll::bench::CompareOptions o;
  o.libraries = cfg.compare;
  o.programs = cfg.baselines;
  o.ranks = ranks;
  o.op = cfg.all_ops ? "all" : op_name(cfg.ops.front());
  o.sizes = cfg.sizes_text;
  o.iters = cfg.iters;
  o.warmup = cfg.warmup;
  o.root = cfg.root;
  o.timing = cfg.timing;
  o.check = cfg.check;
  o.dir = cfg.compare_dir;
  o.timeout = std::chrono::seconds(cfg.compare_timeout_s);
  return o;
}

int run_bench(const Config& cfg) {
  std::vector<Row> rows;
  RunTotals totals;
  int rc = 0;
  for (const auto& t : cfg.transports) {
    const int one = run_one(cfg, t, &rows, &totals);
    if (one == 2 || one == 3) return one;
    rc = std::max(rc, one);
  }
  // Every communicator is closed. Rank 0 alone goes on (the baselines, the
  // files) and its exit code is the run's; the others leave the cores to it.
  if (totals.rank != 0) return 0;
  if (cfg.transports.size() > 1 && !rows.empty()) print_side_by_side(cfg, rows);

  if (!cfg.compare.empty()) {
    try {
      const auto baselines = rcoll::bench::run_baselines(compare_options(cfg, totals.ranks));
      rcoll::bench::print_comparison(rows, baselines, cfg.timing);
      for (const auto& b : baselines) {
        rows.insert(rows.end(), b.rows.begin(), b.rows.end());
        if (!b.ok()) rc = 3;
      }
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "rcoll-bench: --compare: %s\n", e.what());
      rc = 3;
    }
  }
  if (!cfg.json.empty()) {
    rcoll::bench::Report all(false, cfg.check, cfg.timing);
    for (const auto& r : rows) all.keep(r);
    try {
      all.write_json(cfg.json, totals.recoveries, totals.fallbacks, totals.ranks);
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "rcoll-bench: %s\n", e.what());
      rc = rc ? rc : 1;
    }
  }
  if (!cfg.plot.empty()) {
    try {
      rcoll::bench::write_plot({cfg.plot, cfg.gnuplot, totals.ranks, rcoll::to_string(cfg.dtype)}, rows);
      std::printf("# plot: %s\n", cfg.plot.c_str());
      std::fflush(stdout);
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "rcoll-bench: %s\n", e.what());
      rc = rc ? rc : 1;
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  try {
    cfg = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "rcoll-bench: %s\n%s", e.what(), usage().c_str());
    return 2;
  }
  if (cfg.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  try {
    check_setup(cfg);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "rcoll-bench: %s\n", e.what());
    return 2;
  }
#if RCOLL_BENCH_CUDA
  int devices = 0;
  if (cfg.device && (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)) {
    std::printf("rcoll-bench: --memory cuda: no usable CUDA device here; nothing measured (exit 77: skipped)\n");
    return 77;
  }
#endif
  try {
    return run_bench(cfg);
  } catch (const rcoll::Error& e) {
    std::fprintf(stderr, "rcoll-bench: %s\n", e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "rcoll-bench: out of memory (try smaller --sizes)\n");
    return 1;
  } catch (const std::exception& e) {  // CUDA errors of --memory cuda
    std::fprintf(stderr, "rcoll-bench: %s\n", e.what());
    return 3;
  }
}
