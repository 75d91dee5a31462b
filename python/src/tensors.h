// How PyTorch tensors become rcoll buffers: dtype and reduce-op mapping, and
// the "work" tensor an op runs on. rcoll takes contiguous buffers, so a
// non-contiguous tensor runs on a contiguous copy (copied in before the op,
// and back after it for outputs). A CUDA tensor stays on its GPU and its op
// runs on NCCL, ordered after the work on the current stream (when the
// extension is built with CUDA: RCOLL_TORCH_CUDA); without CUDA in the build,
// CUDA tensors are staged through host memory. Ops that only move data
// (broadcast, allgather, alltoall, send/recv) see every tensor as bytes, so
// they work for every dtype; reductions need a dtype rcoll can reduce.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "rcoll/options.h"
#include "rcoll/types.h"

namespace rcoll::torch_backend {

// Who is asking, for error messages: "rcoll allreduce on rank 1 of 4".
struct OpName {
  const char* op;
  int rank;
  int size;
  std::string str() const;
};

// The rcoll dtype a reduction over `t` runs in (complex tensors reduce as
// their real and imaginary parts). Throws c10::TypeError naming the op, the
// rank and the dtype when rcoll cannot reduce it.
DataType reduce_dtype(const at::Tensor& t, const OpName& who);
// Maps PyTorch's reduce op; throws c10::ValueError for ops rcoll lacks
// (bitwise and/or/xor, premul_sum) or that do not fit the dtype.
ReduceOp reduce_op(const c10d::ReduceOp& op, const at::Tensor& t, const OpName& who);

// Whether this extension runs CUDA tensors on the GPU (else it stages them).
bool device_ops_built();

// Where the op on a tensor runs: its own CUDA device, or the CPU (host
// tensors, and CUDA tensors in a build without device ops).
c10::Device work_device(const at::Tensor& t);
// Options for a scratch tensor of the op on `like` (its work device).
at::TensorOptions work_options(const at::Tensor& like);

// A tensor as rcoll sees it: `work` is contiguous memory on the work device
// holding the data (the user's own tensor when it already is, else a copy).
struct Staged {
  at::Tensor user;
  at::Tensor work;
  bool staged() const { return !work.is_same(user); }
  // Copies the work copy back into the user's tensor (outputs only). On a
  // GPU it is queued on the current stream.
  void copy_back() const;
};
// `fill`: copy the user's data into the work copy (inputs); outputs skip it.
// A copy on a GPU is queued on the current stream, which the op waits for.
Staged stage(const at::Tensor& t, bool fill);

// Buffers over a work tensor: typed for reductions, raw bytes for data movement.
Buffer typed_buffer(const at::Tensor& work, DataType dtype);
Buffer byte_buffer(const at::Tensor& work);
// The op's options: on a GPU, ordered after the current stream of its device.
OpOptions op_options(const at::Tensor& work);

// Checks shared by every op: a dense, non-sparse tensor on CPU or CUDA.
void check_tensor(const at::Tensor& t, const OpName& who, const char* role);
void check_single(const std::vector<at::Tensor>& tensors, const OpName& who);
void check_same_layout(const at::Tensor& a, const at::Tensor& b, const OpName& who, const char* what);
// Every tensor of one op on one device: rcoll runs an op on the GPU or on the
// host, not across both. Throws c10::ValueError naming the two devices.
void check_one_device(std::initializer_list<const at::Tensor*> tensors, const OpName& who);
void check_one_device(const std::vector<at::Tensor>& tensors, const OpName& who);

}  // namespace rcoll::torch_backend
