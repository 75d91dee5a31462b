// The collectives of RcollBackend: each c10d op checked, staged and issued
// as rcoll ops (see backend.h for how they complete).
#include <algorithm>
#include <cstring>
#include <string>

#include <c10/util/Exception.h>

#include "backend.h"

namespace rcoll::torch_backend {

// ------------------------------------------------------------------ reductions

c10::intrusive_ptr<c10d::Work> RcollBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const OpName w = who("allreduce");
  check_single(tensors, w);
  const at::Tensor& t = tensors[0];
  const DataType d = reduce_dtype(t, w);
  const ReduceOp op = reduce_op(opts.reduceOp, t, w);
  Staged s = stage(t, true);
  Buffer b = typed_buffer(s.host, d);
  Pending p{{comm(w).allreduce_async(b, b, op)}, {s.host}, [s] { s.copy_back(); }, make_work(c10d::OpType::ALLREDUCE, w, tensors)};
  return launch(std::move(p), any_on_device({&t}));
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
  const DataType d = reduce_dtype(tensors[0], w);
  const ReduceOp op = reduce_op(opts.reduceOp, tensors[0], w);
  // One flat buffer, one core op: the way DDP's buckets work too.
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : tensors) flat_parts.push_back(t.reshape({-1}).to(at::kCPU));
  at::Tensor flat = at::cat(flat_parts);
  Buffer b = typed_buffer(flat, d);
  std::vector<at::Tensor> outs = tensors;
  Pending p{{comm(w).allreduce_async(b, b, op)}, {flat}, [flat, outs] {
              int64_t at = 0;
              for (const auto& t : outs) {
                t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
                at += t.numel();
              }
            },
            make_work(c10d::OpType::ALLREDUCE_COALESCED, w, tensors)};
  return launch(std::move(p), any_on_device(tensors));
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
  Buffer in = typed_buffer(s.host, d);
  if (getRank() == root) {
    Pending p{{comm(w).allreduce_async(in, in, op)}, {s.host}, [s] { s.copy_back(); }, make_work(c10d::OpType::REDUCE, w, tensors)};
    return launch(std::move(p), any_on_device({&t}));
  }
  at::Tensor scratch = at::empty_like(s.host);
  Pending p{{comm(w).allreduce_async(in, typed_buffer(scratch, d), op)}, {s.host, scratch}, nullptr,
            make_work(c10d::OpType::REDUCE, w, tensors)};
  return launch(std::move(p), any_on_device({&t}));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::ReduceScatterOptions& opts) {
  const OpName w = who("reduce_scatter_tensor");
  check_tensor(output, w, "output");
  check_tensor(input, w, "input");
  TORCH_CHECK_TYPE(input.scalar_type() == output.scalar_type(), w.str(), ": input dtype ", input.scalar_type(),
                   " differs from output dtype ", output.scalar_type());
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(), w.str(), ": input must have world size x output = ",
                    output.numel() * getSize(), " elements, has ", input.numel());
  const DataType d = reduce_dtype(output, w);
  const ReduceOp op = reduce_op(opts.reduceOp, output, w);
  Staged in = stage(input, true), out = stage(output, false);
  Pending p{{comm(w).reduce_scatter_async(typed_buffer(in.host, d), typed_buffer(out.host, d), op)},
            {in.host, out.host},
            [out] { out.copy_back(); },
            make_work(c10d::OpType::_REDUCE_SCATTER_BASE, w, {output})};
  return launch(std::move(p), any_on_device({&input, &output}));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                            std::vector<std::vector<at::Tensor>>& inputs,
                                                            const c10d::ReduceScatterOptions& opts) {
  const OpName w = who("reduce_scatter");
  check_single(outputs, w);
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), w.str(),
                    ": expects one list of world-size (", getSize(), ") input tensors");
  for (const auto& t : inputs[0]) check_same_layout(outputs[0], t, w, "an input");
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs[0]) parts.push_back(t.reshape({-1}).to(at::kCPU));
  at::Tensor flat = at::cat(parts);
  return _reduce_scatter_base(outputs[0], flat, opts);
}

