// How PyTorch tensors become rcoll buffers: dtype and reduce-op mapping, and
// staging. rcoll moves host memory in contiguous buffers, so a tensor that is
// non-contiguous or lives on a GPU is staged through a contiguous host copy
// (copied in before the op, and back after it for outputs). Ops that only move
// data (broadcast, allgather, alltoall, send/recv) see every tensor as bytes,
// so they work for every dtype; reductions need a dtype rcoll can reduce.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

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

// A tensor as rcoll sees it: `host` is contiguous host memory holding the
// data (the user's own tensor when it already is, else a staging copy).
struct Staged {
  at::Tensor user;
  at::Tensor host;
  bool staged() const { return !host.is_same(user); }
  // Copies the host copy back into the user's tensor (outputs only).
  void copy_back() const;
};
// `fill`: copy the user's data into the staging copy (inputs); outputs skip it.
Staged stage(const at::Tensor& t, bool fill);

// Buffers over a staged tensor: typed for reductions, raw bytes for data movement.
Buffer typed_buffer(const at::Tensor& host, DataType dtype);
Buffer byte_buffer(const at::Tensor& host);

// Checks shared by every op: a dense, non-sparse tensor on CPU or CUDA.
void check_tensor(const at::Tensor& t, const OpName& who, const char* role);
void check_single(const std::vector<at::Tensor>& tensors, const OpName& who);
void check_same_layout(const at::Tensor& a, const at::Tensor& b, const OpName& who, const char* what);

// Does any of these tensors live on a device (its op then completes before returning)?
bool any_on_device(std::initializer_list<const at::Tensor*> tensors);
bool any_on_device(const std::vector<at::Tensor>& tensors);

}  // namespace rcoll::torch_backend
