// Device reduction kernels (kernels/cuda_reduce.h).
//
// One grid-stride kernel per (dtype, op): each thread moves 16 bytes of each
// operand per step (one uint4 load of a, of b, one store of dst), so the loop
// is bound by device memory, not by instruction issue, for every dtype. The
// elements of a 16-byte vector are combined one by one in the compute type
// (float for float16/bfloat16). Buffers that are not 16-byte aligned, and the
// tail after the last whole vector, take the scalar kernel.
//
// Semantics match the host kernels bit for bit: the ops themselves are shared
// (kernels/reduce_ops.h), and float16/bfloat16 are widened to float32,
// combined, and rounded to nearest even once, as on the host.
#include "kernels/cuda_reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cpu_reduce.h"  // supports()
#include "kernels/reduce_ops.h"

namespace rcoll::kernels::cuda {
namespace {

constexpr int kThreads = 512;
constexpr size_t kMaxBlocks = 4096;  // grid-stride beyond: enough to fill any current GPU
constexpr size_t kVectorBytes = sizeof(uint4);

// Storage type S, computed in Traits<S>::C.
template <typename S>
struct Traits {
  using C = S;
  __device__ static C load(S v) { return v; }
  __device__ static S store(C v) { return v; }
};
template <>
struct Traits<__half> {
  using C = float;
  __device__ static C load(__half v) { return __half2float(v); }
  __device__ static __half store(C v) { return __float2half_rn(v); }
};
template <>
struct Traits<__nv_bfloat16> {
  using C = float;
  __device__ static C load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(C v) { return __float2bfloat16_rn(v); }
};

using ops::MaxOp;
using ops::MinOp;
using ops::ProdOp;
using ops::SumOp;

template <typename S, typename Op>
__device__ __forceinline__ S combine(S x, S y) {
  return Traits<S>::store(Op::apply(Traits<S>::load(x), Traits<S>::load(y)));
}

// dst, a and b may alias one another, so no __restrict__: each element is read
// before it is written by the same thread.
template <typename S, typename Op>
__global__ void reduce_vectors(uint4* dst, const uint4* a, const uint4* b, size_t vectors) {
  constexpr int kPer = static_cast<int>(kVectorBytes / sizeof(S));
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride) {
    const uint4 x = a[i];
    const uint4 y = b[i];
    uint4 z;
    const S* xs = reinterpret_cast<const S*>(&x);
    const S* ys = reinterpret_cast<const S*>(&y);
    S* zs = reinterpret_cast<S*>(&z);
#pragma unroll
    for (int k = 0; k < kPer; ++k) zs[k] = combine<S, Op>(xs[k], ys[k]);
    dst[i] = z;
  }
}

template <typename S, typename Op>
__global__ void reduce_elements(S* dst, const S* a, const S* b, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = combine<S, Op>(a[i], b[i]);
  }
}

template <typename S>
__global__ void scale_elements(S* dst, size_t n, int divisor) {
  // Divide, not multiply by 1/divisor: the correctly rounded quotient, as on the host.
  using C = typename Traits<S>::C;
  const C d = C(divisor);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = Traits<S>::store(Traits<S>::load(dst[i]) / d);
  }
}

unsigned blocks_for(size_t items) {
  return static_cast<unsigned>(std::clamp<size_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0; }

Status avg_refused(DataType dtype) {
  return Status(ErrorCode::kInvalidArgument,
                std::string("avg of ") + to_string(dtype) + " is not supported (it would truncate)");
}

Status launch_status(const char* what, DataType dtype, ReduceOp op, size_t count) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status();
  return Status(ErrorCode::kTransport, std::string("CUDA ") + what + " of " + std::to_string(count) + " " +
                                           to_string(dtype) + " (" + to_string(op) +
                                           ") failed to launch: " + cudaGetErrorName(err) + ": " +
                                           cudaGetErrorString(err));
}

