// float16 on x86: F16C for every op (8 halves per instruction, widened to
// float32 and rounded back) and AVX512-FP16 for sum and prod (32 halves per
// instruction in float16 arithmetic). cpu_reduce.cc says why both give the
// bits of the portable path and picks one at run time.
//
// The F16C path applies the ops of reduce_ops.h to __m256 directly. Passing
// __m256 by value makes GCC warn that the ABI differs without AVX; the ops are
// always inlined into AVX code, so kernels/CMakeLists.txt turns -Wpsabi off
// for this layer.
#include <cstring>

#include "kernels/cpu_reduce_internal.h"
#include "kernels/reduce_ops.h"

#if RCOLL_X86
#include <immintrin.h>
#endif

namespace rcoll::kernels {

#if RCOLL_X86
namespace {

// 8 halves per step: widen with VCVTPH2PS, apply the op on __m256, round back
// with VCVTPS2PH (nearest even). Each block is loaded before it is stored, so
// dst may alias x or y. (Helpers rather than lambdas: a lambda would not
// inherit the target attribute.)
constexpr size_t kF16Lanes = 8;
constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

__attribute__((target(RCOLL_F16C_ISA), always_inline)) inline __m256 f16c_load(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target(RCOLL_F16C_ISA), always_inline)) inline void f16c_store(uint16_t* p,
                                                                              __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, kRoundNearest));
}

template <typename Op>
__attribute__((target(RCOLL_F16C_ISA), always_inline)) inline void f16c_step(uint16_t* d,
                                                                             const uint16_t* x,
                                                                             const uint16_t* y) {
  f16c_store(d, Op::apply(f16c_load(x), f16c_load(y)));
}

}  // namespace

template <typename Op>
__attribute__((target(RCOLL_F16C_ISA))) void f16c_reduce(uint16_t* dst, const uint16_t* a,
                                                         const uint16_t* b, size_t n) {
  size_t i = 0;
  // Two independent blocks per iteration keep both conversion ports busy.
  for (; i + 2 * kF16Lanes <= n; i += 2 * kF16Lanes) {
    f16c_step<Op>(dst + i, a + i, b + i);
    f16c_step<Op>(dst + i + kF16Lanes, a + i + kF16Lanes, b + i + kF16Lanes);
  }
  for (; i + kF16Lanes <= n; i += kF16Lanes) f16c_step<Op>(dst + i, a + i, b + i);
  if (i < n) {
    // The tail goes through the same instructions on a zero-padded copy, so
    // every element is rounded identically.
    uint16_t ta[kF16Lanes] = {}, tb[kF16Lanes] = {}, td[kF16Lanes];
    std::memcpy(ta, a + i, (n - i) * sizeof(uint16_t));
    std::memcpy(tb, b + i, (n - i) * sizeof(uint16_t));
    f16c_step<Op>(td, ta, tb);
    std::memcpy(dst + i, td, (n - i) * sizeof(uint16_t));
  }
}

__attribute__((target(RCOLL_F16C_ISA))) void f16c_scale(uint16_t* dst, size_t n, int divisor) {
  const __m256 d = _mm256_set1_ps(float(divisor));
  size_t i = 0;
  for (; i + kF16Lanes <= n; i += kF16Lanes) {
    f16c_store(dst + i, _mm256_div_ps(f16c_load(dst + i), d));
  }
  if (i < n) {
    uint16_t t[kF16Lanes] = {};
    std::memcpy(t, dst + i, (n - i) * sizeof(uint16_t));
    f16c_store(t, _mm256_div_ps(f16c_load(t), d));
    std::memcpy(dst + i, t, (n - i) * sizeof(uint16_t));
  }
}

bool has_f16c() {
  static const bool kHas = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return kHas;
}

template void f16c_reduce<ops::SumOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
template void f16c_reduce<ops::ProdOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
template void f16c_reduce<ops::MinOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
template void f16c_reduce<ops::MaxOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
#endif  // RCOLL_X86

// AVX512-FP16 (Sapphire Rapids and later; compilers: cpu_reduce_internal.h).
#if RCOLL_AVX512FP16
namespace {

constexpr size_t kFp16Lanes = 32;

// dst = x op y on 32 halves; every block is loaded before it is stored, so dst
// may alias x or y. __m512h is a GCC vector of _Float16, so the ops of
// reduce_ops.h apply as they are.
template <typename Op>
__attribute__((target(RCOLL_FP16_ISA), always_inline)) inline void fp16_step(uint16_t* d,
                                                                             const uint16_t* x,
                                                                             const uint16_t* y) {
  _mm512_storeu_ph(d, Op::apply(_mm512_loadu_ph(x), _mm512_loadu_ph(y)));
}

}  // namespace

template <typename Op>
__attribute__((target(RCOLL_FP16_ISA))) void fp16_reduce(uint16_t* dst, const uint16_t* a,
                                                         const uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 2 * kFp16Lanes <= n; i += 2 * kFp16Lanes) {
    fp16_step<Op>(dst + i, a + i, b + i);
    fp16_step<Op>(dst + i + kFp16Lanes, a + i + kFp16Lanes, b + i + kFp16Lanes);
  }
  for (; i + kFp16Lanes <= n; i += kFp16Lanes) fp16_step<Op>(dst + i, a + i, b + i);
  if (i < n) {
    // Masked loads neither read past the end nor fault; the lanes they leave
    // zero are computed and not stored.
    const __mmask32 m = (__mmask32(1) << (n - i)) - 1;
    const __m512h x = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, a + i));
    const __m512h y = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, b + i));
    _mm512_mask_storeu_epi16(dst + i, m, _mm512_castph_si512(Op::apply(x, y)));
  }
}

bool has_avx512fp16() {
  static const bool kHas = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512fp16") && __builtin_cpu_supports("avx512bw");
  }();
  return kHas;
}

// Min and max do not take this path (cpu_reduce.cc).
template void fp16_reduce<ops::SumOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
template void fp16_reduce<ops::ProdOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
#endif  // RCOLL_AVX512FP16

}  // namespace rcoll::kernels
