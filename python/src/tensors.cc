#include "tensors.h"

#include <c10/util/Exception.h>

#include "streams.h"

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

bool device_ops_built() {
#ifdef RCOLL_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

c10::Device work_device(const at::Tensor& t) {
  return device_ops_built() && t.device().is_cuda() ? t.device() : c10::Device(at::kCPU);
}

at::TensorOptions work_options(const at::Tensor& like) { return like.options().device(work_device(like)); }

void Staged::copy_back() const {
  if (staged()) user.copy_(work.view(user.sizes()));
}

Staged stage(const at::Tensor& t, bool fill) {
  const c10::Device where = work_device(t);
  if (t.device() == where && t.is_contiguous()) return Staged{t, t};
  at::Tensor work = at::empty(t.sizes(), t.options().device(where).memory_format(at::MemoryFormat::Contiguous));
  if (fill) work.copy_(t);
  return Staged{t, work};
}

namespace {

MemoryKind memory_of(const at::Tensor& work) { return work.device().is_cuda() ? MemoryKind::kCuda : MemoryKind::kHost; }

}  // namespace

Buffer typed_buffer(const at::Tensor& work, DataType dtype) {
  const size_t count = static_cast<size_t>(work.numel()) * (work.is_complex() ? 2 : 1);
  return Buffer{work.data_ptr(), count, dtype, memory_of(work)};
}

Buffer byte_buffer(const at::Tensor& work) {
  return Buffer{work.data_ptr(), static_cast<size_t>(work.nbytes()), DataType::kUint8, memory_of(work)};
}

OpOptions op_options(const at::Tensor& work) {
  OpOptions o;
  if (work.device().is_cuda()) o.cuda_stream = native(current_stream(work.device()));
  return o;
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

void check_one_device(std::initializer_list<const at::Tensor*> ts, const OpName& who) {
  const at::Tensor* first = nullptr;
  for (const at::Tensor* t : ts) {
    if (!t->defined()) continue;
    if (first == nullptr) {
      first = t;
      continue;
    }
    TORCH_CHECK_VALUE(t->device() == first->device(), who.str(), ": its tensors are on ", first->device(), " and ",
                      t->device(), "; rcoll runs one op on one device (move them to one first)");
  }
}

void check_one_device(const std::vector<at::Tensor>& ts, const OpName& who) {
  for (const auto& t : ts) check_one_device({&ts.front(), &t}, who);
}

}  // namespace rcoll::torch_backend
