// Element-wise reduction kernels on host memory, for every DataType x ReduceOp.
// float16 and bfloat16 are computed in float32 and rounded to nearest even once
// per element per call. Integer sum and prod wrap around (two's complement), as
// in NCCL. kAvg is not a kernel: callers reduce with kSum and then call scale_avg.
#pragma once

#include <cstddef>

#include "rcoll/types.h"

namespace rcoll::kernels {

// dst[i] = dst[i] op src[i]
void reduce_inplace(DataType dtype, ReduceOp op, void* dst, const void* src, size_t count);

// dst[i] = a[i] op b[i]. dst may alias a or b.
void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);

// dst[i] = dst[i] / divisor, for floating types (the last step of kAvg).
void scale_avg(DataType dtype, void* dst, size_t count, int divisor);

// kAvg on integer types is refused (it would silently truncate).
bool supports(DataType dtype, ReduceOp op);

// How float16 is computed. kBest, the default, takes the fastest the CPU has:
// AVX512-FP16 for sum and prod, integer compares for min and max (AVX-512BW,
// else AVX2), F16C for whatever the CPU lacks those for, the portable
// conversions without F16C. A pinned path that does not compute an op
// (kAvx512Fp16 for min and max, kAvx512Bw and kAvx2 for the rest) leaves that
// op to kBest's choice. Every path
// gives the same bits, but for which of two NaN operands comes back
// (cpu_reduce.cc); tests and benchmarks pin each in turn (pinning an
// unavailable one means kPortable). Process-wide.
enum class Float16Path { kBest, kAvx512Fp16, kAvx512Bw, kAvx2, kF16c, kPortable };
bool float16_path_available(Float16Path path);
void pin_float16_path(Float16Path path);
// "best", "avx512fp16", "avx512bw", "avx2", "f16c" or "portable".
const char* to_string(Float16Path path);
// The path a float16 reduce with op takes now: "avx512fp16", "avx512bw", "avx2",
// "f16c" or "portable".
const char* float16_path_name(ReduceOp op);

// How bfloat16 is reduced, as for float16. kBest: AVX512-BF16's rounding
// instruction for sum and prod where the CPU has it (blocks with a subnormal
// result round with integer operations, as the instruction would flush
// them), integer compares for min and max (AVX-512BW, else AVX2), else
// kPortable, integer rounding that the compiler vectorises. Same bits on
// every path, but for which of two NaN operands comes back. Process-wide.
enum class Bfloat16Path { kBest, kAvx512Bf16, kAvx512Bw, kAvx2, kPortable };
bool bfloat16_path_available(Bfloat16Path path);
void pin_bfloat16_path(Bfloat16Path path);
// "best", "avx512bf16", "avx512bw", "avx2" or "portable".
const char* to_string(Bfloat16Path path);
// The path a bfloat16 reduce with op takes now: "avx512bf16", "avx512bw",
// "avx2" or "portable".
const char* bfloat16_path_name(ReduceOp op);

}  // namespace rcoll::kernels
