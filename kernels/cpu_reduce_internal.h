// Private to the host reduction kernels: what cpu_reduce.cc (the plain loops
// and the dispatch) shares with the files of the float16 and bfloat16 vector
// paths (cpu_reduce_f16.cc, cpu_reduce_bf16.cc, cpu_reduce_select.cc) and of
// the path choice (cpu_reduce_paths.cc). Each vector path is a template over
// the op, instantiated in its own file for the ops the dispatch calls it with.
//
// A declaration here carries the same target attribute as its definition: in
// C++, GCC takes a function declared with another (or no) target attribute
// for a second version of it (function multiversioning).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu_reduce.h"
#include "rcoll/types.h"

#if defined(__x86_64__)
#define RCOLL_X86 1
#else
#define RCOLL_X86 0
#endif

// AVX512-FP16 (Sapphire Rapids and later): GCC 12 knows it under a target
// attribute; Clang only from 18 (before that its intrinsics need
// -mavx512fp16 for the whole file, and __builtin_cpu_supports has no name
// for it). AVX512-BF16 with the same compilers.
#if RCOLL_X86 && ((defined(__clang__) && __clang_major__ >= 18) || \
                  (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12))
#define RCOLL_AVX512FP16 1
#define RCOLL_FP16_ISA "avx512fp16,avx512bw,avx512vl,avx512f"
#define RCOLL_AVX512BF16 1
#define RCOLL_BF16_ISA "avx512bf16,avx512dq,avx512bw,avx512f"
#endif

#if RCOLL_X86
#define RCOLL_F16C_ISA "avx2,f16c"
#define RCOLL_BW_ISA "avx512bw,avx512f"
#define RCOLL_AVX2_ISA "avx2"
#endif

namespace rcoll::kernels {

// Min and max, the ops that select an operand rather than compute a value.
inline bool is_select(ReduceOp op) { return op == ReduceOp::kMin || op == ReduceOp::kMax; }

// The path a float16 or bfloat16 op takes (cpu_reduce_paths.cc), for min and
// max when `select`.
Float16Path f16_path(bool select);
Bfloat16Path bf16_path(bool select);

// Each vector path computes dst = a op b on n elements; dst may alias a or b.

#if RCOLL_X86
// float16 through F16C, any op (cpu_reduce_f16.cc).
template <typename Op>
__attribute__((target(RCOLL_F16C_ISA))) void f16c_reduce(uint16_t* dst, const uint16_t* a,
                                                         const uint16_t* b, size_t n);
// dst[i] /= divisor in float32.
__attribute__((target(RCOLL_F16C_ISA))) void f16c_scale(uint16_t* dst, size_t n, int divisor);
bool has_f16c();
#endif

#if RCOLL_AVX512FP16
// float16 sum and prod in float16 arithmetic (cpu_reduce_f16.cc).
template <typename Op>
__attribute__((target(RCOLL_FP16_ISA))) void fp16_reduce(uint16_t* dst, const uint16_t* a,
                                                         const uint16_t* b, size_t n);
bool has_avx512fp16();
#endif

#if RCOLL_AVX512BF16
// bfloat16 sum and prod, rounded by VCVTNE2PS2BF16 (cpu_reduce_bf16.cc).
template <typename Op>
__attribute__((target(RCOLL_BF16_ISA))) void bf16_reduce(uint16_t* dst, const uint16_t* a,
                                                         const uint16_t* b, size_t n);
bool has_avx512bf16();
#endif

#if RCOLL_X86
// float16 and bfloat16 min and max by integer compares (cpu_reduce_select.cc).

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

// kDaz: a subnormal keyed as zero, as the float32 compare sees it under
// MXCSR.DAZ (bfloat16 only).
template <typename Bits, typename Op, bool kDaz = false>
__attribute__((target(RCOLL_BW_ISA))) void select_reduce(uint16_t* dst, const uint16_t* a,
                                                         const uint16_t* b, size_t n);
template <typename Bits, typename Op, bool kDaz = false>
__attribute__((target(RCOLL_AVX2_ISA))) void select_reduce_avx2(uint16_t* dst, const uint16_t* a,
                                                                const uint16_t* b, size_t n);
bool has_avx512bw();
bool has_avx2();
#endif

}  // namespace rcoll::kernels