c10::intrusive_ptr<c10d::Work> RcollBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::ReduceScatterOptions& opts) {
  const OpName w = who("reduce_scatter_tensor_coalesced");
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), w.str(), ": ", outputs.size(), " outputs for ", inputs.size(), " inputs");
  Pending all{{}, {}, nullptr, make_work(c10d::OpType::COALESCED, w, outputs)};
  std::vector<c10::intrusive_ptr<c10d::Work>> parts;
  bool device = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    device = device || any_on_device({&outputs[i], &inputs[i]});
    parts.push_back(_reduce_scatter_base(outputs[i], inputs[i], opts));
  }
  // The group completes once every part has (they complete in order).
  all.finalize = [parts] {
    for (const auto& p : parts) p->wait();
  };
  return launch(std::move(all), device);
}

// ------------------------------------------------------------------ data movement

c10::intrusive_ptr<c10d::Work> RcollBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const OpName w = who("broadcast");
  check_single(tensors, w);
  const int root = static_cast<int>(opts.rootRank + opts.rootTensor);
  TORCH_CHECK_VALUE(root >= 0 && root < getSize(), w.str(), ": root ", root, " is out of range");
  const at::Tensor& t = tensors[0];
  Staged s = stage(t, getRank() == root);
  Pending p{{comm(w).broadcast_async(byte_buffer(s.host), root)}, {s.host},
            [s, this, root] {
              if (getRank() != root) s.copy_back();
            },
            make_work(c10d::OpType::BROADCAST, w, tensors)};
  return launch(std::move(p), any_on_device({&t}));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions&) {
  const OpName w = who("allgather_into_tensor");
  check_tensor(output, w, "output");
  check_tensor(input, w, "input");
  TORCH_CHECK_TYPE(input.scalar_type() == output.scalar_type(), w.str(), ": input dtype ", input.scalar_type(),
                   " differs from output dtype ", output.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), w.str(), ": output must have world size x input = ",
                    input.numel() * getSize(), " elements, has ", output.numel());
  Staged in = stage(input, true), out = stage(output, false);
  Pending p{{comm(w).allgather_async(byte_buffer(in.host), byte_buffer(out.host))},
            {in.host, out.host},
            [out] { out.copy_back(); },
            make_work(c10d::OpType::_ALLGATHER_BASE, w, {output})};
  return launch(std::move(p), any_on_device({&input, &output}));
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
  }
  Staged in = stage(inputs[0], true);
  const size_t nb = in.host.nbytes();
  at::Tensor flat = at::empty({static_cast<int64_t>(nb) * getSize()}, at::TensorOptions().dtype(at::kByte));
  std::vector<at::Tensor> outs = outputs[0];
  Pending p{{comm(w).allgather_async(byte_buffer(in.host), byte_buffer(flat))}, {in.host, flat},
            [flat, outs, nb] {
              for (size_t q = 0; q < outs.size(); ++q) {
                Staged o = stage(outs[q], false);
                if (nb > 0) std::memcpy(o.host.data_ptr(), static_cast<const char*>(flat.data_ptr()) + q * nb, nb);
                o.copy_back();
              }
            },
            make_work(c10d::OpType::ALLGATHER, w, outs)};
  return launch(std::move(p), any_on_device(outs) || any_on_device(inputs));
}

// Every rank's inputs, flattened into one byte buffer, gathered in one core op.
c10::intrusive_ptr<c10d::Work> RcollBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                 std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  const OpName w = who("allgather_coalesced");
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == getSize(), w.str(), ": expects world-size (", getSize(),
                    ") output lists, got ", outputs.size());
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs) {
    check_tensor(t, w, "an input");
    parts.push_back(t.contiguous().to(at::kCPU).reshape({-1}).view(at::kByte));
  }
  for (const auto& list : outputs) {
    TORCH_CHECK_VALUE(list.size() == inputs.size(), w.str(), ": every output list must have ", inputs.size(), " tensors");
    for (size_t i = 0; i < list.size(); ++i) check_same_layout(inputs[i], list[i], w, "an output");
  }
  at::Tensor flat_in = parts.empty() ? at::empty({0}, at::kByte) : at::cat(parts);
  const size_t nb = flat_in.nbytes();
  at::Tensor flat = at::empty({static_cast<int64_t>(nb) * getSize()}, at::TensorOptions().dtype(at::kByte));
  std::vector<std::vector<at::Tensor>> outs = outputs;
  std::vector<at::Tensor> all_outs;
  bool device = any_on_device(inputs);
  for (const auto& l : outs) {
    all_outs.insert(all_outs.end(), l.begin(), l.end());
    device = device || any_on_device(l);
  }
  Pending p{{comm(w).allgather_async(byte_buffer(flat_in), byte_buffer(flat))}, {flat_in, flat},
            [flat, outs, nb] {
              const char* base = static_cast<const char*>(flat.data_ptr());
              for (size_t q = 0; q < outs.size(); ++q) {
                size_t at = q * nb;
                for (const auto& t : outs[q]) {
                  Staged o = stage(t, false);
                  if (o.host.nbytes() > 0) std::memcpy(o.host.data_ptr(), base + at, o.host.nbytes());
                  at += o.host.nbytes();
                  o.copy_back();
                }
              }
            },
            make_work(c10d::OpType::ALLGATHER_COALESCED, w, all_outs)};
  return launch(std::move(p), device);
}

