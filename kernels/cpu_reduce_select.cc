// float16 and bfloat16 min and max on x86 by integer compares, on AVX-512BW
// and on AVX2. cpu_reduce.cc picks these for min and max where the CPU has
// either; the other ops, and CPUs with neither, take the other paths.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu_reduce_internal.h"
#include "kernels/reduce_ops.h"

#if RCOLL_X86
#include <immintrin.h>
#endif

namespace rcoll::kernels {

// Min and max return one of their operands (made quiet if it is a NaN), so
// for both 16-bit formats they need no conversion: the bits compare as
// 16-bit integers once each value is keyed as its magnitude, negated when the
// sign is set. -0 and +0 then tie, and a tie returns b, as MinOp and MaxOp
// do. A block with a NaN in it (rare) keys a NaN to win, whatever its sign,
// and makes the result quiet; a NaN is a magnitude above infinity's. 32
// elements per instruction, against F16C's 8 and a conversion each way.
//
// DAZ: the other paths compare in float32, where MXCSR.DAZ makes a
// subnormal compare as zero. A bfloat16 subnormal is a float32 subnormal, so
// with DAZ set the keys treat its magnitude as zero too (kDaz), and the
// result is the operand the float32 compare would pick. (A float16 subnormal
// widens to a normal float32: DAZ never touches it.)
#if RCOLL_X86
namespace {

using ops::MaxOp;
using ops::MinOp;

constexpr size_t kBwLanes = 32;

// Each format's infinity and quiet bit (F16Bits, Bf16Bits): cpu_reduce_internal.h.

// The keys: magnitude m (zero for a subnormal where kDaz), or 0 - m in the
// lanes of `negative`.
template <typename Bits, bool kDaz>
__attribute__((target(RCOLL_BW_ISA), always_inline)) inline __m512i select_key(__m512i m,
                                                                               __mmask32 negative) {
  if constexpr (kDaz) {
    m = _mm512_maskz_mov_epi16(
        _mm512_cmpge_epu16_mask(m, _mm512_set1_epi16(short(Bits::kSmallestNormal))), m);
  }
  return _mm512_mask_sub_epi16(m, negative, _mm512_setzero_si512(), m);
}

template <typename Op>
__attribute__((target(RCOLL_BW_ISA), always_inline)) inline __mmask32 select_takes_a(__m512i ka,
                                                                                     __m512i kb) {
  return std::is_same_v<Op, MaxOp> ? _mm512_cmpgt_epi16_mask(ka, kb)
                                   : _mm512_cmplt_epi16_mask(ka, kb);
}

// A block with a NaN: for max a NaN is keyed positive (above infinity), for
// min negative (below minus infinity), so it wins; two NaNs give either.
template <typename Bits, typename Op, bool kDaz>
__attribute__((target(RCOLL_BW_ISA), noinline)) __m512i select_with_nan(__m512i a, __m512i b) {
  const __m512i magnitude = _mm512_set1_epi16(0x7fff);
  const __m512i inf = _mm512_set1_epi16(short(Bits::kInf));
  const __m512i ma = _mm512_and_si512(a, magnitude), mb = _mm512_and_si512(b, magnitude);
  const __mmask32 nan_a = _mm512_cmpgt_epu16_mask(ma, inf);
  const __mmask32 nan_b = _mm512_cmpgt_epu16_mask(mb, inf);
  __mmask32 neg_a = _mm512_movepi16_mask(a), neg_b = _mm512_movepi16_mask(b);
  if constexpr (std::is_same_v<Op, MaxOp>) {
    neg_a = _kandn_mask32(nan_a, neg_a);
    neg_b = _kandn_mask32(nan_b, neg_b);
  } else {
    neg_a = _kor_mask32(nan_a, neg_a);
    neg_b = _kor_mask32(nan_b, neg_b);
  }
  const __m512i r = _mm512_mask_blend_epi16(
      select_takes_a<Op>(select_key<Bits, kDaz>(ma, neg_a), select_key<Bits, kDaz>(mb, neg_b)), b,
      a);
  return _mm512_mask_mov_epi16(r, _kor_mask32(nan_a, nan_b),
                               _mm512_or_si512(r, _mm512_set1_epi16(short(Bits::kQuiet))));
}

template <typename Bits, typename Op, bool kDaz>
__attribute__((target(RCOLL_BW_ISA), always_inline)) inline __m512i select_block(__m512i a,
                                                                                 __m512i b) {
  const __m512i magnitude = _mm512_set1_epi16(0x7fff);
  const __m512i ma = _mm512_and_si512(a, magnitude), mb = _mm512_and_si512(b, magnitude);
  const __mmask32 nan =
      _mm512_cmpgt_epu16_mask(_mm512_max_epu16(ma, mb), _mm512_set1_epi16(short(Bits::kInf)));
  if (__builtin_expect(nan != 0, 0)) return select_with_nan<Bits, Op, kDaz>(a, b);
  const __mmask32 take_a = select_takes_a<Op>(select_key<Bits, kDaz>(ma, _mm512_movepi16_mask(a)),
                                              select_key<Bits, kDaz>(mb, _mm512_movepi16_mask(b)));
  return _mm512_mask_blend_epi16(take_a, b, a);
}

// Every block is loaded before it is stored, so dst may alias a or b.
template <typename Bits, typename Op, bool kDaz>
__attribute__((target(RCOLL_BW_ISA), always_inline)) inline void select_step(uint16_t* d,
                                                                             const uint16_t* x,
                                                                             const uint16_t* y) {
  _mm512_storeu_si512(d,
                      select_block<Bits, Op, kDaz>(_mm512_loadu_si512(x), _mm512_loadu_si512(y)));
}
}  // namespace

template <typename Bits, typename Op, bool kDaz>
__attribute__((target(RCOLL_BW_ISA))) void select_reduce(uint16_t* dst, const uint16_t* a,
                                                         const uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 2 * kBwLanes <= n; i += 2 * kBwLanes) {
    select_step<Bits, Op, kDaz>(dst + i, a + i, b + i);
    select_step<Bits, Op, kDaz>(dst + i + kBwLanes, a + i + kBwLanes, b + i + kBwLanes);
  }
  for (; i + kBwLanes <= n; i += kBwLanes) select_step<Bits, Op, kDaz>(dst + i, a + i, b + i);
  if (i < n) {
    // Masked, as in fp16_reduce: the zero lanes are computed and not stored.
    const __mmask32 m = (__mmask32(1) << (n - i)) - 1;
    const __m512i r = select_block<Bits, Op, kDaz>(_mm512_maskz_loadu_epi16(m, a + i),
                                                   _mm512_maskz_loadu_epi16(m, b + i));
    _mm512_mask_storeu_epi16(dst + i, m, r);
  }
}

