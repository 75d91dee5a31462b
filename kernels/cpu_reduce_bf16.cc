// bfloat16 sum and prod on x86 with AVX512-BF16. Without it, bfloat16 takes
// the plain loops of cpu_reduce.cc (struct Bf16: integer rounding that the
// compiler vectorises), whose bits this path gives.
#include <cstdint>

#include "kernels/cpu_reduce_internal.h"
#include "kernels/reduce_ops.h"

#if RCOLL_X86
#include <immintrin.h>
#endif

namespace rcoll::kernels {

// AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4): VCVTNE2PS2BF16 rounds 32
// float32 to bfloat16 in one instruction, to nearest even and NaN made quiet
// with its top payload, as Bf16::round_high does, but with DAZ and FTZ fixed
// on: a subnormal float32 becomes zero. So a block whose results include a
// zero checks its float32 results for a subnormal (bf16_subnormal), and the
// rare block that has one rounds with integer operations, as Bf16 (in
// cpu_reduce.cc) does. The same compilers as AVX512-FP16 (cpu_reduce_internal.h).
#if RCOLL_AVX512BF16
namespace {

constexpr size_t kBf16Lanes = 32;

// 16 words of two elements. The integer operations are written with GCC
// vector operators (GCC 12's shift intrinsics warn -Wmaybe-uninitialized).
using U32x16 = uint32_t __attribute__((vector_size(64)));

// The even elements (low halves) and the odd ones (high halves) widen to
// float32 with a shift and a mask, as in Bf16.
__attribute__((target(RCOLL_BF16_ISA), always_inline)) inline __m512 bf16_even(U32x16 w) {
  return __m512(w << 16);
}
__attribute__((target(RCOLL_BF16_ISA), always_inline)) inline __m512 bf16_odd(U32x16 w) {
  return __m512(w & 0xffff0000u);
}

// Bf16::round_high on 16 lanes: the result in each lane's upper 16 bits.
__attribute__((target(RCOLL_BF16_ISA), always_inline)) inline U32x16 bf16_round_high(__m512 f) {
  const auto u = U32x16(f);
  const U32x16 rounded = u + 0x7fffu + ((u >> 16) & 1u);
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  return U32x16(
      _mm512_mask_or_epi32(__m512i(rounded), nan, __m512i(u), _mm512_set1_epi32(0x00400000)));
}

// VCVTNE2PS2BF16 puts the even elements' results in words 0-15 and the odd
// ones' in words 16-31; element k comes from word k/2 (even k) or 16 + k/2.
alignas(64) constexpr uint16_t kBf16Interleave[kBf16Lanes] = {
    0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// The lanes that hold a subnormal, told by their bits: exponent zero,
// mantissa not (|u| - 1 below 0x007fffff, unsigned). Not VFPCLASSPS, which
// reads MXCSR.DAZ and calls a subnormal zero when a caller has set it
// (-ffast-math's startup code, torch.set_flush_denormal), while the integer
// rounding keeps it.
__attribute__((target(RCOLL_BF16_ISA), always_inline)) inline __mmask16 bf16_subnormal(__m512 f) {
  const U32x16 magnitude_less_one = (U32x16(f) & 0x7fffffffu) - 1u;
  return _mm512_cmplt_epu32_mask(__m512i(magnitude_less_one), _mm512_set1_epi32(0x007fffff));
}

template <typename Op>
__attribute__((target(RCOLL_BF16_ISA), always_inline)) inline U32x16 bf16_combine(U32x16 x,
                                                                                  U32x16 y) {
  const __m512 even = Op::apply(bf16_even(x), bf16_even(y));
  const __m512 odd = Op::apply(bf16_odd(x), bf16_odd(y));
  const auto packed = __m512i(_mm512_cvtne2ps_pbh(odd, even));
  // A flushed subnormal comes out as a zero, so the float32 bits are checked
  // only in a block with a zero result (one test per block otherwise).
  const __mmask32 zero = _mm512_testn_epi16_mask(packed, _mm512_set1_epi16(0x7fff));
  if (__builtin_expect(zero == 0, 1) || (bf16_subnormal(even) | bf16_subnormal(odd)) == 0) {
    return U32x16(_mm512_permutexvar_epi16(_mm512_load_si512(kBf16Interleave), packed));
  }
  return (bf16_round_high(even) >> 16) | (bf16_round_high(odd) & 0xffff0000u);
}

// Every block is loaded before it is stored, so dst may alias a or b.
template <typename Op>
__attribute__((target(RCOLL_BF16_ISA), always_inline)) inline void bf16_step(uint16_t* d,
                                                                             const uint16_t* x,
                                                                             const uint16_t* y) {
  const auto r = bf16_combine<Op>(U32x16(_mm512_loadu_si512(x)), U32x16(_mm512_loadu_si512(y)));
  _mm512_storeu_si512(d, __m512i(r));
}

}  // namespace

template <typename Op>
__attribute__((target(RCOLL_BF16_ISA))) void bf16_reduce(uint16_t* dst, const uint16_t* a,
                                                         const uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 2 * kBf16Lanes <= n; i += 2 * kBf16Lanes) {
    bf16_step<Op>(dst + i, a + i, b + i);
    bf16_step<Op>(dst + i + kBf16Lanes, a + i + kBf16Lanes, b + i + kBf16Lanes);
  }
  for (; i + kBf16Lanes <= n; i += kBf16Lanes) bf16_step<Op>(dst + i, a + i, b + i);
  if (i < n) {
    // Masked, as in fp16_reduce (cpu_reduce_f16.cc): the zero lanes give zero, never a subnormal.
    const __mmask32 m = (__mmask32(1) << (n - i)) - 1;
    const auto r = bf16_combine<Op>(U32x16(_mm512_maskz_loadu_epi16(m, a + i)),
                                    U32x16(_mm512_maskz_loadu_epi16(m, b + i)));
    _mm512_mask_storeu_epi16(dst + i, m, __m512i(r));
  }
}

bool has_avx512bf16() {
  static const bool kHas = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq");
  }();
  return kHas;
}

// Min and max take the integer compares of cpu_reduce_select.cc instead.
template void bf16_reduce<ops::SumOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
template void bf16_reduce<ops::ProdOp>(uint16_t*, const uint16_t*, const uint16_t*, size_t);
#endif  // RCOLL_AVX512BF16

}  // namespace rcoll::kernels
