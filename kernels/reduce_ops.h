// The element-wise reduce ops, written once for the host kernels
// (cpu_reduce.cc: scalars and GCC vector types) and the device kernels
// (cuda_reduce.cu), so that both give the same bits:
//   - integer sum and prod are computed in the unsigned type of the same width,
//     so they wrap around (two's complement) without undefined behaviour;
//   - float min/max return NaN when either input is NaN (as NCCL and PyTorch),
//     unlike std::min or the bare minps/maxps instructions.
// kAvg is SumOp; the division comes after (scale_avg).
#pragma once

#include <type_traits>

#if defined(__CUDACC__)
#define RCOLL_REDUCE_OP __host__ __device__ __forceinline__
#else
#define RCOLL_REDUCE_OP [[gnu::always_inline]] inline
#endif

namespace rcoll::kernels::ops {

template <typename T>
RCOLL_REDUCE_OP auto is_nan(T x) {
  if constexpr (std::is_integral_v<T>) {
    return false;
  } else {
    return x != x;  // a lane mask for vector types
  }
}

struct SumOp {
  template <typename T>
  RCOLL_REDUCE_OP static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return T(U(a) + U(b));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <typename T>
  RCOLL_REDUCE_OP static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // uint8 operands promote to int, where 255 * 255 cannot overflow; wider
      // types stay unsigned. The narrowing back to T is modular in C++20.
      using U = std::make_unsigned_t<T>;
      return T(U(a) * U(b));
    } else {
      return a * b;
    }
  }
};

// `(a < b) | is_nan(a) ? a : b` picks a when a is NaN, and b (NaN) when only
// b is. Written as a select so that it vectorises to compare + blend.
struct MinOp {
  template <typename T>
  RCOLL_REDUCE_OP static T apply(T a, T b) {
    return ((a < b) | is_nan(a)) ? a : b;
  }
};

struct MaxOp {
  template <typename T>
  RCOLL_REDUCE_OP static T apply(T a, T b) {
    return ((a > b) | is_nan(a)) ? a : b;
  }
};

}  // namespace rcoll::kernels::ops