bool has_avx512bw() {
  static const bool kHas = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f");
  }();
  return kHas;
}

// The same on AVX2, 16 per instruction, for CPUs without AVX-512 (Zen 2 and
// Zen 3, Intel's client cores): the lane masks are vectors, the negation is
// (m ^ s) - s with s the sign spread over the lane, and the choice a byte
// blend. Magnitudes are at most 0x7fff, so signed compares order them.
namespace {

constexpr size_t kAvx2Lanes = 16;

template <typename Bits, bool kDaz>
__attribute__((target(RCOLL_AVX2_ISA), always_inline)) inline __m256i select_key_avx2(
    __m256i m, __m256i negative) {
  if constexpr (kDaz) {
    m = _mm256_and_si256(
        m, _mm256_cmpgt_epi16(m, _mm256_set1_epi16(short(Bits::kSmallestNormal - 1))));
  }
  return _mm256_sub_epi16(_mm256_xor_si256(m, negative), negative);
}

template <typename Op>
__attribute__((target(RCOLL_AVX2_ISA), always_inline)) inline __m256i select_takes_a_avx2(
    __m256i ka, __m256i kb) {
  return std::is_same_v<Op, MaxOp> ? _mm256_cmpgt_epi16(ka, kb) : _mm256_cmpgt_epi16(kb, ka);
}

template <typename Bits, typename Op, bool kDaz>
__attribute__((target(RCOLL_AVX2_ISA), noinline)) __m256i select_with_nan_avx2(__m256i a,
                                                                               __m256i b) {
  const __m256i magnitude = _mm256_set1_epi16(0x7fff);
  const __m256i inf = _mm256_set1_epi16(short(Bits::kInf));
  const __m256i ma = _mm256_and_si256(a, magnitude), mb = _mm256_and_si256(b, magnitude);
  const __m256i nan_a = _mm256_cmpgt_epi16(ma, inf), nan_b = _mm256_cmpgt_epi16(mb, inf);
  __m256i neg_a = _mm256_srai_epi16(a, 15), neg_b = _mm256_srai_epi16(b, 15);
  if constexpr (std::is_same_v<Op, MaxOp>) {
    neg_a = _mm256_andnot_si256(nan_a, neg_a);
    neg_b = _mm256_andnot_si256(nan_b, neg_b);
  } else {
    neg_a = _mm256_or_si256(nan_a, neg_a);
    neg_b = _mm256_or_si256(nan_b, neg_b);
  }
  const __m256i r =
      _mm256_blendv_epi8(b, a,
                         select_takes_a_avx2<Op>(select_key_avx2<Bits, kDaz>(ma, neg_a),
                                                 select_key_avx2<Bits, kDaz>(mb, neg_b)));
  return _mm256_or_si256(
      r, _mm256_and_si256(_mm256_or_si256(nan_a, nan_b), _mm256_set1_epi16(short(Bits::kQuiet))));
}

template <typename Bits, typename Op, bool kDaz>
__attribute__((target(RCOLL_AVX2_ISA), always_inline)) inline __m256i select_block_avx2(__m256i a,
                                                                                        __m256i b) {
  const __m256i magnitude = _mm256_set1_epi16(0x7fff);
  const __m256i ma = _mm256_and_si256(a, magnitude), mb = _mm256_and_si256(b, magnitude);
  const __m256i nan =
      _mm256_cmpgt_epi16(_mm256_max_epi16(ma, mb), _mm256_set1_epi16(short(Bits::kInf)));
  if (__builtin_expect(!_mm256_testz_si256(nan, nan), 0)) {
    return select_with_nan_avx2<Bits, Op, kDaz>(a, b);
  }
  const __m256i take_a =
      select_takes_a_avx2<Op>(select_key_avx2<Bits, kDaz>(ma, _mm256_srai_epi16(a, 15)),
                              select_key_avx2<Bits, kDaz>(mb, _mm256_srai_epi16(b, 15)));
  return _mm256_blendv_epi8(b, a, take_a);
}

template <typename Bits, typename Op, bool kDaz>
__attribute__((target(RCOLL_AVX2_ISA), always_inline)) inline void select_step_avx2(
    uint16_t* d, const uint16_t* x, const uint16_t* y) {
  const __m256i r =
      select_block_avx2<Bits, Op, kDaz>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)),
                                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), r);
}
}  // namespace

