// Element-wise reduction kernels on device memory, for every DataType x ReduceOp,
// launched on the caller's CUDA stream: the same semantics as the host kernels
// (kernels/cpu_reduce.h), so a reduction gives the same bits wherever it runs:
// integer sum and prod wrap around, float min/max propagate NaN, float16 and
// bfloat16 are combined in float32 and rounded to nearest even once. kAvg is the
// sum; scale_avg divides afterwards.
//
// This header needs no CUDA headers: streams travel as void* (a cudaStream_t;
// nullptr is the legacy default stream). Every call only enqueues work; errors
// are launch errors (a bad configuration, no device), named in the Status.
#pragma once

#include <cstddef>

#include "rcoll/status.h"
#include "rcoll/types.h"

namespace rcoll::kernels::cuda {

// dst[i] = a[i] op b[i], count elements, all three device pointers. dst may alias a or b.
Status reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count, void* stream);

// dst[i] = dst[i] / divisor, floating types only (the last step of kAvg).
Status scale_avg(DataType dtype, void* dst, size_t count, int divisor, void* stream);

}  // namespace rcoll::kernels::cuda
