// The collectives of RcollBackend: each c10d op checked, staged and issued
// as rcoll ops (see backend.h for how they complete). Scratch tensors live on
// the op's work device (tensors.h), so CUDA tensors never leave their GPU:
// copies into a scratch tensor are queued on the current stream (which the op
// waits for), copies out of it in the op's finalize (queued behind its verdict).
#include <algorithm>
#include <string>

#include <c10/util/Exception.h>

#include "backend.h"

namespace rcoll::torch_backend {
namespace {

// A contiguous tensor's bytes, as a flat uint8 tensor over the same memory
// (as_strided: a contiguous tensor's size-1 dims may carry any stride, which
// reshape would keep).
at::Tensor bytes_of(const at::Tensor& contiguous) {
  return contiguous.as_strided({contiguous.numel()}, {1}).view(at::kByte);
}

// A flat scratch tensor of `n` bytes on the work device of `like`.
at::Tensor scratch_bytes(const at::Tensor& like, int64_t n) {
  return at::empty({n}, work_options(like).dtype(at::kByte).memory_format(at::MemoryFormat::Contiguous));
}

// Bytes [at, at + nbytes(t)) of `flat` into the user's tensor `t`.
void copy_out(const at::Tensor& flat, int64_t at, const at::Tensor& t) {
  Staged o = stage(t, false);
  const int64_t nb = static_cast<int64_t>(o.work.nbytes());
  if (nb > 0) bytes_of(o.work).copy_(flat.narrow(0, at, nb));
  o.copy_back();
}

// The user's tensor `t` into bytes [at, ...) of `flat`.
void copy_in(const at::Tensor& flat, int64_t at, const at::Tensor& t) {
  Staged s = stage(t, true);
  const int64_t nb = static_cast<int64_t>(s.work.nbytes());
  if (nb > 0) flat.narrow(0, at, nb).copy_(bytes_of(s.work));
}

}  // namespace

RcollBackend::Pending RcollBackend::group_of(const OpName& w, std::vector<c10::intrusive_ptr<c10d::Work>> parts,
                                             const std::vector<at::Tensor>& outputs) {
  // The parts complete in order, each before the group (the completion
  // thread takes them first): waiting for them in the group's finalize
  // raises a part's error, and on a GPU makes the group's stream wait for theirs.
  return Pending{{}, {}, [parts] {
                   for (const auto& p : parts) p->wait();
                 },
                 make_work(c10d::OpType::COALESCED, w, outputs, outputs.empty() ? c10::Device(at::kCPU) : work_device(outputs[0]))};
}

// ------------------------------------------------------------------ reductions

c10::intrusive_ptr<c10d::Work> RcollBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const OpName w = who("allreduce");
  check_single(tensors, w);
  const at::Tensor& t = tensors[0];
  const DataType d = reduce_dtype(t, w);
  const ReduceOp op = reduce_op(opts.reduceOp, t, w);
  Staged s = stage(t, true);
  Buffer b = typed_buffer(s.work, d);
  Pending p{{comm(w).allreduce_async(b, b, op, op_options(s.work))}, {s.user, s.work}, [s] { s.copy_back(); },
            make_work(c10d::OpType::ALLREDUCE, w, tensors, work_device(t))};
  return launch(std::move(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                 const c10d::AllreduceCoalescedOptions& opts) {
  const OpName w = who("allreduce_coalesced");
  TORCH_CHECK_VALUE(!tensors.empty(), w.str(), ": no tensors");
  for (const auto& t : tensors) {
    check_tensor(t, w, "a");
    TORCH_CHECK_TYPE(t.scalar_type() == tensors[0].scalar_type(), w.str(), ": every tensor must have one dtype, got ",
                     tensors[0].scalar_type(), " and ", t.scalar_type());
  }
  check_one_device(tensors, w);
  const DataType d = reduce_dtype(tensors[0], w);
  const ReduceOp op = reduce_op(opts.reduceOp, tensors[0], w);
  // One flat buffer, one core op: the way DDP's buckets work too.
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : tensors) flat_parts.push_back(t.reshape({-1}).to(work_device(t)));
  at::Tensor flat = at::cat(flat_parts);
  Buffer b = typed_buffer(flat, d);
  std::vector<at::Tensor> outs = tensors;
  Pending p{{comm(w).allreduce_async(b, b, op, op_options(flat))}, {flat}, [flat, outs] {
              int64_t at = 0;
              for (const auto& t : outs) {
                t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
                at += t.numel();
              }
            },
            make_work(c10d::OpType::ALLREDUCE_COALESCED, w, tensors, work_device(tensors[0]))};
  return launch(std::move(p));
}

// Reduce is allreduce with the result kept on the root only: non-roots reduce
// into a scratch tensor, so their input is left as it was. It moves about
// twice the bytes a tree reduce would, and gets allreduce's recovery for free.
c10::intrusive_ptr<c10d::Work> RcollBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const OpName w = who("reduce");
  check_single(tensors, w);
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < getSize(), w.str(), ": root ", root, " is out of range");
  const at::Tensor& t = tensors[0];
  const DataType d = reduce_dtype(t, w);
  const ReduceOp op = reduce_op(opts.reduceOp, t, w);
  Staged s = stage(t, true);
  Buffer in = typed_buffer(s.work, d);
  if (getRank() == root) {
    Pending p{{comm(w).allreduce_async(in, in, op, op_options(s.work))}, {s.user, s.work}, [s] { s.copy_back(); },
              make_work(c10d::OpType::REDUCE, w, tensors, work_device(t))};
    return launch(std::move(p));
  }
  at::Tensor scratch = at::empty_like(s.work);
  Pending p{{comm(w).allreduce_async(in, typed_buffer(scratch, d), op, op_options(s.work))}, {s.user, s.work, scratch}, nullptr,
            make_work(c10d::OpType::REDUCE, w, tensors, work_device(t))};
  return launch(std::move(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::ReduceScatterOptions& opts) {
  const OpName w = who("reduce_scatter_tensor");
  check_tensor(output, w, "output");
  check_tensor(input, w, "input");
  check_one_device({&input, &output}, w);
  TORCH_CHECK_TYPE(input.scalar_type() == output.scalar_type(), w.str(), ": input dtype ", input.scalar_type(),
                   " differs from output dtype ", output.scalar_type());
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(), w.str(), ": input must have world size x output = ",
                    output.numel() * getSize(), " elements, has ", input.numel());
  const DataType d = reduce_dtype(output, w);
  const ReduceOp op = reduce_op(opts.reduceOp, output, w);
  Staged in = stage(input, true), out = stage(output, false);
  Pending p{{comm(w).reduce_scatter_async(typed_buffer(in.work, d), typed_buffer(out.work, d), op, op_options(in.work))},
            {in.user, in.work, out.user, out.work},
            [out] { out.copy_back(); },
            make_work(c10d::OpType::_REDUCE_SCATTER_BASE, w, {output}, work_device(output))};
  return launch(std::move(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                            std::vector<std::vector<at::Tensor>>& inputs,
                                                            const c10d::ReduceScatterOptions& opts) {
  const OpName w = who("reduce_scatter");
  check_single(outputs, w);
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), w.str(),
                    ": expects one list of world-size (", getSize(), ") input tensors");
  for (const auto& t : inputs[0]) check_same_layout(outputs[0], t, w, "an input");
  check_one_device(inputs[0], w);
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs[0]) parts.push_back(t.reshape({-1}).to(work_device(t)));
  at::Tensor flat = at::cat(parts);
  return _reduce_scatter_base(outputs[0], flat, opts);
}

