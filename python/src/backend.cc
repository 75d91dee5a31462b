#include "backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include <c10/util/Exception.h>

#include "store_adapter.h"

namespace rcoll::torch_backend {
namespace {

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

// PyTorch's timeout is the longest a caller waits for one op. rcoll's progress
// deadline (how long an op may move no bytes before the data plane counts as
// hung) is usually far shorter and stays derived; the timeout caps it, and
// caps how long a straggler and a recovery may take.
Options options_for(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
  Options o;
  o.rank = rank;
  o.world_size = size;
  o.store = std::make_shared<C10dStore>(store);
  o.name = "torch";
  if (timeout.count() > 0) {
    if (timeout < o.deadline_floor) o.op_timeout = timeout;
    o.straggler_timeout = std::min(o.straggler_timeout, timeout);
    o.recovery_timeout = std::min(o.recovery_timeout, timeout);
    o.store_timeout = std::min(o.store_timeout, timeout);
  }
  // A job on one host (torchrun --standalone, MASTER_ADDR=localhost) talks over loopback.
  const char* master = std::getenv("MASTER_ADDR");
  if (std::getenv("RCOLL_SOCKET_IFNAME") == nullptr && master != nullptr) {
    const std::string m = master;
    if (m == "127.0.0.1" || m == "localhost" || m == "::1") o.socket_ifname = "=lo";
  }
  return o;
}

std::string failure(const OpName& who, const Status& s) {
  return who.str() + " failed: " + s.to_string();
}

}  // namespace

RcollBackend::RcollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout.count() > 0 ? timeout : kBackendDefaultTimeout) {
  try {
    comm_ = std::make_unique<Communicator>(Communicator::create(options_for(store, rank, size, timeout)));
  } catch (const Error& e) {
    C10_THROW_ERROR(DistBackendError, "rcoll: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                          " could not join the process group: " + e.status().to_string());
  }
  completer_ = std::thread([this] { completion_loop(); });
}

RcollBackend::~RcollBackend() {
  try {
    shutdown();
  } catch (...) {
  }
}

c10::intrusive_ptr<c10d::Backend::Options> RcollBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("rcoll", timeout_);
}

Communicator& RcollBackend::comm(const OpName& w) {
  TORCH_CHECK(!aborted_, w.str(), ": the process group was aborted");
  TORCH_CHECK(!closed_ && comm_, w.str(), ": the process group was shut down");
  return *comm_;
}

c10::intrusive_ptr<RcollWork> RcollBackend::make_work(c10d::OpType type, const OpName& w, std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<RcollWork>(getRank(), type, w.str(), ++issued_, std::move(outputs), timeout_);
}

void RcollBackend::finish_pending(Pending& p) {
  for (auto& op : p.ops) {
    Status s;
    // Core ops are bounded by rcoll's deadlines; the slices let an abort cut in.
    for (;;) {
      s = op.wait(std::chrono::milliseconds(100));
      if (s.code() != ErrorCode::kWaitTimeout) break;
      if (aborted_) {
        s = Status(ErrorCode::kAborted, "the process group was aborted while the op was in flight");
        break;
      }
    }
    if (!s.ok()) {
      p.work->complete(backend_error(p.work->what() + " failed: " + s.to_string()));
      return;
    }
  }
  try {
    if (p.finalize) p.finalize();
  } catch (...) {
    p.work->complete(std::current_exception());
    return;
  }
  p.work->complete(nullptr);
}

c10::intrusive_ptr<c10d::Work> RcollBackend::launch(Pending p, bool on_device) {
  c10::intrusive_ptr<c10d::Work> work = p.work;
  if (coalescing_) coalesced_.push_back(Pending{p.ops, {}, nullptr, nullptr});
  if (on_device) {
    finish_pending(p);  // staged through host: complete before returning
    return work;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(p));
  }
  cv_.notify_one();
  return work;
}

void RcollBackend::completion_loop() {
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      p = std::move(pending_.front());
      pending_.pop_front();
    }
    finish_pending(p);
    if (aborted_) {
      std::lock_guard<std::mutex> lock(mu_);
      graveyard_.push_back(std::move(p));
    }
  }
}

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
  if (!s.ok()) std::rethrow_exception(backend_error(failure(w, s) + " (while exchanging block sizes)"));
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

// ------------------------------------------------------------------ point to point

