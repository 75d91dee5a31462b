// rcoll-nccl-bench: rcoll-bench's table and JSON for raw NCCL (ncclAllReduce,
// ncclAllGather, ncclReduceScatter, ncclBroadcast) on device buffers, float32
// sum, measured as rcoll-bench --memory cuda measures rcoll: warmup, then
// iterations timed as --time says, each a call plus cudaStreamSynchronize
// (what a blocking rcoll op waits for), max over ranks. So
// `rcoll-bench --memory cuda --compare nccl` gives rcoll's overhead over NCCL
// on the same ranks. One process per rank, under rcoll-run; the unique id goes
// through rcoll-run's store. Processes that share one GPU are separate NCCL
// "hosts" (nccl::one_host_per_rank_if_sharing):
//
//   rcoll-run -n 2 -- rcoll-nccl-bench --op all --sizes 4K:256M --json nccl.json
#include <cuda_runtime.h>
#include <nccl.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/baseline_args.h"
#include "bench/bench_pattern.h"
#include "bench/bench_report.h"
#include "rcoll/store.h"
#include "transports/nccl/nccl_comm.h"

namespace {

using rcoll::bench::BaselineConfig;
using rcoll::bench::Row;
using rcoll::bench::UsageError;

const std::vector<std::string> kOps = {"allreduce", "allgather", "reduce_scatter", "broadcast"};

std::string usage() {
  return "usage: rcoll-run -n N -- rcoll-nccl-bench [options]\n" + rcoll::bench::baseline_usage(kOps) +
         "Ops: ncclAllReduce, ncclAllGather, ncclReduceScatter (out of place), ncclBroadcast (in place).\n"
         "Exit: 0 ok, 1 wrong results (--check), 2 bad arguments, 3 CUDA/NCCL error or no GPU.\n";
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(e));
}
void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + " failed: " + ncclGetErrorString(r));
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

int salt_of(const std::string& op) {
  return op == "allreduce" ? 1 : op == "allgather" ? 2 : op == "reduce_scatter" ? 3 : 4;
}

class NcclBench {
 public:
  NcclBench(const BaselineConfig& cfg, int rank, int size, ncclComm_t comm, cudaStream_t stream)
      : cfg_(cfg), rank_(rank), n_(size), comm_(comm), stream_(stream) {}
  ~NcclBench() {
    release();
    cudaFree(scalar_);
  }
  Row run(const std::string& op, uint64_t size);
  // Max (or sum) over ranks of one host value, through NCCL.
  double reduce_scalar(double v, bool max);