c10::intrusive_ptr<c10d::Work> RcollBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::ReduceScatterOptions& opts) {
  const OpName w = who("reduce_scatter_tensor_coalesced");
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), w.str(), ": ", outputs.size(), " outputs for ", inputs.size(), " inputs");
  std::vector<c10::intrusive_ptr<c10d::Work>> parts;
  for (size_t i = 0; i < outputs.size(); ++i) parts.push_back(_reduce_scatter_base(outputs[i], inputs[i], opts));
  return launch(group_of(w, parts, outputs));
}

// ------------------------------------------------------------------ data movement

c10::intrusive_ptr<c10d::Work> RcollBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const OpName w = who("broadcast");
  check_single(tensors, w);
  const int root = static_cast<int>(opts.rootRank + opts.rootTensor);
  TORCH_CHECK_VALUE(root >= 0 && root < getSize(), w.str(), ": root ", root, " is out of range");
  const at::Tensor& t = tensors[0];
  const bool is_root = getRank() == root;
  Staged s = stage(t, is_root);
  Pending p{{comm(w).broadcast_async(byte_buffer(s.work), root, op_options(s.work))}, {s.user, s.work},
            [s, is_root] {
              if (!is_root) s.copy_back();
            },
            make_work(c10d::OpType::BROADCAST, w, tensors, work_device(t))};
  return launch(std::move(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions&) {
  const OpName w = who("allgather_into_tensor");
  check_tensor(output, w, "output");
  check_tensor(input, w, "input");
  check_one_device({&input, &output}, w);
  TORCH_CHECK_TYPE(input.scalar_type() == output.scalar_type(), w.str(), ": input dtype ", input.scalar_type(),
                   " differs from output dtype ", output.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), w.str(), ": output must have world size x input = ",
                    input.numel() * getSize(), " elements, has ", output.numel());
  Staged in = stage(input, true), out = stage(output, false);
  Pending p{{comm(w).allgather_async(byte_buffer(in.work), byte_buffer(out.work), op_options(in.work))},
            {in.user, in.work, out.user, out.work},
            [out] { out.copy_back(); },
            make_work(c10d::OpType::_ALLGATHER_BASE, w, {output}, work_device(output))};
  return launch(std::move(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  const OpName w = who("allgather");
  check_single(inputs, w);
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), w.str(),
                    ": expects one list of world-size (", getSize(), ") output tensors");
  for (const auto& t : outputs[0]) {
    check_tensor(t, w, "an output");
    check_same_layout(inputs[0], t, w, "an output");
    check_one_device({&inputs[0], &t}, w);
  }
  Staged in = stage(inputs[0], true);
  const int64_t nb = static_cast<int64_t>(in.work.nbytes());
  at::Tensor flat = scratch_bytes(inputs[0], nb * getSize());
  std::vector<at::Tensor> outs = outputs[0];
  Pending p{{comm(w).allgather_async(byte_buffer(in.work), byte_buffer(flat), op_options(in.work))}, {in.user, in.work, flat},
            [flat, outs, nb] {
              for (size_t q = 0; q < outs.size(); ++q) copy_out(flat, static_cast<int64_t>(q) * nb, outs[q]);
            },
            make_work(c10d::OpType::ALLGATHER, w, outs, work_device(inputs[0]))};
  return launch(std::move(p));
}

