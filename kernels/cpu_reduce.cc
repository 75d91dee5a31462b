// Element-wise reductions on host memory.
//
// How the loops become SIMD without tying the binary to one CPU:
//   Every kernel is a plain loop over one (storage type, op) pair, written so
//   that GCC auto-vectorises it at -O3, and marked target_clones. GCC compiles
//   each loop once per listed ISA (x86-64-v4 = AVX-512, x86-64-v3 = AVX2/FMA/
//   F16C, and the baseline SSE2) and an ifunc resolver picks the best clone
//   when the program loads. The binary therefore runs on any x86-64 and uses
//   512-bit vectors where they exist.
//
//   float16 is the exception: GCC cannot vectorise half <-> float conversions
//   in plain C++, so its kernels use the F16C intrinsics (8 lanes per
//   instruction) when the CPU has them, chosen once at run time, and fall
//   back to the portable scalar conversions in half.cc otherwise. Sum and
//   prod go one step further on CPUs with AVX512-FP16: 32 halves per
//   instruction in float16 arithmetic, no conversions. The bits are the same:
//   an operation in float32 rounded once to float16 is the correctly rounded
//   float16 result for + and x (float32's 24 bits are at least 2 x 11 + 2, so
//   the double rounding is harmless; a product of two halves is exact in
//   float32), which is what the float16 instruction returns. Min and max do
//   not take it (the float16 instructions would return a signalling NaN as
//   it is, where every other path makes it quiet).
//
//   bfloat16 vectorises as plain loops (integer rounding, struct Bf16); on
//   CPUs with AVX512-BF16 one instruction rounds 32 sums or products
//   instead, with an integer-rounding fallback for blocks with a subnormal
//   (bf16_combine).
//
//   Min and max of either 16-bit format need no conversion at all on CPUs
//   with AVX-512BW: they return an operand, picked by comparing the bits as
//   integers (select_reduce).
//
// Semantics (shared by every path, so every clone gives the same bits, NaN
// payloads aside as below):
//   - kAvg is not a kernel. reduce/reduce_inplace treat kAvg as kSum; callers
//     divide afterwards with scale_avg.
//   - Integer sum and prod are computed in the unsigned type of the same width,
//     so they wrap around (two's complement) without undefined behaviour.
//   - Float min/max return NaN when either input is NaN (as NCCL and PyTorch
//     do), unlike std::min or the bare minps/maxps instructions.
//   - float16/bfloat16 are widened to float32, combined, and rounded back to
//     nearest even once (or computed in float16, or for min and max picked by
//     integer compares, where that gives the same bits).
//   - Where both operands are NaN the result is one of them, made quiet; which
//     one may differ between paths (IEEE 754 leaves it open, and the compiler
//     may swap the operands of a commutative instruction). A NaN and a number
//     give that NaN, made quiet, on every path.
//   - The rounding mode is the default, to nearest even. A caller that sets
//     another in MXCSR gets it in the float32 and float64 arithmetic of every
//     path and in AVX512-FP16's float16 arithmetic, while F16C always narrows
//     to float16 to nearest even, so float16 results may then differ by path.
//   - DAZ and FTZ in MXCSR (set by -ffast-math's startup code, or
//     torch.set_flush_denormal) act on the float32 arithmetic, on every path
//     alike; no path's choice between its instructions reads them (bfloat16's
//     subnormal test is on the bits), but for bfloat16 min and max on
//     AVX-512BW, which read DAZ to key a subnormal as zero, as the float32
//     compare of the other paths sees it. float16 never meets them: its values,
//     and their sums and products, are normal in float32, and AVX512-FP16
//     ignores both (Intel's manual).
#include "kernels/cpu_reduce.h"

#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/reduce_ops.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define RCOLL_X86 1
#else
#define RCOLL_X86 0
#endif

#if RCOLL_X86 && defined(__GNUC__) && !defined(__clang__)
#define RCOLL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RCOLL_CLONES
#endif