c10::intrusive_ptr<c10d::Work> RcollBackend::send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) {
  const OpName w = who("send");
  check_single(tensors, w);
  TORCH_CHECK_VALUE(dst >= 0 && dst < getSize() && dst != getRank(), w.str(), ": peer ", dst, " is not another rank");
  Staged s = stage(tensors[0], true);
  auto work = make_work(c10d::OpType::SEND, w, tensors);
  if (coalescing_) {
    deferred_.push_back(Deferred{true, dst, s, work});
    return work;
  }
  Pending p{{comm(w).send_async(byte_buffer(s.host), dst)}, {s.host}, nullptr, work};
  return launch(std::move(p), any_on_device(tensors));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) {
  const OpName w = who("recv");
  check_single(tensors, w);
  TORCH_CHECK_VALUE(src >= 0 && src < getSize() && src != getRank(), w.str(), ": peer ", src, " is not another rank");
  Staged s = stage(tensors[0], false);
  auto work = make_work(c10d::OpType::RECV, w, tensors);
  if (coalescing_) {
    deferred_.push_back(Deferred{false, src, s, work});
    return work;
  }
  Pending p{{comm(w).recv_async(byte_buffer(s.host), src)}, {s.host}, [s] { s.copy_back(); }, work};
  return launch(std::move(p), any_on_device(tensors));
}

c10::intrusive_ptr<c10d::Work> RcollBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, who("recv").str(),
                              ": receiving from any source is not supported (rcoll matches every message to a named peer)");
}

c10::intrusive_ptr<c10d::Work> RcollBackend::barrier(const c10d::BarrierOptions&) {
  const OpName w = who("barrier");
  Pending p{{comm(w).barrier_async()}, {}, nullptr, make_work(c10d::OpType::BARRIER, w, {})};
  return launch(std::move(p), false);
}

// ------------------------------------------------------------------ coalescing

void RcollBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, who("startCoalescing").str(), ": a coalescing group is already open");
  coalescing_ = true;
  deferred_.clear();
  coalesced_.clear();
}

// rcoll runs ops one at a time in issue order, and a large send completes only
// once its receiver takes the bytes, so a batch issued as written (every rank
// sends first, say) could wait in a cycle. The batch's sends and receives are
// issued sorted by the pair of ranks they connect, (min, max), the lower rank
// sending first and the higher receiving first. Every rank sorts the same way,
// so the smallest pair still pending is at the front of both its ranks'
// queues: the batch always makes progress. Order per peer and direction is kept.
c10::intrusive_ptr<c10d::Work> RcollBackend::endCoalescing() {
  const OpName w = who("endCoalescing");
  TORCH_CHECK(coalescing_, w.str(), ": no coalescing group is open");
  coalescing_ = false;
  const int me = getRank();
  std::stable_sort(deferred_.begin(), deferred_.end(), [me](const Deferred& a, const Deferred& b) {
    auto key = [me](const Deferred& d) {
      const bool lower = me < d.peer;
      const int first = (lower == d.is_send) ? 0 : 1;  // lower: sends first; higher: receives first
      return std::tuple<int, int, int>(std::min(me, d.peer), std::max(me, d.peer), first);
    };
    return key(a) < key(b);
  });
  Pending batch{{}, {}, nullptr, nullptr};
  std::vector<at::Tensor> outputs;
  bool device = false;
  for (auto& c : coalesced_) batch.ops.insert(batch.ops.end(), c.ops.begin(), c.ops.end());
  std::vector<Pending> parts;
  for (auto& d : deferred_) {
    Staged s = d.tensor;
    Pending p{{}, {s.host}, nullptr, d.work};
    if (d.is_send) {
      p.ops.push_back(comm(w).send_async(byte_buffer(s.host), d.peer));
    } else {
      p.ops.push_back(comm(w).recv_async(byte_buffer(s.host), d.peer));
      p.finalize = [s] { s.copy_back(); };
    }
    batch.ops.push_back(p.ops.back());
    outputs.push_back(s.user);
    device = device || any_on_device({&s.user});
    parts.push_back(std::move(p));
  }
  deferred_.clear();
  coalesced_.clear();
  batch.work = make_work(c10d::OpType::COALESCED, w, outputs);
  // With device tensors everything is issued before anything is waited for
  // (in the sorted order, which cannot wait in a cycle).
  for (auto& p : parts) launch(std::move(p), device);
  return launch(std::move(batch), device);
}

// ------------------------------------------------------------------ lifecycle

void RcollBackend::abort() {
  aborted_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& p : pending_) {
      p.work->complete(backend_error(p.work->what() + ": the process group was aborted"));
      graveyard_.push_back(std::move(p));  // the core op may still touch its memory until close
    }
    pending_.clear();
  }
  shutdown();
}

void RcollBackend::shutdown() {
  if (closed_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (completer_.joinable()) completer_.join();
  if (comm_) comm_->close();
  graveyard_.clear();
}

Counters RcollBackend::counters() const { return comm_ ? comm_->counters() : Counters{}; }
std::string RcollBackend::diagnostics() const { return comm_ ? comm_->diagnostics() : std::string("rcoll: no communicator"); }

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 std::chrono::milliseconds timeout) {
  return c10::make_intrusive<RcollBackend>(store, rank, size, timeout);
}

}  // namespace rcoll::torch_backend
