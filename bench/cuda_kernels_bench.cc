// rcoll-cuda-kernels-bench: the CUDA reduction kernels against a device-to-device
// copy on the same GPU in the same run (issue #7's target: at least 85%).
//
//   rcoll-cuda-kernels-bench [--bytes N] [--iters N]
//
// For each dtype x op it times dst = a op b over N bytes per operand and a
// cudaMemcpyAsync of N bytes, each the median of --iters runs timed with CUDA
// events, and prints both as memory traffic (reduce: 3N bytes, copy: 2N) and
// their ratio, and also as dst bytes per second. Exit 0; 77 without a device
// (the reason is printed); 1 on a CUDA error.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_reduce.h"
#include "rcoll/types.h"

namespace {

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "rcoll-cuda-kernels-bench: %s failed: %s: %s\n", #call,            \
                   cudaGetErrorName(e_), cudaGetErrorString(e_));                              \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

template <typename F>
double median_ms(int iters, cudaStream_t stream, F&& body) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) body();  // warm-up
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    body();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{256} << 20;
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--bytes") == 0) {
      bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (std::strcmp(argv[i], "--iters") == 0) {
      iters = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: rcoll-cuda-kernels-bench [--bytes N] [--iters N]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::printf("rcoll-cuda-kernels-bench: skipped: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  char *a = nullptr, *b = nullptr, *dst = nullptr;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMalloc(&dst, bytes));
  CHECK_CUDA(cudaMemset(a, 0, bytes));
  CHECK_CUDA(cudaMemset(b, 0, bytes));

  const double copy_ms = median_ms(iters, stream, [&] {
    CHECK_CUDA(cudaMemcpyAsync(dst, a, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_traffic = 2.0 * static_cast<double>(bytes) / (copy_ms * 1e6);
  std::printf("# %s, %zu bytes per operand, median of %d\n", prop.name, bytes, iters);
  std::printf("# copy (cudaMemcpyAsync D2D): %.3f ms, %.1f GB/s memory traffic (2N)\n", copy_ms, copy_traffic);
  std::printf("%-10s %-5s %10s %14s %12s %14s\n", "dtype", "op", "ms", "traffic GB/s", "vs copy", "dst GB/s");
  using rcoll::DataType;
  using rcoll::ReduceOp;
  const DataType types[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,    DataType::kUint32,
                            DataType::kInt64,   DataType::kUint64,  DataType::kFloat16,  DataType::kBfloat16,
                            DataType::kFloat32, DataType::kFloat64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};
  double worst = 1e9;
  for (DataType d : types) {
    for (ReduceOp op : ops) {
      const size_t count = bytes / rcoll::size_of(d);
      rcoll::Status status;
      const double ms = median_ms(iters, stream, [&] {
        status = rcoll::kernels::cuda::reduce(d, op, dst, a, b, count, stream);
      });
      if (!status.ok()) {
        std::fprintf(stderr, "rcoll-cuda-kernels-bench: %s\n", status.to_string().c_str());
        return 1;
      }
      const double traffic = 3.0 * static_cast<double>(bytes) / (ms * 1e6);
      worst = std::min(worst, traffic / copy_traffic);
      std::printf("%-10s %-5s %10.3f %14.1f %11.2fx %14.1f\n", rcoll::to_string(d), rcoll::to_string(op), ms,
                  traffic, traffic / copy_traffic, static_cast<double>(bytes) / (ms * 1e6));
    }
  }
  std::printf("# lowest reduce/copy memory-traffic ratio: %.2f (target >= 0.85)\n", worst);
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  CHECK_CUDA(cudaFree(dst));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}