namespace rcoll::kernels {
namespace {

// The ops are written once for scalars and for GCC vector types (the F16C
// path applies them to __m256 directly). Passing __m256 by value makes GCC
// warn that the ABI differs without AVX; the ops are always inlined into AVX
// code, so kernels/CMakeLists.txt turns -Wpsabi off for this layer.

using ops::MaxOp;
using ops::MinOp;
using ops::ProdOp;
using ops::SumOp;

// dst = src op dst through the same loop as dst = dst op src: used when dst
// aliases b, so the operands stay in the caller's order.
template <typename Op>
struct Swapped {
  template <typename T>
  [[gnu::always_inline]] static T apply(T a, T b) {
    return Op::apply(b, a);
  }
};

[[gnu::always_inline]] inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
[[gnu::always_inline]] inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Storage traits. Each says how an element is stored (Storage), how it is
// widened to the type the op computes in and narrowed back (load/store), and
// how the loops step through memory: a Word of kPerWord elements at a time,
// combined by combine<Op>.
template <typename T>
struct Native {
  using Storage = T;
  using Word = T;
  static constexpr size_t kPerWord = 1;
  [[gnu::always_inline]] static T load(T x) { return x; }
  [[gnu::always_inline]] static T store(T x) { return x; }
  template <typename Op>
  [[gnu::always_inline]] static T combine(T x, T y) {
    return Op::apply(x, y);
  }
};

// bfloat16 with integer operations only, so that the loops vectorise. The
// rounding is the one of rcoll::to_bfloat16 in half.cc (repeated here so it
// can be inlined; the tests check that the two agree).
//
// The loops take two elements per 32-bit word: the low element widens with a
// shift, the high one with a mask, and the rounded results recombine with a
// shift and a mask. All lanes stay 32-bit, so no pack/unpack shuffles are
// needed; this is about 1.7x faster than one element per lane when the data
// is in cache.
struct Bf16 {
  using Storage = uint16_t;
  using Word = uint32_t;
  static constexpr size_t kPerWord = 2;

