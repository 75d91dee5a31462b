// Micro-benchmark of the CPU reduction kernels, with memcpy on the same
// buffers as the baseline.
//
// Two bandwidths are reported for every benchmark:
//   bytes_per_second  memory traffic: memcpy reads src and writes dst (2 x size);
//                     reduce_inplace reads dst and src and writes dst (3 x size).
//                     This is the figure to compare with memcpy.
//   dst_bytes_per_second  size of dst per second, i.e. how fast a buffer of
//                     that size is reduced (or copied).
// Sizes are the size of one buffer (dst or src) in bytes. Rates use CPU time
// (the default), which is steadier than wall time on a shared machine.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/cpu_reduce.h"
#include "rcoll/types.h"

namespace rcoll::kernels {
namespace {

constexpr size_t kAlignment = 64;
constexpr int64_t kSizes[] = {64 << 10, 1 << 20, 16 << 20, 64 << 20};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<unsigned char, FreeDeleter>;

AlignedBytes allocate(size_t bytes) {
  return AlignedBytes(static_cast<unsigned char*>(std::aligned_alloc(kAlignment, bytes)));
}

// Fills a buffer with a value of its type, touching every page before timing.
// dst starts at 1 and src adds 1/1024 per pass: no denormals, no NaN, and the
// 16-bit types saturate at a finite value rather than growing to inf.
void fill(DataType dtype, void* p, size_t bytes, double value) {
  const size_t n = bytes / size_of(dtype);
  auto each = [&](auto v) {
    auto* t = static_cast<decltype(v)*>(p);
    for (size_t i = 0; i < n; ++i) t[i] = v;
  };
  switch (dtype) {
    case DataType::kInt8:
      return each(int8_t(value));
    case DataType::kUint8:
      return each(uint8_t(value));
    case DataType::kInt32:
      return each(int32_t(value));
    case DataType::kUint32:
      return each(uint32_t(value));
    case DataType::kInt64:
      return each(int64_t(value));
    case DataType::kUint64:
      return each(uint64_t(value));
    case DataType::kFloat16:
      return each(to_float16(float(value)));
    case DataType::kBfloat16:
      return each(to_bfloat16(float(value)));
    case DataType::kFloat32:
      return each(float(value));
    case DataType::kFloat64:
      return each(double(value));
  }
}

void set_rates(benchmark::State& state, size_t bytes, int traffic_multiple) {
  const auto iters = int64_t(state.iterations());
  state.SetBytesProcessed(iters * int64_t(bytes) * traffic_multiple);
  state.counters["dst_bytes_per_second"] = benchmark::Counter(
      double(iters) * double(bytes), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void bm_memcpy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0));
  AlignedBytes dst = allocate(bytes), src = allocate(bytes);
  std::memset(dst.get(), 1, bytes);
  std::memset(src.get(), 2, bytes);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, 2);
}

void bm_reduce_inplace(benchmark::State& state, DataType dtype, ReduceOp op, Float16Path f16,
                       Bfloat16Path bf16) {
  pin_float16_path(f16);
  pin_bfloat16_path(bf16);
  const size_t bytes = size_t(state.range(0));
  const size_t count = bytes / size_of(dtype);
  AlignedBytes dst = allocate(bytes), src = allocate(bytes);
  fill(dtype, dst.get(), bytes, 1.0);
  fill(dtype, src.get(), bytes, is_floating(dtype) ? 1.0 / 1024 : 3.0);
  for (auto _ : state) {
    reduce_inplace(dtype, op, dst.get(), src.get(), count);
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, 3);
  pin_float16_path(Float16Path::kBest);
  pin_bfloat16_path(Bfloat16Path::kBest);
}

std::string size_name(int64_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + "MiB"
                            : std::to_string(bytes >> 10) + "KiB";
}

void register_all() {
  struct Kernel {
    DataType dtype;
    ReduceOp op;
  };
  constexpr Kernel kKernels[] = {
      {DataType::kFloat32, ReduceOp::kSum},  {DataType::kFloat32, ReduceOp::kMax},
      {DataType::kFloat16, ReduceOp::kSum},  {DataType::kFloat16, ReduceOp::kMax},
      {DataType::kBfloat16, ReduceOp::kSum}, {DataType::kBfloat16, ReduceOp::kMax},
      {DataType::kInt32, ReduceOp::kSum},    {DataType::kFloat64, ReduceOp::kSum},
  };
  // float16 and bfloat16 also on each slower path the CPU has, pinned (the
  // name says which): float16_sum is the path rcoll takes, float16_sum@f16c
  // the one before it. A pinned path counts only where it computes the op
  // (pinned, kAvx2 leaves a sum to the default path).
  constexpr Float16Path kPinnedF16[] = {Float16Path::kAvx2, Float16Path::kF16c,
                                        Float16Path::kPortable};
  constexpr Bfloat16Path kPinnedBf16[] = {Bfloat16Path::kAvx2, Bfloat16Path::kPortable};
  auto f16_taken = [](Float16Path p, ReduceOp op) {
    pin_float16_path(p);
    std::string name = float16_path_name(op);
    pin_float16_path(Float16Path::kBest);
    return name;
  };
  auto bf16_taken = [](Bfloat16Path p, ReduceOp op) {
    pin_bfloat16_path(p);
    std::string name = bfloat16_path_name(op);
    pin_bfloat16_path(Bfloat16Path::kBest);
    return name;
  };
  // Sizes outermost, so that memcpy and the kernels at one size run together.
  for (int64_t size : kSizes) {
    benchmark::RegisterBenchmark(("memcpy/" + size_name(size)).c_str(), bm_memcpy)->Arg(size);
    for (const Kernel& k : kKernels) {
      const std::string kernel =
          std::string("reduce_inplace/") + to_string(k.dtype) + "_" + to_string(k.op);
      benchmark::RegisterBenchmark((kernel + "/" + size_name(size)).c_str(), bm_reduce_inplace,
                                   k.dtype, k.op, Float16Path::kBest, Bfloat16Path::kBest)
          ->Arg(size);
      if (k.dtype == DataType::kFloat16) {
        for (Float16Path p : kPinnedF16) {
          const std::string name = to_string(p);
          if (f16_taken(p, k.op) != name || name == float16_path_name(k.op)) continue;
          benchmark::RegisterBenchmark((kernel + "@" + name + "/" + size_name(size)).c_str(),
                                       bm_reduce_inplace, k.dtype, k.op, p, Bfloat16Path::kBest)
              ->Arg(size);
        }
      }
      if (k.dtype == DataType::kBfloat16) {
        for (Bfloat16Path p : kPinnedBf16) {
          const std::string name = to_string(p);
          if (bf16_taken(p, k.op) != name || name == bfloat16_path_name(k.op)) continue;
          benchmark::RegisterBenchmark((kernel + "@" + name + "/" + size_name(size)).c_str(),
                                       bm_reduce_inplace, k.dtype, k.op, Float16Path::kBest, p)
              ->Arg(size);
        }
      }
    }
  }
}

}  // namespace
}  // namespace rcoll::kernels

int main(int argc, char** argv) {
  rcoll::kernels::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