template <typename S, typename Op>
Status run(void* dst, const void* a, const void* b, size_t n, cudaStream_t stream, DataType dtype, ReduceOp op) {
  auto* d = static_cast<S*>(dst);
  const auto* x = static_cast<const S*>(a);
  const auto* y = static_cast<const S*>(b);
  constexpr size_t kPer = kVectorBytes / sizeof(S);
  size_t done = 0;
  if (aligned(d) && aligned(x) && aligned(y)) {
    const size_t vectors = n / kPer;
    if (vectors > 0) {
      reduce_vectors<S, Op><<<blocks_for(vectors), kThreads, 0, stream>>>(
          reinterpret_cast<uint4*>(d), reinterpret_cast<const uint4*>(x), reinterpret_cast<const uint4*>(y), vectors);
    }
    done = vectors * kPer;
  }
  if (done < n) {
    reduce_elements<S, Op><<<blocks_for(n - done), kThreads, 0, stream>>>(d + done, x + done, y + done, n - done);
  }
  return launch_status("reduction", dtype, op, n);
}

template <typename S>
Status run_op(ReduceOp op, void* dst, const void* a, const void* b, size_t n, cudaStream_t s, DataType dtype) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // the sum half of avg; scale_avg does the division
      return run<S, SumOp>(dst, a, b, n, s, dtype, op);
    case ReduceOp::kProd:
      return run<S, ProdOp>(dst, a, b, n, s, dtype, op);
    case ReduceOp::kMin:
      return run<S, MinOp>(dst, a, b, n, s, dtype, op);
    case ReduceOp::kMax:
      return run<S, MaxOp>(dst, a, b, n, s, dtype, op);
  }
  return Status(ErrorCode::kInvalidArgument, "unknown reduce op " + std::to_string(static_cast<int>(op)));
}

template <typename S>
Status scale(void* dst, size_t n, int divisor, cudaStream_t stream, DataType dtype) {
  scale_elements<S><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<S*>(dst), n, divisor);
  return launch_status("average", dtype, ReduceOp::kAvg, n);
}

}  // namespace

Status reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count, void* stream) {
  if (count == 0) return Status();
  if (!supports(dtype, op)) return avg_refused(dtype);
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DataType::kInt8: return run_op<int8_t>(op, dst, a, b, count, s, dtype);
    case DataType::kUint8: return run_op<uint8_t>(op, dst, a, b, count, s, dtype);
    case DataType::kInt32: return run_op<int32_t>(op, dst, a, b, count, s, dtype);
    case DataType::kUint32: return run_op<uint32_t>(op, dst, a, b, count, s, dtype);
    case DataType::kInt64: return run_op<int64_t>(op, dst, a, b, count, s, dtype);
    case DataType::kUint64: return run_op<uint64_t>(op, dst, a, b, count, s, dtype);
    case DataType::kFloat16: return run_op<__half>(op, dst, a, b, count, s, dtype);
    case DataType::kBfloat16: return run_op<__nv_bfloat16>(op, dst, a, b, count, s, dtype);
    case DataType::kFloat32: return run_op<float>(op, dst, a, b, count, s, dtype);
    case DataType::kFloat64: return run_op<double>(op, dst, a, b, count, s, dtype);
  }
  return Status(ErrorCode::kInvalidArgument, "unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

Status scale_avg(DataType dtype, void* dst, size_t count, int divisor, void* stream) {
  if (count == 0) return Status();
  if (divisor <= 0) return Status(ErrorCode::kInvalidArgument, "avg divisor must be positive, got " + std::to_string(divisor));
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DataType::kFloat16: return scale<__half>(dst, count, divisor, s, dtype);
    case DataType::kBfloat16: return scale<__nv_bfloat16>(dst, count, divisor, s, dtype);
    case DataType::kFloat32: return scale<float>(dst, count, divisor, s, dtype);
    case DataType::kFloat64: return scale<double>(dst, count, divisor, s, dtype);
    default:
      return avg_refused(dtype);
  }
}

}  // namespace rcoll::kernels::cuda