  // Rounds to bfloat16 nearest even, result in the upper 16 bits. NaN keeps
  // its sign and top payload and is made quiet, so that a payload only in
  // the low bits cannot become inf.
  [[gnu::always_inline]] static uint32_t round_high(float f) {
    const uint32_t u = float_to_bits(f);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    return nan ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
  }
  [[gnu::always_inline]] static float load(uint16_t x) { return bits_to_float(uint32_t(x) << 16); }
  [[gnu::always_inline]] static uint16_t store(float f) { return uint16_t(round_high(f) >> 16); }
  template <typename Op>
  [[gnu::always_inline]] static uint32_t combine(uint32_t x, uint32_t y) {
    const float lo = Op::apply(bits_to_float(x << 16), bits_to_float(y << 16));
    const float hi = Op::apply(bits_to_float(x & 0xffff0000u), bits_to_float(y & 0xffff0000u));
    return (round_high(lo) >> 16) | (round_high(hi) & 0xffff0000u);
  }
};

// float16 through the portable conversions (not vectorised: the fallback for
// CPUs without F16C).
struct F16Portable {
  using Storage = uint16_t;
  using Word = uint16_t;
  static constexpr size_t kPerWord = 1;
  static float load(uint16_t x) { return to_float(float16{x}); }
  static uint16_t store(float f) { return to_float16(f).bits; }
  template <typename Op>
  static uint16_t combine(uint16_t x, uint16_t y) {
    return store(Op::apply(load(x), load(y)));
  }
};

// Words are read and written with memcpy: element pointers need only element
// alignment, and bfloat16 memory is never accessed through a uint32_t lvalue.
template <typename S>
[[gnu::always_inline]] inline typename S::Word load_word(const typename S::Storage* p) {
  typename S::Word w;
  std::memcpy(&w, p, sizeof w);
  return w;
}
template <typename S>
[[gnu::always_inline]] inline void store_word(typename S::Storage* p, typename S::Word w) {
  std::memcpy(p, &w, sizeof w);
}

// The elements after the last whole word, one at a time.
template <typename S, typename Op>
[[gnu::always_inline]] inline void reduce_tail(typename S::Storage* dst,
                                               const typename S::Storage* a,
                                               const typename S::Storage* b, size_t from,
                                               size_t n) {
  for (size_t i = from; i < n; ++i) dst[i] = S::store(Op::apply(S::load(a[i]), S::load(b[i])));
}

// The two loops. No __restrict: GCC versions each loop with a run-time
// overlap check, so partial overlap stays correct (scalar). Exact aliasing
// (dst == a or dst == b) goes to reduce_inplace_loop, which needs no check.
template <typename S, typename Op>
RCOLL_CLONES void reduce_inplace_loop(typename S::Storage* dst, const typename S::Storage* src,
                                      size_t n) {
  constexpr size_t k = S::kPerWord;
  const size_t words = n / k;
  for (size_t i = 0; i < words; ++i) {
    store_word<S>(dst + k * i,
                  S::template combine<Op>(load_word<S>(dst + k * i), load_word<S>(src + k * i)));
  }
  reduce_tail<S, Op>(dst, dst, src, words * k, n);
}

template <typename S, typename Op>
RCOLL_CLONES void reduce_loop(typename S::Storage* dst, const typename S::Storage* a,
                              const typename S::Storage* b, size_t n) {
  constexpr size_t k = S::kPerWord;
  const size_t words = n / k;
  for (size_t i = 0; i < words; ++i) {
    store_word<S>(dst + k * i,
                  S::template combine<Op>(load_word<S>(a + k * i), load_word<S>(b + k * i)));
  }
  reduce_tail<S, Op>(dst, a, b, words * k, n);
}

template <typename S>
RCOLL_CLONES void scale_loop(typename S::Storage* dst, size_t n, int divisor) {
  // Divide, not multiply by 1/divisor: the result is the correctly rounded
  // quotient, and the loop is bound by memory either way.
  using C = decltype(S::load(dst[0]));
  const C d = C(divisor);
  for (size_t i = 0; i < n; ++i) dst[i] = S::store(S::load(dst[i]) / d);
}

// Routes one (storage, op) call to the loop that fits its aliasing.
template <typename S, typename Op>
void run(void* dst, const void* a, const void* b, size_t n) {
  using T = typename S::Storage;
  auto* d = static_cast<T*>(dst);
  if (dst == a) {
    reduce_inplace_loop<S, Op>(d, static_cast<const T*>(b), n);
  } else if (dst == b) {
    reduce_inplace_loop<S, Swapped<Op>>(d, static_cast<const T*>(a), n);
  } else {
    reduce_loop<S, Op>(d, static_cast<const T*>(a), static_cast<const T*>(b), n);
  }
}

// Calls Run::apply<Op> with the op's functor. kAvg is the sum; scale_avg
// does the division after.
template <typename Run>
void for_op(ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return Run::template apply<SumOp>(dst, a, b, n);
    case ReduceOp::kProd:
      return Run::template apply<ProdOp>(dst, a, b, n);
    case ReduceOp::kMin:
      return Run::template apply<MinOp>(dst, a, b, n);
    case ReduceOp::kMax:
      return Run::template apply<MaxOp>(dst, a, b, n);
  }
}

// One storage type through the plain loops.
template <typename S>
struct PlainLoops {
  template <typename Op>
  static void apply(void* dst, const void* a, const void* b, size_t n) {
    run<S, Op>(dst, a, b, n);
  }
};

// Min and max, the ops that select an operand rather than compute a value.
template <typename Op>
constexpr bool kSelects = std::is_same_v<Op, MinOp> || std::is_same_v<Op, MaxOp>;
bool is_select(ReduceOp op) { return op == ReduceOp::kMin || op == ReduceOp::kMax; }

// ---- float16 ----

#if RCOLL_X86
// 8 halves per step: widen with VCVTPH2PS, apply the op on __m256, round back
// with VCVTPS2PH (nearest even). Each block is loaded before it is stored, so
// dst may alias x or y. (Helpers rather than lambdas: a lambda would not
// inherit the target attribute.)
constexpr size_t kF16Lanes = 8;
constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

__attribute__((target("avx2,f16c"), always_inline)) inline __m256 f16c_load(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2,f16c"), always_inline)) inline void f16c_store(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, kRoundNearest));
}

template <typename Op>
__attribute__((target("avx2,f16c"), always_inline)) inline void f16c_step(uint16_t* d,
                                                                          const uint16_t* x,
                                                                          const uint16_t* y) {
  f16c_store(d, Op::apply(f16c_load(x), f16c_load(y)));
}

template <typename Op>
__attribute__((target("avx2,f16c"))) void f16c_reduce(uint16_t* dst, const uint16_t* a,
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

__attribute__((target("avx2,f16c"))) void f16c_scale(uint16_t* dst, size_t n, int divisor) {
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
#endif  // RCOLL_X86

// AVX512-FP16 (Sapphire Rapids and later): GCC 12 knows it under a target
// attribute; Clang only from 18 (before that its intrinsics need
// -mavx512fp16 for the whole file, and __builtin_cpu_supports has no name
// for it).
#if RCOLL_X86 && ((defined(__clang__) && __clang_major__ >= 18) || \
                  (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12))
#define RCOLL_AVX512FP16 1
#define RCOLL_FP16_ISA "avx512fp16,avx512bw,avx512vl,avx512f"
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
#endif  // RCOLL_AVX512FP16

// ---- bfloat16 ----

// AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4): VCVTNE2PS2BF16 rounds 32
// float32 to bfloat16 in one instruction, to nearest even and NaN made quiet
// with its top payload, as Bf16::round_high does, but with DAZ and FTZ fixed
// on: a subnormal float32 becomes zero. So a block whose results include a
// zero checks its float32 results for a subnormal (bf16_subnormal), and the
// rare block that has one rounds with integer operations, as Bf16 does. The
// same compilers as AVX512-FP16 above.
#if RCOLL_X86 && ((defined(__clang__) && __clang_major__ >= 18) || \
                  (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12))
#define RCOLL_AVX512BF16 1
#define RCOLL_BF16_ISA "avx512bf16,avx512dq,avx512bw,avx512f"
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
    // Masked, as in fp16_reduce: the zero lanes give zero, never a subnormal.
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
#endif  // RCOLL_AVX512BF16

// ---- float16 and bfloat16 min and max on AVX-512BW and AVX2 ----

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
#define RCOLL_BW_ISA "avx512bw,avx512f"
constexpr size_t kBwLanes = 32;

// A format's infinity (its largest magnitude that is not a NaN) and the bit
// that makes a NaN quiet.
struct F16Bits {
  static constexpr uint16_t kInf = 0x7c00;
  static constexpr uint16_t kQuiet = 0x0200;
};
struct Bf16Bits {
  static constexpr uint16_t kInf = 0x7f80;
  static constexpr uint16_t kQuiet = 0x0040;
  static constexpr uint16_t kSmallestNormal = 0x0080;  // magnitudes below are subnormal
};

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

template <typename Bits, typename Op, bool kDaz = false>
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
#define RCOLL_AVX2_ISA "avx2"
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

template <typename Bits, typename Op, bool kDaz = false>
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
#endif  // RCOLL_X86


std::atomic<Bfloat16Path> g_bf16_path{Bfloat16Path::kBest};

// The path a bfloat16 op takes. A pinned path that does not compute the op
// (kAvx512Bf16 for min and max, kAvx512Bw and kAvx2 for the rest) leaves it
// to kBest's.
Bfloat16Path bf16_path(bool select) {
  const Bfloat16Path p = g_bf16_path.load(std::memory_order_relaxed);
  if (!bfloat16_path_available(p)) return Bfloat16Path::kPortable;
  const bool select_path = p == Bfloat16Path::kAvx512Bw || p == Bfloat16Path::kAvx2;
  if (p == Bfloat16Path::kBest || (p == Bfloat16Path::kAvx512Bf16 && select) ||
      (select_path && !select)) {
    if (!select) {
      return bfloat16_path_available(Bfloat16Path::kAvx512Bf16) ? Bfloat16Path::kAvx512Bf16
                                                                : Bfloat16Path::kPortable;
    }
    for (Bfloat16Path fast : {Bfloat16Path::kAvx512Bw, Bfloat16Path::kAvx2}) {
      if (bfloat16_path_available(fast)) return fast;
    }
    return Bfloat16Path::kPortable;
  }
  return p;
}

#if RCOLL_X86
constexpr unsigned kDazBit = 0x0040;  // MXCSR.DAZ
#endif

// bfloat16 through the path bf16_path picks for the op.
struct Bf16Paths {
  template <typename Op>
  static void apply(void* dst, const void* a, const void* b, size_t n);
};

template <typename Op>
void Bf16Paths::apply(void* dst, const void* a, const void* b, size_t n) {
  [[maybe_unused]] auto* d = static_cast<uint16_t*>(dst);
  [[maybe_unused]] auto* x = static_cast<const uint16_t*>(a);
  [[maybe_unused]] auto* y = static_cast<const uint16_t*>(b);
  constexpr bool kSelect = kSelects<Op>;
  switch (bf16_path(kSelect)) {
#if RCOLL_AVX512BF16
    case Bfloat16Path::kAvx512Bf16:
      if constexpr (!kSelect) return bf16_reduce<Op>(d, x, y, n);
      break;
#endif
#if RCOLL_X86
    case Bfloat16Path::kAvx512Bw:
      if constexpr (kSelect) {
        if (_mm_getcsr() & kDazBit) return select_reduce<Bf16Bits, Op, true>(d, x, y, n);
        return select_reduce<Bf16Bits, Op>(d, x, y, n);
      }
      break;
    case Bfloat16Path::kAvx2:
      if constexpr (kSelect) {
        if (_mm_getcsr() & kDazBit) return select_reduce_avx2<Bf16Bits, Op, true>(d, x, y, n);
        return select_reduce_avx2<Bf16Bits, Op>(d, x, y, n);
      }
      break;
#endif
    default:
      break;
  }
  run<Bf16, Op>(dst, a, b, n);
}

std::atomic<Float16Path> g_f16_path{Float16Path::kBest};

// The path a float16 op takes. A pinned path that does not compute the op
// (kAvx512Fp16 for min and max, kAvx512Bw and kAvx2 for the rest) leaves it
// to kBest's.
Float16Path f16_path(bool select) {
  const Float16Path p = g_f16_path.load(std::memory_order_relaxed);
  if (!float16_path_available(p)) return Float16Path::kPortable;
  const bool select_path = p == Float16Path::kAvx512Bw || p == Float16Path::kAvx2;
  if (p == Float16Path::kBest || (p == Float16Path::kAvx512Fp16 && select) ||
      (select_path && !select)) {
    if (select) {
      for (Float16Path fast : {Float16Path::kAvx512Bw, Float16Path::kAvx2}) {
        if (float16_path_available(fast)) return fast;
      }
    } else if (float16_path_available(Float16Path::kAvx512Fp16)) {
      return Float16Path::kAvx512Fp16;
    }
    return float16_path_available(Float16Path::kF16c) ? Float16Path::kF16c : Float16Path::kPortable;
  }
  return p;
}

// float16 through the path f16_path picks for the op.
struct F16Paths {
  template <typename Op>
  static void apply(void* dst, const void* a, const void* b, size_t n);
};

template <typename Op>
void F16Paths::apply(void* dst, const void* a, const void* b, size_t n) {
  [[maybe_unused]] auto* d = static_cast<uint16_t*>(dst);
  [[maybe_unused]] auto* x = static_cast<const uint16_t*>(a);
  [[maybe_unused]] auto* y = static_cast<const uint16_t*>(b);
  constexpr bool kSelect = kSelects<Op>;
  switch (f16_path(kSelect)) {
#if RCOLL_AVX512FP16
    case Float16Path::kAvx512Fp16:
      if constexpr (!kSelect) return fp16_reduce<Op>(d, x, y, n);
      break;
#endif
#if RCOLL_X86
    case Float16Path::kAvx512Bw:
      if constexpr (kSelect) return select_reduce<F16Bits, Op>(d, x, y, n);
      break;
    case Float16Path::kAvx2:
      if constexpr (kSelect) return select_reduce_avx2<F16Bits, Op>(d, x, y, n);
      break;
    case Float16Path::kF16c:
      return f16c_reduce<Op>(d, x, y, n);
#endif
    default:
      break;
  }
  run<F16Portable, Op>(dst, a, b, n);
}

}  // namespace