// Every rank's inputs, flattened into one byte buffer, gathered in one core op.
c10::intrusive_ptr<c10d::Work> RcollBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                 std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  const OpName w = who("allgather_coalesced");
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == getSize(), w.str(), ": expects world-size (", getSize(),
                    ") output lists, got ", outputs.size());
  TORCH_CHECK_VALUE(!inputs.empty(), w.str(), ": no input tensors");
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs) {
    check_tensor(t, w, "an input");
    parts.push_back(bytes_of(t.contiguous().to(work_device(t))));
  }
  check_one_device(inputs, w);
  for (const auto& list : outputs) {
    TORCH_CHECK_VALUE(list.size() == inputs.size(), w.str(), ": every output list must have ", inputs.size(), " tensors");
    for (size_t i = 0; i < list.size(); ++i) {
      check_same_layout(inputs[i], list[i], w, "an output");
      check_one_device({&inputs[0], &list[i]}, w);
    }
  }
  at::Tensor flat_in = at::cat(parts);
  const int64_t nb = static_cast<int64_t>(flat_in.nbytes());
  at::Tensor flat = scratch_bytes(inputs[0], nb * getSize());
  std::vector<std::vector<at::Tensor>> outs = outputs;
  std::vector<at::Tensor> all_outs;
  for (const auto& l : outs) all_outs.insert(all_outs.end(), l.begin(), l.end());
  Pending p{{comm(w).allgather_async(byte_buffer(flat_in), byte_buffer(flat), op_options(flat_in))}, {flat_in, flat},
            [flat, outs, nb] {
              for (size_t q = 0; q < outs.size(); ++q) {
                int64_t at = static_cast<int64_t>(q) * nb;
                for (const auto& t : outs[q]) {
                  copy_out(flat, at, t);
                  at += static_cast<int64_t>(t.nbytes());
                }
              }
            },
            make_work(c10d::OpType::ALLGATHER_COALESCED, w, all_outs, work_device(inputs[0]))};
  return launch(std::move(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::AllgatherOptions& opts) {
  const OpName w = who("allgather_into_tensor_coalesced");
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), w.str(), ": ", outputs.size(), " outputs for ", inputs.size(), " inputs");
  std::vector<c10::intrusive_ptr<c10d::Work>> parts;
  for (size_t i = 0; i < outputs.size(); ++i) parts.push_back(_allgather_base(outputs[i], inputs[i], opts));
  return launch(group_of(w, parts, outputs));
}