c10::intrusive_ptr<c10d::Work> RcollBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::AllgatherOptions& opts) {
  const OpName w = who("allgather_into_tensor_coalesced");
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), w.str(), ": ", outputs.size(), " outputs for ", inputs.size(), " inputs");
  Pending all{{}, {}, nullptr, make_work(c10d::OpType::COALESCED, w, outputs)};
  std::vector<c10::intrusive_ptr<c10d::Work>> parts;
  bool device = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    device = device || any_on_device({&outputs[i], &inputs[i]});
    parts.push_back(_allgather_base(outputs[i], inputs[i], opts));
  }
  all.finalize = [parts] {
    for (const auto& p : parts) p->wait();
  };
  return launch(std::move(all), device);
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
    for (const auto& t : outputs[0]) check_same_layout(inputs[0], t, w, "an output");
    outs = outputs[0];
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), w.str(), ": only the root (", root, ") takes outputs");
  }
  Staged in = stage(inputs[0], true);
  const size_t nb = in.host.nbytes();
  at::Tensor flat = at::empty({static_cast<int64_t>(nb) * getSize()}, at::TensorOptions().dtype(at::kByte));
  Pending p{{comm(w).allgather_async(byte_buffer(in.host), byte_buffer(flat))}, {in.host, flat},
            [flat, outs, nb] {
              for (size_t q = 0; q < outs.size(); ++q) {
                Staged o = stage(outs[q], false);
                if (nb > 0) std::memcpy(o.host.data_ptr(), static_cast<const char*>(flat.data_ptr()) + q * nb, nb);
                o.copy_back();
              }
            },
            make_work(c10d::OpType::GATHER, w, outs)};
  return launch(std::move(p), any_on_device(inputs) || any_on_device(outs));
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
  const size_t nb = outputs[0].nbytes();
  at::Tensor flat = at::empty({static_cast<int64_t>(nb) * getSize()}, at::TensorOptions().dtype(at::kByte));
  bool device = any_on_device(outputs);
  if (getRank() == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), w.str(),
                      ": the root expects one list of world-size (", getSize(), ") input tensors");
    for (size_t q = 0; q < inputs[0].size(); ++q) {
      check_same_layout(outputs[0], inputs[0][q], w, "an input");
      Staged s = stage(inputs[0][q], true);
      if (nb > 0) std::memcpy(static_cast<char*>(flat.data_ptr()) + q * nb, s.host.data_ptr(), nb);
      device = device || any_on_device({&inputs[0][q]});
    }
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), w.str(), ": only the root (", root, ") takes inputs");
  }
  at::Tensor out = outputs[0];
  const int rank = getRank();
  Pending p{{comm(w).broadcast_async(byte_buffer(flat), root)}, {flat},
            [flat, out, nb, rank] {
              Staged o = stage(out, false);
              if (nb > 0) std::memcpy(o.host.data_ptr(), static_cast<const char*>(flat.data_ptr()) + rank * nb, nb);
              o.copy_back();
            },
            make_work(c10d::OpType::SCATTER, w, outputs)};
  return launch(std::move(p), device);
}