void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  if (count == 0) return;
  switch (dtype) {
    case DataType::kInt8:
      return for_op<PlainLoops<Native<int8_t>>>(op, dst, a, b, count);
    case DataType::kUint8:
      return for_op<PlainLoops<Native<uint8_t>>>(op, dst, a, b, count);
    case DataType::kInt32:
      return for_op<PlainLoops<Native<int32_t>>>(op, dst, a, b, count);
    case DataType::kUint32:
      return for_op<PlainLoops<Native<uint32_t>>>(op, dst, a, b, count);
    case DataType::kInt64:
      return for_op<PlainLoops<Native<int64_t>>>(op, dst, a, b, count);
    case DataType::kUint64:
      return for_op<PlainLoops<Native<uint64_t>>>(op, dst, a, b, count);
    case DataType::kFloat16:
      return for_op<F16Paths>(op, dst, a, b, count);
    case DataType::kBfloat16:
      return for_op<Bf16Paths>(op, dst, a, b, count);
    case DataType::kFloat32:
      return for_op<PlainLoops<Native<float>>>(op, dst, a, b, count);
    case DataType::kFloat64:
      return for_op<PlainLoops<Native<double>>>(op, dst, a, b, count);
  }
}

void reduce_inplace(DataType dtype, ReduceOp op, void* dst, const void* src, size_t count) {
  reduce(dtype, op, dst, dst, src, count);
}

