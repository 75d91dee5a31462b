#include "tensors.h"

#include <c10/util/Exception.h>

namespace rcoll::torch_backend {

std::string OpName::str() const {
  return std::string("rcoll ") + op + " on rank " + std::to_string(rank) + " of " + std::to_string(size);
}

namespace {

std::optional<DataType> map_dtype(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBfloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUint8;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kUInt32: return DataType::kUint32;
    case at::kUInt64: return DataType::kUint64;
    case at::kComplexFloat: return DataType::kFloat32;   // as (re, im) pairs
    case at::kComplexDouble: return DataType::kFloat64;
    default: return std::nullopt;
  }
}

}  // namespace

DataType reduce_dtype(const at::Tensor& t, const OpName& who) {
  auto d = map_dtype(t.scalar_type());
  TORCH_CHECK_TYPE(d.has_value(), who.str(), ": cannot reduce tensors of dtype ", t.scalar_type(),
                   " (rcoll reduces float32, float64, float16, bfloat16, int8, uint8, int32, int64, uint32, uint64 "
                   "and complex64/128 with sum or avg); data-movement ops take every dtype");
  return *d;
}

ReduceOp reduce_op(const c10d::ReduceOp& op, const at::Tensor& t, const OpName& who) {
  ReduceOp r = ReduceOp::kSum;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r = ReduceOp::kSum; break;
    case c10d::ReduceOp::AVG: r = ReduceOp::kAvg; break;
    case c10d::ReduceOp::PRODUCT: r = ReduceOp::kProd; break;
    case c10d::ReduceOp::MIN: r = ReduceOp::kMin; break;
    case c10d::ReduceOp::MAX: r = ReduceOp::kMax; break;
    default:
      TORCH_CHECK_VALUE(false, who.str(), ": reduce op ", static_cast<int>(op.op_),
                        " (BAND/BOR/BXOR/PREMUL_SUM) is not supported by rcoll; use SUM, AVG, PRODUCT, MIN or MAX");
  }
  if (t.is_complex()) {
    TORCH_CHECK_VALUE(r == ReduceOp::kSum || r == ReduceOp::kAvg, who.str(), ": complex tensors reduce with SUM or AVG only, not ",
                      to_string(r));
  }
  if (r == ReduceOp::kAvg) {
    TORCH_CHECK_TYPE(t.is_floating_point() || t.is_complex(), who.str(), ": AVG of ", t.scalar_type(),
                     " would truncate; rcoll averages floating-point tensors only (use SUM)");
  }
  return r;
}

void Staged::copy_back() const {
  if (staged()) user.copy_(host.view(user.sizes()));
}

Staged stage(const at::Tensor& t, bool fill) {
  if (t.device().is_cpu() && t.is_contiguous()) return Staged{t, t};
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).memory_format(at::MemoryFormat::Contiguous));
  if (fill) host.copy_(t);
  return Staged{t, host};
}

Buffer typed_buffer(const at::Tensor& host, DataType dtype) {
  const size_t count = static_cast<size_t>(host.numel()) * (host.is_complex() ? 2 : 1);
  return Buffer{host.data_ptr(), count, dtype, MemoryKind::kHost};
}

Buffer byte_buffer(const at::Tensor& host) {
  return Buffer{host.data_ptr(), static_cast<size_t>(host.nbytes()), DataType::kUint8, MemoryKind::kHost};
}

void check_tensor(const at::Tensor& t, const OpName& who, const char* role) {
  TORCH_CHECK_VALUE(t.defined(), who.str(), ": ", role, " tensor is undefined");
  TORCH_CHECK_NOT_IMPLEMENTED(t.layout() == at::kStrided, who.str(), ": ", role, " tensor has layout ", t.layout(),
                              "; rcoll takes dense (strided) tensors only");
  TORCH_CHECK_NOT_IMPLEMENTED(t.device().is_cpu() || t.device().is_cuda(), who.str(), ": ", role, " tensor is on ",
                              t.device(), "; rcoll takes CPU and CUDA tensors");
}

void check_single(const std::vector<at::Tensor>& tensors, const OpName& who) {
  TORCH_CHECK_VALUE(tensors.size() == 1, who.str(), ": expects exactly one tensor per call, got ", tensors.size(),
                    " (multi-tensor-per-process calls are not supported)");
  check_tensor(tensors[0], who, "the");
}

void check_same_layout(const at::Tensor& a, const at::Tensor& b, const OpName& who, const char* what) {
  TORCH_CHECK_VALUE(a.scalar_type() == b.scalar_type(), who.str(), ": ", what, " dtype ", b.scalar_type(),
                    " differs from ", a.scalar_type());
  TORCH_CHECK_VALUE(a.numel() == b.numel(), who.str(), ": ", what, " has ", b.numel(), " elements, expected ", a.numel());
}

bool any_on_device(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts)
    if (t->defined() && !t->device().is_cpu()) return true;
  return false;
}

bool any_on_device(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts)
    if (t.defined() && !t.device().is_cpu()) return true;
  return false;
}

}  // namespace rcoll::torch_backend
