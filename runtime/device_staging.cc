#include "runtime/device_staging.h"

#include <memory>
#include <string>
#include <vector>

namespace rcoll {
namespace {

namespace cuda = kernels::cuda;

// What a copy of `bytes` may take: the floor plus the bytes at 1 GB/s.
Clock::duration copy_time(size_t bytes, const DeviceStaging::Limits& limits) {
  return limits.copy_floor +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(static_cast<double>(bytes) / 1e9));
}

Status step(const Op& op, const Status& s, const std::string& what) {
  if (s.ok()) return s;
  return Status(s.code(), op.describe() + " on CUDA device " + std::to_string(op.device) + ": " + what + ": " + s.message());
}

}  // namespace

bool DeviceStaging::reads_input(const Op& op, int rank) {
  switch (op.kind) {
    case OpKind::kSendRecv: return op.is_send;
    case OpKind::kBroadcast: return rank == op.root;
    case OpKind::kBarrier:
    case OpKind::kNone: return false;
    default: return true;
  }
}

bool DeviceStaging::writes_output(const Op& op, int rank) {
  switch (op.kind) {
    case OpKind::kSendRecv: return !op.is_send;
    case OpKind::kBroadcast: return rank != op.root;
    case OpKind::kBarrier:
    case OpKind::kNone: return false;
    default: return true;
  }
}

// The stream and event live on the communicator's one device (issue
// enforces it), made on first use.
Status DeviceStaging::prepare() {
  if (Status s = stream_.create(); !s.ok()) return s;
  return done_.create();
}

Result<Op> DeviceStaging::stage_in(const Op& op, int rank, const Limits& limits) {
  Op host = op;
  host.in.memory = host.out.memory = MemoryKind::kHost;
  host.stream_ready.reset();
  if (op.device < 0) return host;  // empty buffers: nothing on a device to move
  cuda::ScopedDevice on;
  if (Status s = on.enter(op.device); !s.ok()) return step(op, s, "making it the current device");
  if (Status s = prepare(); !s.ok()) return step(op, s, "creating rcoll's stream");

  // The output region first; an input that lies inside it (in place, or an
  // allgather's own slot) keeps its offset there, any other follows it.
  const char* in0 = static_cast<const char*>(op.in.data);
  const char* out0 = static_cast<const char*>(op.out.data);
  const bool inside = op.in.bytes() == 0 || (in0 >= out0 && in0 + op.in.bytes() <= out0 + op.out.bytes());
  const size_t out_bytes = (op.out.bytes() + 63) / 64 * 64;
  const size_t total = out_bytes + (inside ? 0 : op.in.bytes());
  if (Status s = pinned_.reserve(total > 0 ? total : 1); !s.ok()) return step(op, s, "growing the pinned staging buffer");
  char* host_out = static_cast<char*>(pinned_.data());
  host.out.data = host_out;
  host.in.data = inside ? host_out + (op.in.bytes() ? in0 - out0 : 0) : host_out + out_bytes;

  // rcoll's stream follows the caller's as it was at issue, and the host
  // waits for it (and the input's copy) here, under the straggler rules, even
  // when nothing is read: the copy back must then wait for nothing but itself.
  if (op.stream_ready) {
    if (Status s = cuda::stream_wait_event(stream_.get(), op.stream_ready.get()); !s.ok()) {
      return step(op, s, "ordering after the caller's stream");
    }
  }
  const size_t in_bytes = reads_input(op, rank) ? op.in.bytes() : 0;
  if (in_bytes > 0) {
    if (Status s = cuda::copy_async(host.in.data, op.in.data, in_bytes, stream_.get()); !s.ok()) {
      return step(op, s, "copying the input to host memory");
    }
  }
  if (Status s = cuda::event_record(done_.get(), stream_.get()); !s.ok()) return step(op, s, "recording the copy");
  const Deadline by = Deadline::after(limits.caller_stream + copy_time(in_bytes, limits));
  if (Status s = cuda::wait_event(done_.get(), by, "waiting for the caller's stream and the input copy"); !s.ok()) {
    return step(op, s, "the caller's stream did not reach the op, or the copy did not finish");
  }
  return host;
}