// Gather as an allgather whose result only the root keeps: p times the bytes
// a direct gather needs, with allgather's recovery.
c10::intrusive_ptr<c10d::Work> RcollBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const OpName w = who("gather");
  check_single(inputs, w);
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < getSize(), w.str(), ": root ", root, " is out of range");
  std::vector<at::Tensor> outs;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), w.str(),
                      ": the root expects one list of world-size (", getSize(), ") output tensors");
    for (const auto& t : outputs[0]) {
      check_same_layout(inputs[0], t, w, "an output");
      check_one_device({&inputs[0], &t}, w);
    }
    outs = outputs[0];
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), w.str(), ": only the root (", root, ") takes outputs");
  }
  Staged in = stage(inputs[0], true);
  const int64_t nb = static_cast<int64_t>(in.work.nbytes());
  at::Tensor flat = scratch_bytes(inputs[0], nb * getSize());
  Pending p{{comm(w).allgather_async(byte_buffer(in.work), byte_buffer(flat), op_options(in.work))}, {in.user, in.work, flat},
            [flat, outs, nb] {
              for (size_t q = 0; q < outs.size(); ++q) copy_out(flat, static_cast<int64_t>(q) * nb, outs[q]);
            },
            make_work(c10d::OpType::GATHER, w, outs, work_device(inputs[0]))};
  return launch(std::move(p));
}

