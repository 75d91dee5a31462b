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

}  // namespace rcoll::kernels