c10::intrusive_ptr<c10d::Work> RcollBackend::alltoallv(const OpName& w, c10d::OpType type, std::vector<at::Tensor> outputs,
                                                       std::vector<Staged> sends, std::vector<Staged> recvs,
                                                       std::function<void()> after, bool on_device) {
  const int p = getSize(), r = getRank();
  // Who sends how many bytes to whom: every rank's row of the matrix.
  at::Tensor mine = at::empty({p}, at::kLong), matrix = at::empty({p * p}, at::kLong);
  for (int j = 0; j < p; ++j) mine.data_ptr<int64_t>()[j] = static_cast<int64_t>(sends[j].host.nbytes());
  Status s = comm(w).allgather_async(typed_buffer(mine, DataType::kInt64), typed_buffer(matrix, DataType::kInt64)).wait();
  if (!s.ok()) std::rethrow_exception(backend_error(w.str() + " failed while exchanging block sizes: " + s.to_string()));
  const int64_t* m = matrix.data_ptr<int64_t>();
  int64_t block = 0;
  for (int i = 0; i < p * p; ++i) block = std::max(block, m[i]);
  for (int q = 0; q < p; ++q) {
    TORCH_CHECK_VALUE(m[q * p + r] == static_cast<int64_t>(recvs[q].host.nbytes()), w.str(), ": rank ", q, " sends ",
                      m[q * p + r], " bytes to this rank, but the output split for rank ", q, " holds ",
                      recvs[q].host.nbytes(), " bytes");
  }
  at::Tensor in = at::empty({block * p}, at::kByte), out = at::empty({block * p}, at::kByte);
  for (int j = 0; j < p; ++j) {
    if (sends[j].host.nbytes() > 0)
      std::memcpy(static_cast<char*>(in.data_ptr()) + j * block, sends[j].host.data_ptr(), sends[j].host.nbytes());
  }
  Pending pend{{comm(w).alltoall_async(byte_buffer(in), byte_buffer(out))}, {in, out},
               [out, recvs, block, after] {
                 for (size_t q = 0; q < recvs.size(); ++q) {
                   if (recvs[q].host.nbytes() > 0)
                     std::memcpy(recvs[q].host.data_ptr(), static_cast<const char*>(out.data_ptr()) + q * block,
                                 recvs[q].host.nbytes());
                   recvs[q].copy_back();
                 }
                 if (after) after();
               },
               make_work(type, w, std::move(outputs))};
  return launch(std::move(pend), on_device);
}

c10::intrusive_ptr<c10d::Work> RcollBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                           std::vector<int64_t>& output_splits,
                                                           std::vector<int64_t>& input_splits, const c10d::AllToAllOptions&) {
  const OpName w = who("alltoall_base");
  check_tensor(output, w, "output");
  check_tensor(input, w, "input");
  TORCH_CHECK_TYPE(input.scalar_type() == output.scalar_type(), w.str(), ": input dtype ", input.scalar_type(),
                   " differs from output dtype ", output.scalar_type());
  const int p = getSize();
  const bool device = any_on_device({&input, &output});
  if (output_splits.empty() && input_splits.empty()) {
    // Equal blocks: one core alltoall over the raw bytes.
    TORCH_CHECK_VALUE(input.numel() == output.numel(), w.str(), ": input has ", input.numel(), " elements, output ",
                      output.numel());
    TORCH_CHECK_VALUE(input.dim() == 0 ? p == 1 : input.size(0) % p == 0, w.str(), ": dim 0 of the input (",
                      input.dim() == 0 ? 0 : input.size(0), ") does not split into ", p, " equal blocks");
    Staged in = stage(input, true), out = stage(output, false);
    Pending pend{{comm(w).alltoall_async(byte_buffer(in.host), byte_buffer(out.host))}, {in.host, out.host},
                 [out] { out.copy_back(); },
                 make_work(c10d::OpType::ALLTOALL_BASE, w, {output})};
    return launch(std::move(pend), device);
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
    at::Tensor piece = in.host.narrow(0, at, in_rows[j]);
    sends.push_back(Staged{piece, piece});
    at += in_rows[j];
  }
  at = 0;
  for (int q = 0; q < p; ++q) {
    at::Tensor piece = out.host.narrow(0, at, out_rows[q]);
    recvs.push_back(Staged{piece, piece});
    at += out_rows[q];
  }
  // A staged output goes back whole once every block has landed in it.
  return alltoallv(w, c10d::OpType::ALLTOALL_BASE, {output}, std::move(sends), std::move(recvs),
                   [out] { out.copy_back(); }, device);
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
    TORCH_CHECK_TYPE(inputs[q].scalar_type() == outputs[q].scalar_type(), w.str(), ": input dtype ",
                     inputs[q].scalar_type(), " differs from output dtype ", outputs[q].scalar_type());
    sends.push_back(stage(inputs[q], true));
    recvs.push_back(stage(outputs[q], false));
  }
  return alltoallv(w, c10d::OpType::ALLTOALL, outputs, std::move(sends), std::move(recvs), nullptr,
                   any_on_device(inputs) || any_on_device(outputs));
}

}  // namespace rcoll::torch_backend