// Scatter as a broadcast of the root's concatenated inputs, of which each rank
// keeps its block: p times the bytes a direct scatter needs.
c10::intrusive_ptr<c10d::Work> RcollBackend::scatter(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  const OpName w = who("scatter");
  check_single(outputs, w);
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < getSize(), w.str(), ": root ", root, " is out of range");
  const int64_t nb = static_cast<int64_t>(outputs[0].nbytes());
  at::Tensor flat = scratch_bytes(outputs[0], nb * getSize());
  if (getRank() == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), w.str(),
                      ": the root expects one list of world-size (", getSize(), ") input tensors");
    for (size_t q = 0; q < inputs[0].size(); ++q) {
      check_same_layout(outputs[0], inputs[0][q], w, "an input");
      check_one_device({&outputs[0], &inputs[0][q]}, w);
      copy_in(flat, static_cast<int64_t>(q) * nb, inputs[0][q]);
    }
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), w.str(), ": only the root (", root, ") takes inputs");
  }
  at::Tensor out = outputs[0];
  const int64_t rank = getRank();
  Pending p{{comm(w).broadcast_async(byte_buffer(flat), root, op_options(flat))}, {flat},
            [flat, out, nb, rank] { copy_out(flat, rank * nb, out); },
            make_work(c10d::OpType::SCATTER, w, outputs, work_device(outputs[0]))};
  return launch(std::move(p));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::alltoallv(const OpName& w, c10d::OpType type, std::vector<at::Tensor> outputs,
                                                       std::vector<Staged> sends, std::vector<Staged> recvs,
                                                       std::function<void()> after) {
  const int p = getSize(), r = getRank();
  // Who sends how many bytes to whom: every rank's row of the matrix (a small host op).
  at::Tensor mine = at::empty({p}, at::kLong), matrix = at::empty({p * p}, at::kLong);
  for (int j = 0; j < p; ++j) mine.data_ptr<int64_t>()[j] = static_cast<int64_t>(sends[j].work.nbytes());
  Status s = comm(w).allgather_async(typed_buffer(mine, DataType::kInt64), typed_buffer(matrix, DataType::kInt64)).wait();
  if (!s.ok()) std::rethrow_exception(backend_error(w.str() + " failed while exchanging block sizes: " + s.to_string()));
  const int64_t* m = matrix.data_ptr<int64_t>();
  int64_t block = 0;
  for (int i = 0; i < p * p; ++i) block = std::max(block, m[i]);
  for (int q = 0; q < p; ++q) {
    TORCH_CHECK_VALUE(m[q * p + r] == static_cast<int64_t>(recvs[q].work.nbytes()), w.str(), ": rank ", q, " sends ",
                      m[q * p + r], " bytes to this rank, but the output split for rank ", q, " holds ",
                      recvs[q].work.nbytes(), " bytes");
  }
  const at::Tensor& like = outputs.front();
  at::Tensor in = scratch_bytes(like, block * p), out = scratch_bytes(like, block * p);
  for (int j = 0; j < p; ++j) {
    const int64_t nb = static_cast<int64_t>(sends[j].work.nbytes());
    if (nb > 0) in.narrow(0, j * block, nb).copy_(bytes_of(sends[j].work));
  }
  std::vector<at::Tensor> keep = {in, out};
  for (const auto& x : sends) keep.push_back(x.work);
  for (const auto& x : recvs) keep.push_back(x.work);
  Pending pend{{comm(w).alltoall_async(byte_buffer(in), byte_buffer(out), op_options(in))}, keep,
               [out, recvs, block, after] {
                 for (size_t q = 0; q < recvs.size(); ++q) {
                   const int64_t nb = static_cast<int64_t>(recvs[q].work.nbytes());
                   if (nb > 0) bytes_of(recvs[q].work).copy_(out.narrow(0, static_cast<int64_t>(q) * block, nb));
                   recvs[q].copy_back();
                 }
                 if (after) after();
               },
               make_work(type, w, outputs, work_device(like))};
  return launch(std::move(pend));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                           std::vector<int64_t>& output_splits,
                                                           std::vector<int64_t>& input_splits, const c10d::AllToAllOptions&) {
  const OpName w = who("alltoall_base");
  check_tensor(output, w, "output");
  check_tensor(input, w, "input");
  check_one_device({&input, &output}, w);
  TORCH_CHECK_TYPE(input.scalar_type() == output.scalar_type(), w.str(), ": input dtype ", input.scalar_type(),
                   " differs from output dtype ", output.scalar_type());
  const int p = getSize();
  if (output_splits.empty() && input_splits.empty()) {
    // Equal blocks: one core alltoall over the raw bytes.
    TORCH_CHECK_VALUE(input.numel() == output.numel(), w.str(), ": input has ", input.numel(), " elements, output ",
                      output.numel());
    TORCH_CHECK_VALUE(input.dim() == 0 ? p == 1 : input.size(0) % p == 0, w.str(), ": dim 0 of the input (",
                      input.dim() == 0 ? 0 : input.size(0), ") does not split into ", p, " equal blocks");
    Staged in = stage(input, true), out = stage(output, false);
    Pending pend{{comm(w).alltoall_async(byte_buffer(in.work), byte_buffer(out.work), op_options(in.work))},
                 {in.user, in.work, out.user, out.work},
                 [out] { out.copy_back(); },
                 make_work(c10d::OpType::ALLTOALL_BASE, w, {output}, work_device(output))};
    return launch(std::move(pend));
  }
  // Uneven splits along dim 0.
  auto rows = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    TORCH_CHECK_VALUE(t.dim() >= 1, w.str(), ": ", what, " needs at least one dimension to split");
    std::vector<int64_t> r = splits;
    if (r.empty()) {
      TORCH_CHECK_VALUE(t.size(0) % p == 0, w.str(), ": dim 0 of the ", what, " (", t.size(0), ") does not split into ", p,
                        " equal blocks");
      r.assign(p, t.size(0) / p);
    }
    TORCH_CHECK_VALUE(static_cast<int>(r.size()) == p, w.str(), ": ", what, " splits have ", r.size(), " entries, expected ", p);
    int64_t sum = 0;
    for (int64_t x : r) sum += x;
    TORCH_CHECK_VALUE(sum == t.size(0), w.str(), ": ", what, " splits add up to ", sum, " but dim 0 is ", t.size(0));
    return r;
  };
  const auto in_rows = rows(input, input_splits, "input"), out_rows = rows(output, output_splits, "output");
  Staged in = stage(input, true), out = stage(output, false);
  std::vector<Staged> sends, recvs;
  int64_t at = 0;
  for (int j = 0; j < p; ++j) {
    at::Tensor piece = in.work.narrow(0, at, in_rows[j]);
    sends.push_back(Staged{piece, piece});
    at += in_rows[j];
  }
  at = 0;
  for (int q = 0; q < p; ++q) {
    at::Tensor piece = out.work.narrow(0, at, out_rows[q]);
    recvs.push_back(Staged{piece, piece});
    at += out_rows[q];
  }
  // A staged output goes back whole once every block has landed in it.
  return alltoallv(w, c10d::OpType::ALLTOALL_BASE, {output}, std::move(sends), std::move(recvs), [out] { out.copy_back(); });
}

c10::intrusive_ptr<c10d::Work> RcollBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                      const c10d::AllToAllOptions&) {
  const OpName w = who("alltoall");
  const int p = getSize();
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == p && static_cast<int>(inputs.size()) == p, w.str(),
                    ": expects world-size (", p, ") input and output tensors, got ", inputs.size(), " and ", outputs.size());
  std::vector<Staged> sends, recvs;
  for (int q = 0; q < p; ++q) {
    check_tensor(inputs[q], w, "an input");
    check_tensor(outputs[q], w, "an output");
    check_one_device({&inputs[0], &inputs[q], &outputs[q]}, w);
    TORCH_CHECK_TYPE(inputs[q].scalar_type() == outputs[q].scalar_type(), w.str(), ": input dtype ",
                     inputs[q].scalar_type(), " differs from output dtype ", outputs[q].scalar_type());
    sends.push_back(stage(inputs[q], true));
    recvs.push_back(stage(outputs[q], false));
  }
  return alltoallv(w, c10d::OpType::ALLTOALL, outputs, std::move(sends), std::move(recvs), nullptr);
}

}  // namespace rcoll::torch_backend
