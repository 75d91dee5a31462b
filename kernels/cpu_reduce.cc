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
//
// Where each part lives: the storage types, the plain loops and the dispatch
// here; F16C and AVX512-FP16 in cpu_reduce_f16.cc; AVX512-BF16 in
// cpu_reduce_bf16.cc; min and max by integer compares in cpu_reduce_select.cc;
// which path an op takes, and pinning one, in cpu_reduce_paths.cc.
#include "kernels/cpu_reduce.h"

#include <cassert>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu_reduce_internal.h"
#include "kernels/reduce_ops.h"

#if RCOLL_X86
#include <immintrin.h>
#endif

#if RCOLL_X86 && defined(__GNUC__) && !defined(__clang__)
#define RCOLL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RCOLL_CLONES
#endif

namespace rcoll::kernels {
namespace {

// The ops are written once for scalars and for GCC vector types (the F16C
// path, cpu_reduce_f16.cc, applies them to __m256 directly). Passing __m256 by value makes GCC
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

}  // namespace rcoll::kernels