void scale_avg(DataType dtype, void* dst, size_t count, int divisor) {
  if (count == 0) return;
  switch (dtype) {
    case DataType::kFloat16:
      // In float32 on every path: a divisor above 2048 has no exact float16.
#if RCOLL_X86
      if (f16_path(false) != Float16Path::kPortable && has_f16c())
        return f16c_scale(static_cast<uint16_t*>(dst), count, divisor);
#endif
      return scale_loop<F16Portable>(static_cast<uint16_t*>(dst), count, divisor);
    case DataType::kBfloat16:
      return scale_loop<Bf16>(static_cast<uint16_t*>(dst), count, divisor);
    case DataType::kFloat32:
      return scale_loop<Native<float>>(static_cast<float*>(dst), count, divisor);
    case DataType::kFloat64:
      return scale_loop<Native<double>>(static_cast<double*>(dst), count, divisor);
    default:
      // Integer average is refused by supports(); callers must check it first.
      // Leaving the sum untouched is less surprising than truncating silently.
      assert(false && "scale_avg: integer dtypes are not supported");
      return;
  }
}

bool supports(DataType dtype, ReduceOp op) { return op != ReduceOp::kAvg || is_floating(dtype); }

bool float16_path_available(Float16Path path) {
  switch (path) {
    case Float16Path::kBest:
    case Float16Path::kPortable:
      return true;
    case Float16Path::kF16c:
#if RCOLL_X86
      return has_f16c();
#else
      return false;
#endif
    case Float16Path::kAvx512Fp16:
#if RCOLL_AVX512FP16
      return has_avx512fp16();
#else
      return false;
#endif
    case Float16Path::kAvx512Bw:
#if RCOLL_X86
      return has_avx512bw();
#else
      return false;
#endif
    case Float16Path::kAvx2:
#if RCOLL_X86
      return has_avx2();
#else
      return false;
#endif
  }
  return false;
}