 private:
  void run_once(const std::string& op);
  uint64_t check(const std::string& op);
  void release() {
    cudaFree(din_);
    cudaFree(dout_);
    din_ = dout_ = nullptr;
  }
  float pattern(int salt, int r, uint64_t i) const {
    return static_cast<float>(rcoll::bench::pattern_value(r, i, salt, rcoll::bench::Reduction::kSum, false));
  }
  float reduced(int salt, uint64_t i) const {
    return static_cast<float>(rcoll::bench::reduce_pattern(n_, i, salt, rcoll::bench::Reduction::kSum, false));
  }
  // From pageable memory cudaMemcpy may return before the copy lands, and
  // NCCL reads on a stream of its own: the copy is waited for.
  void upload(float* d, const std::vector<float>& h) {
    cuda_check(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }

  const BaselineConfig& cfg_;
  const int rank_, n_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  size_t count_ = 0;  // per rank for allgather / reduce_scatter, else buffer elements
  size_t in_count_ = 0, out_count_ = 0;
  float* din_ = nullptr;
  float* dout_ = nullptr;
  double* scalar_ = nullptr;  // reduce_scalar's, kept: under --time sync it runs before every op
};

void NcclBench::run_once(const std::string& op) {
  if (op == "allreduce") {
    nccl_check(ncclAllReduce(din_, dout_, count_, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
  } else if (op == "allgather") {
    nccl_check(ncclAllGather(din_, dout_, count_, ncclFloat32, comm_, stream_), "ncclAllGather");
  } else if (op == "reduce_scatter") {
    nccl_check(ncclReduceScatter(din_, dout_, count_, ncclFloat32, ncclSum, comm_, stream_), "ncclReduceScatter");
  } else {
    nccl_check(ncclBroadcast(dout_, dout_, count_, ncclFloat32, cfg_.root, comm_, stream_), "ncclBroadcast");
  }
  cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

double NcclBench::reduce_scalar(double v, bool max) {
  if (scalar_ == nullptr) cuda_check(cudaMalloc(&scalar_, sizeof(double)), "cudaMalloc");
  cuda_check(cudaMemcpy(scalar_, &v, sizeof(double), cudaMemcpyHostToDevice), "cudaMemcpy");
  cuda_check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");  // see upload()
  nccl_check(
      ncclAllReduce(scalar_, scalar_, 1, ncclFloat64, max ? ncclMax : ncclSum, comm_, stream_),
      "ncclAllReduce");
  cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  cuda_check(cudaMemcpy(&v, scalar_, sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return v;
}

// Fresh inputs, outputs poisoned with (expected + 1), one more op, compare.
uint64_t NcclBench::check(const std::string& op) {
  const int salt = salt_of(op);
  const size_t cnt = count_;
  std::vector<float> want(out_count_);
  for (size_t i = 0; i < out_count_; ++i) {
    if (op == "allreduce") want[i] = reduced(salt, i);
    else if (op == "allgather") want[i] = pattern(salt, static_cast<int>(i / cnt), i % cnt);
    else if (op == "reduce_scatter") want[i] = reduced(salt, static_cast<uint64_t>(rank_) * cnt + i);
    else want[i] = pattern(salt, cfg_.root, i);
  }
  std::vector<float> poisoned(want);
  for (size_t i = 0; i < poisoned.size(); ++i)
    if (op != "broadcast" || rank_ != cfg_.root) poisoned[i] += 1;
  upload(dout_, poisoned);
  run_once(op);
  std::vector<float> got(out_count_);
  cuda_check(cudaMemcpy(got.data(), dout_, got.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  uint64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && ++wrong <= 5) {
      std::fprintf(stderr, "rcoll-nccl-bench: rank %d: %s: element %zu is %g, expected %g\n", rank_, op.c_str(), i,
                   static_cast<double>(got[i]), static_cast<double>(want[i]));
    }
  }
  return wrong;
}

Row NcclBench::run(const std::string& op, uint64_t size) {
  const size_t n = static_cast<size_t>(n_);
  const bool per_rank = op == "allgather" || op == "reduce_scatter";
  count_ = per_rank ? size / sizeof(float) / n : size / sizeof(float);
  const size_t total = per_rank ? count_ * n : count_;
  in_count_ = op == "reduce_scatter" ? total : op == "broadcast" ? 0 : count_;
  out_count_ = op == "reduce_scatter" ? count_ : total;
  const int salt = salt_of(op);
  release();
  cuda_check(cudaMalloc(&din_, std::max<size_t>(in_count_, 1) * sizeof(float)), "cudaMalloc");
  cuda_check(cudaMalloc(&dout_, std::max<size_t>(out_count_, 1) * sizeof(float)), "cudaMalloc");
  std::vector<float> in(in_count_);
  for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(salt, rank_, i);
  upload(din_, in);
  std::vector<float> out(out_count_, 0.0f);
  if (op == "broadcast") {
    for (size_t i = 0; i < out.size(); ++i) out[i] = pattern(salt, rank_, i);
  }
  upload(dout_, out);

  reduce_scalar(0, true);  // a barrier
  const double mine = rcoll::bench::time_per_op(
      cfg_.timing, cfg_.warmup, cfg_.iters, [&] { run_once(op); },
      [this] { reduce_scalar(0, true); });
  const double time_us = reduce_scalar(mine, true);
  const auto wrong = cfg_.check ? static_cast<uint64_t>(reduce_scalar(static_cast<double>(check(op)), false)) : 0;

  return rcoll::bench::baseline_row(op, total, count_, cfg_.root, time_us, wrong, "nccl", "nccl", n_);
}

std::shared_ptr<rcoll::Store> connect_store() {
  const char* addr = std::getenv("RCOLL_STORE_ADDR");
  if (addr == nullptr) throw UsageError("RCOLL_STORE_ADDR is not set: start the ranks with rcoll-run");
  const std::string a = addr;
  rcoll::TcpStoreOptions so;
  so.host = a.substr(0, a.rfind(':'));
  so.port = static_cast<uint16_t>(std::atoi(a.c_str() + a.rfind(':') + 1));
  if (const char* token = std::getenv("RCOLL_JOB_TOKEN")) so.token = token;
  return rcoll::connect_tcp_store(so).take();
}

int run_bench(const BaselineConfig& cfg) {
  const int size = env_int("RCOLL_WORLD_SIZE", 1);
  const int rank = env_int("RCOLL_RANK", 0);
  if (cfg.root >= size) throw UsageError("--root " + std::to_string(cfg.root) + " is not a rank");
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    throw std::runtime_error("no usable CUDA device: rcoll-nccl-bench needs a GPU");
  }
  cuda_check(cudaSetDevice(env_int("RCOLL_LOCAL_RANK", 0) % devices), "cudaSetDevice");
  // rcoll-bench --compare's rank 0 has set its own host id: replaced here.
  rcoll::nccl::one_host_per_rank_if_sharing("rcoll-nccl-bench", rank,
                                            env_int("RCOLL_LOCAL_WORLD_SIZE", 1), devices);

  auto store = connect_store();
  ncclUniqueId id;
  if (rank == 0) {
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    rcoll::throw_if_error(store->set("nccl-bench/id", rcoll::Bytes(id.internal, id.internal + sizeof(id.internal))));
  } else {
    rcoll::Bytes got = store->get("nccl-bench/id", std::chrono::seconds(120)).take();
    if (got.size() != sizeof(id.internal)) throw std::runtime_error("malformed NCCL unique id in the store");
    std::memcpy(id.internal, got.data(), sizeof(id.internal));
  }
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  int version = 0;
  ncclGetVersion(&version);

  const bool leader = rank == 0;
  int rc = 0;
  {
    NcclBench bench(cfg, rank, size, comm, stream);
    const double json_bad = leader && !rcoll::bench::json_file_writable(cfg.json, "rcoll-nccl-bench") ? 1 : 0;
    if (bench.reduce_scalar(json_bad, true) > 0) return 2;
    rcoll::bench::Report report(false, cfg.check, cfg.timing);
    if (leader) {
      report.print_header(rcoll::bench::baseline_preamble(
          cfg,
          "rcoll-nccl-bench  NCCL " + std::to_string(version / 10000) + "." +
              std::to_string(version / 100 % 100) + "." + std::to_string(version % 100),
          "ranks: " + std::to_string(size) +
              "  transport: nccl  ops: " + rcoll::bench::op_list(cfg),
          "device buffers", "each op a call + stream synchronize, max over ranks"));
    }
    uint64_t wrong = 0;
    for (const auto& op : cfg.ops) {
      for (uint64_t s : cfg.sizes) {
        Row row = bench.run(op, s);
        wrong += row.wrong;
        if (leader) report.add(std::move(row));
      }
    }
    if (leader) {
      report.print_footer(0, 0, size, "nccl");
      if (!cfg.json.empty()) report.write_json(cfg.json, 0, 0, size);
    }
    bench.reduce_scalar(0, true);  // rank 0's files are written
    rc = wrong ? 1 : 0;
  }
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const bool first = env_int("RCOLL_RANK", 0) == 0;
  BaselineConfig cfg;
  const auto no_extra = [](rcoll::bench::ArgReader&) { return false; };
  if (auto code = rcoll::bench::parse_baseline_or_exit(argc, argv, kOps, no_extra, "rcoll-nccl-bench", usage(), first, &cfg))
    return *code;
  try {
    return run_bench(cfg);
  } catch (const UsageError& e) {
    if (first) std::fprintf(stderr, "rcoll-nccl-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rcoll-nccl-bench: rank %d: %s\n", env_int("RCOLL_RANK", 0), e.what());
    return 3;
  }
}