template <typename Bits, typename Op, bool kDaz>
__attribute__((target(RCOLL_AVX2_ISA))) void select_reduce_avx2(uint16_t* dst, const uint16_t* a,
                                                                const uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 2 * kAvx2Lanes <= n; i += 2 * kAvx2Lanes) {
    select_step_avx2<Bits, Op, kDaz>(dst + i, a + i, b + i);
    select_step_avx2<Bits, Op, kDaz>(dst + i + kAvx2Lanes, a + i + kAvx2Lanes, b + i + kAvx2Lanes);
  }
  for (; i + kAvx2Lanes <= n; i += kAvx2Lanes) {
    select_step_avx2<Bits, Op, kDaz>(dst + i, a + i, b + i);
  }
  if (i < n) {
    // A zero-padded copy, as in f16c_reduce: zeros are never NaN.
    uint16_t ta[kAvx2Lanes] = {}, tb[kAvx2Lanes] = {}, td[kAvx2Lanes];
    std::memcpy(ta, a + i, (n - i) * sizeof(uint16_t));
    std::memcpy(tb, b + i, (n - i) * sizeof(uint16_t));
    select_step_avx2<Bits, Op, kDaz>(td, ta, tb);
    std::memcpy(dst + i, td, (n - i) * sizeof(uint16_t));
  }
}

bool has_avx2() {
  static const bool kHas = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
  }();
  return kHas;
}

// F16Bits without DAZ: a float16 subnormal widens to a normal float32.
template void select_reduce<F16Bits, MinOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
template void select_reduce<F16Bits, MaxOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
template void select_reduce<Bf16Bits, MinOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
template void select_reduce<Bf16Bits, MaxOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
template void select_reduce<Bf16Bits, MinOp, true>(uint16_t*, const uint16_t*, const uint16_t*,
                                                   size_t);
template void select_reduce<Bf16Bits, MaxOp, true>(uint16_t*, const uint16_t*, const uint16_t*,
                                                   size_t);
template void select_reduce_avx2<F16Bits, MinOp>(uint16_t*, const uint16_t*, const uint16_t*,
                                                 size_t);
template void select_reduce_avx2<F16Bits, MaxOp>(uint16_t*, const uint16_t*, const uint16_t*,
                                                 size_t);
template void select_reduce_avx2<Bf16Bits, MinOp>(uint16_t*, const uint16_t*, const uint16_t*,
                                                  size_t);
template void select_reduce_avx2<Bf16Bits, MaxOp>(uint16_t*, const uint16_t*, const uint16_t*,
                                                  size_t);
template void select_reduce_avx2<Bf16Bits, MinOp, true>(uint16_t*, const uint16_t*, const uint16_t*,
                                                        size_t);
template void select_reduce_avx2<Bf16Bits, MaxOp, true>(uint16_t*, const uint16_t*, const uint16_t*,
                                                        size_t);
#endif  // RCOLL_X86

}  // namespace rcoll::kernels