void pin_float16_path(Float16Path path) { g_f16_path.store(path, std::memory_order_relaxed); }

const char* to_string(Float16Path path) {
  switch (path) {
    case Float16Path::kBest:
      return "best";
    case Float16Path::kAvx512Fp16:
      return "avx512fp16";
    case Float16Path::kAvx512Bw:
      return "avx512bw";
    case Float16Path::kAvx2:
      return "avx2";
    case Float16Path::kF16c:
      return "f16c";
    case Float16Path::kPortable:
      return "portable";
  }
  return "?";
}

const char* float16_path_name(ReduceOp op) { return to_string(f16_path(is_select(op))); }

bool bfloat16_path_available(Bfloat16Path path) {
  switch (path) {
    case Bfloat16Path::kBest:
    case Bfloat16Path::kPortable:
      return true;
    case Bfloat16Path::kAvx512Bf16:
#if RCOLL_AVX512BF16
      return has_avx512bf16();
#else
      return false;
#endif
    case Bfloat16Path::kAvx512Bw:
#if RCOLL_X86
      return has_avx512bw();
#else
      return false;
#endif
    case Bfloat16Path::kAvx2:
#if RCOLL_X86
      return has_avx2();
#else
      return false;
#endif
  }
  return false;
}

void pin_bfloat16_path(Bfloat16Path path) { g_bf16_path.store(path, std::memory_order_relaxed); }

const char* to_string(Bfloat16Path path) {
  switch (path) {
    case Bfloat16Path::kBest:
      return "best";
    case Bfloat16Path::kAvx512Bf16:
      return "avx512bf16";
    case Bfloat16Path::kAvx512Bw:
      return "avx512bw";
    case Bfloat16Path::kAvx2:
      return "avx2";
    case Bfloat16Path::kPortable:
      return "portable";
  }
  return "?";
}

const char* bfloat16_path_name(ReduceOp op) { return to_string(bf16_path(is_select(op))); }

}  // namespace rcoll::kernels