Status DeviceStaging::stage_out(const Op& op, const Op& host, int rank, const Limits& limits) {
  if (op.device < 0 || !writes_output(op, rank) || op.out.bytes() == 0) return Status();
  cuda::ScopedDevice on;
  if (Status s = on.enter(op.device); !s.ok()) return step(op, s, "making it the current device");
  if (Status s = cuda::copy_async(op.out.data, host.out.data, op.out.bytes(), stream_.get()); !s.ok()) {
    return step(op, s, "copying the result to the device");
  }
  if (Status s = cuda::event_record(done_.get(), stream_.get()); !s.ok()) return step(op, s, "recording the copy");
  if (Status s = cuda::stream_wait_event(op.options.cuda_stream, done_.get()); !s.ok()) {
    return step(op, s, "ordering the caller's stream after the result");
  }
  return step(op, cuda::wait_event(done_.get(), Deadline::after(copy_time(op.out.bytes(), limits)), "copying the result to the device"),
              "the result did not reach the device");
}

Result<Op> DeviceStaging::stage_in_group(const Op& carrier, const Limits& limits) {
  const std::vector<Op>& members = *carrier.group;
  Op host = carrier;
  host.device = -1;
  host.stream_ready.reset();
  host.group = std::make_shared<std::vector<Op>>(members);
  cuda::ScopedDevice on;
  if (Status s = on.enter(carrier.device); !s.ok())
    return step(carrier, s, "making it the current device");
  if (Status s = prepare(); !s.ok()) return step(carrier, s, "creating rcoll's stream");
  size_t total = 0;
  for (const Op& m : members) total += (m.out.bytes() + 63) / 64 * 64;
  if (Status s = pinned_.reserve(total > 0 ? total : 1); !s.ok()) {
    return step(carrier, s, "growing the pinned staging buffer");
  }
  if (carrier.stream_ready) {
    if (Status s = cuda::stream_wait_event(stream_.get(), carrier.stream_ready.get()); !s.ok()) {
      return step(carrier, s, "ordering after the caller's stream");
    }
  }
  char* at = static_cast<char*>(pinned_.data());
  size_t in_bytes = 0;
  for (Op& m : *host.group) {
    const void* device_in = m.in.data;
    m.in.memory = m.out.memory = MemoryKind::kHost;
    m.device = -1;
    m.in.data = m.out.data = at;  // a send's or receive's one buffer
    if (m.is_send && m.in.bytes() > 0) {
      if (Status s = cuda::copy_async(at, device_in, m.in.bytes(), stream_.get()); !s.ok()) {
        return step(carrier, s, "copying " + m.describe() + "'s input to host memory");
      }
      in_bytes += m.in.bytes();
    }
    at += (m.out.bytes() + 63) / 64 * 64;
  }
  if (Status s = cuda::event_record(done_.get(), stream_.get()); !s.ok())
    return step(carrier, s, "recording the copies");
  const Deadline by = Deadline::after(limits.caller_stream + copy_time(in_bytes, limits));
  if (Status s = cuda::wait_event(done_.get(), by,
                                  "waiting for the caller's stream and the sends' input copies");
      !s.ok()) {
    return step(carrier, s,
                "the caller's stream did not reach the group, or the copies did not finish");
  }
  return host;
}

Status DeviceStaging::stage_out_group(const Op& carrier, const Op& host, const Limits& limits) {
  const std::vector<Op>& members = *carrier.group;
  const std::vector<Op>& staged = *host.group;
  cuda::ScopedDevice on;
  if (Status s = on.enter(carrier.device); !s.ok())
    return step(carrier, s, "making it the current device");
  size_t out_bytes = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const Op& m = members[i];
    if (m.is_send || m.out.bytes() == 0) continue;
    if (Status s = cuda::copy_async(m.out.data, staged[i].out.data, m.out.bytes(), stream_.get());
        !s.ok()) {
      return step(carrier, s, "copying " + m.describe() + "'s result to the device");
    }
    out_bytes += m.out.bytes();
  }
  if (Status s = cuda::event_record(done_.get(), stream_.get()); !s.ok())
    return step(carrier, s, "recording the copies");
  if (Status s = cuda::stream_wait_event(carrier.options.cuda_stream, done_.get()); !s.ok()) {
    return step(carrier, s, "ordering the caller's stream after the results");
  }
  return step(carrier,
              cuda::wait_event(done_.get(), Deadline::after(copy_time(out_bytes, limits)),
                               "copying the results to the device"),
              "the results did not reach the device");
}

}  // namespace rcoll
