// A pipeline as NCCL users write it, one process per stage (started by
// rcoll-run): every iteration each stage sends to the next stage and
// receives from the previous one, in one group (ncclGroupStart/End's
// equivalent, Communicator::group_async), messages of 1.4-7.2 MB whose size
// depends on the sending stage and the iteration. Every received buffer is
// checked element by element against what its sender must have sent.
//
//   --topology ring|chain   ring: stage s -> s+1 mod P; chain: 0 -> 1 -> ... -> P-1
//   --iters N               iterations (30)
//   --min-bytes / --max-bytes  the range of message sizes (1.4M / 7.2M)
//   --mode grouped|ungrouped   ungrouped: each stage posts its receive, then its
//                           send, one by one (around a ring: a cycle of waits)
//   --straggler R --straggler-iter I --straggler-ms MS
//                           stage R computes MS ms before iteration I
//   --skip-send R --skip-iter I   stage R skips its send in iteration I
//   --expect ok|desync      ok: every iteration correct; desync: the run must
//                           fail with kDesync (any other outcome fails)
//   --max-recoveries N      at most N recoveries on this stage
//   --min-recoveries N      at least N (the faults injected did fire)
//   --late R --late-ms MS   stage R creates its communicator MS ms after the others
//   --memory host|cuda      cuda: the messages are in device memory (one NCCL group
//                           per iteration with NCCL in the chain, else staged), the
//                           group ordered after a stream of the stage's and waited
//                           for there (Work::stream_wait); received messages are
//                           copied back to the host on that stream and checked
//   --expect-device-transport nccl|staged   (with --memory cuda) where they ran
//
// Exit code 0 = as expected; 1 = not (printed); 77 = --memory cuda without a
// usable GPU (skipped).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "rcoll/rcoll.h"

#ifdef RCOLL_WORKER_CUDA
#include <cuda_runtime.h>
#endif

using namespace rcoll;

namespace {

// The stage's messages in device memory (--memory cuda), on a stream of its
// own that the groups are ordered after and that waits for them.
class DeviceMessages {
 public:
  // Whether a GPU is there; else why not.
  static std::string unusable();
  void init(size_t max_floats);
  ~DeviceMessages();
  // `host` to the send buffer, on the stream.
  Buffer send(const std::vector<float>& host);
  // The receive buffer for `floats`, poisoned on the stream.
  Buffer recv(size_t floats);
  // The received message back to `host` once the stream is past the group.
  void fetch(std::vector<float>& host);
  void* stream() const { return stream_; }

 private:
  void check(int e, const char* what);
  void* stream_ = nullptr;
  float* send_ = nullptr;
  float* recv_ = nullptr;
};

#ifdef RCOLL_WORKER_CUDA
std::string DeviceMessages::unusable() {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    return std::string("no usable CUDA device: ") +
           (e != cudaSuccess ? cudaGetErrorName(e) : "none");
  }
  return "";
}
void DeviceMessages::check(int e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "pipeline_worker: %s: %s\n", what,
               cudaGetErrorName(static_cast<cudaError_t>(e)));
  std::exit(1);
}
void DeviceMessages::init(size_t max_floats) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = s;
  check(cudaMalloc(reinterpret_cast<void**>(&send_), max_floats * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&recv_), max_floats * sizeof(float)), "cudaMalloc");
}
DeviceMessages::~DeviceMessages() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  (void)cudaFree(send_);
  (void)cudaFree(recv_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}
Buffer DeviceMessages::send(const std::vector<float>& host) {
  // From pageable memory: the copy is done when the call returns, so `host` may change after.
  check(cudaMemcpyAsync(send_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice,
                        static_cast<cudaStream_t>(stream_)),
        "cudaMemcpyAsync to the device");
  Buffer b = Buffer::of(send_, host.size());
  b.memory = MemoryKind::kCuda;
  return b;
}
Buffer DeviceMessages::recv(size_t floats) {
  check(cudaMemsetAsync(recv_, 0xff, floats * sizeof(float), static_cast<cudaStream_t>(stream_)),
        "cudaMemsetAsync");
  Buffer b = Buffer::of(recv_, floats);
  b.memory = MemoryKind::kCuda;
  return b;
}
void DeviceMessages::fetch(std::vector<float>& host) {
  const auto s = static_cast<cudaStream_t>(stream_);
  check(cudaMemcpyAsync(host.data(), recv_, host.size() * sizeof(float), cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync to the host");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}
#else
std::string DeviceMessages::unusable() { return "this worker was built without CUDA"; }
void DeviceMessages::check(int, const char*) {}
void DeviceMessages::init(size_t) {}
DeviceMessages::~DeviceMessages() = default;
Buffer DeviceMessages::send(const std::vector<float>&) { return {}; }
Buffer DeviceMessages::recv(size_t) { return {}; }
void DeviceMessages::fetch(std::vector<float>&) {}
#endif

size_t parse_bytes(const std::string& s) {
  double v = std::stod(s);
  if (s.back() == 'K') v *= 1e3;
  if (s.back() == 'M') v *= 1e6;
  return static_cast<size_t>(v);
}

// The message stage `s` sends in iteration `i`: a size in [min, max] that
// varies with both (so a skipped send shows as a size mismatch), and values
// no other stage or iteration sends at the same place.
size_t message_floats(int s, int i, size_t min_bytes, size_t max_bytes) {
  const size_t span = max_bytes - min_bytes;
  const size_t step = static_cast<size_t>((s * 7 + i * 13) % 17);
  return (min_bytes + span * step / 16) / sizeof(float);
}
float value(int s, int i, size_t k) {
  return static_cast<float>((static_cast<size_t>(s) * 131 + static_cast<size_t>(i) * 17 + k) %
                            65521);
}

}  // namespace

int main(int argc, char** argv) {
  std::string topology = "ring", mode = "grouped", expect = "ok", memory = "host",
              expect_device_transport;
  int iters = 30, late = -1, straggler = -1, straggler_iter = -1, skip_send = -1, skip_iter = -1;
  long late_ms = 0, straggler_ms = 0, max_recoveries = -1, min_recoveries = 0;
  size_t min_bytes = 1400000, max_bytes = 7200000;
  const std::map<std::string, std::function<void(const std::string&)>> flags = {
      {"--topology", [&](const std::string& v) { topology = v; }},
      {"--iters", [&](const std::string& v) { iters = std::stoi(v); }},
      {"--min-bytes", [&](const std::string& v) { min_bytes = parse_bytes(v); }},
      {"--max-bytes", [&](const std::string& v) { max_bytes = parse_bytes(v); }},
      {"--mode", [&](const std::string& v) { mode = v; }},
      {"--straggler", [&](const std::string& v) { straggler = std::stoi(v); }},
      {"--straggler-iter", [&](const std::string& v) { straggler_iter = std::stoi(v); }},
      {"--straggler-ms", [&](const std::string& v) { straggler_ms = std::stol(v); }},
      {"--skip-send", [&](const std::string& v) { skip_send = std::stoi(v); }},
      {"--skip-iter", [&](const std::string& v) { skip_iter = std::stoi(v); }},
      {"--expect", [&](const std::string& v) { expect = v; }},
      {"--max-recoveries", [&](const std::string& v) { max_recoveries = std::stol(v); }},
      {"--min-recoveries", [&](const std::string& v) { min_recoveries = std::stol(v); }},
      {"--late", [&](const std::string& v) { late = std::stoi(v); }},
      {"--late-ms", [&](const std::string& v) { late_ms = std::stol(v); }},
      {"--memory", [&](const std::string& v) { memory = v; }},
      {"--expect-device-transport", [&](const std::string& v) { expect_device_transport = v; }},
  };
  for (int a = 1; a + 1 < argc; a += 2) {
    auto flag = flags.find(argv[a]);
    if (flag == flags.end()) {
      std::fprintf(stderr, "pipeline_worker: unknown option %s\n", argv[a]);
      return 2;
    }
    flag->second(argv[a + 1]);
  }
  if (const char* r = std::getenv("RCOLL_RANK"); r != nullptr && std::atoi(r) == late) {
    std::printf("stage %d: starting %ld ms late\n", late, late_ms);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
  }
  const bool on_device = memory == "cuda";
  if (on_device) {
    if (const std::string why = DeviceMessages::unusable(); !why.empty()) {
      std::printf("SKIP: %s\n", why.c_str());
      return 77;
    }
  }
  Communicator comm = Communicator::create();
  DeviceMessages device;
  if (on_device) device.init(max_bytes / sizeof(float) + 1);
  OpOptions options;
  options.cuda_stream = device.stream();
  const int s = comm.rank(), p = comm.size();
  const bool ring = topology == "ring";
  const int next = ring || s + 1 < p ? (s + 1) % p : -1;
  const int prev = ring || s > 0 ? (s - 1 + p) % p : -1;
  const auto t0 = std::chrono::steady_clock::now();
  long checked = 0;
  for (int i = 0; i < iters; ++i) {
    if (s == straggler && i == straggler_iter) {
      std::printf("stage %d: computing for %ld ms before iteration %d\n", s, straggler_ms, i);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(straggler_ms));
    }
    std::vector<float> out, in;
    std::vector<PeerOp> group;
    if (next >= 0 && !(s == skip_send && i == skip_iter)) {
      out.resize(message_floats(s, i, min_bytes, max_bytes));
      for (size_t k = 0; k < out.size(); ++k) out[k] = value(s, i, k);
      group.push_back(PeerOp::send(on_device ? device.send(out) : Buffer::of(out), next));
    }
    if (prev >= 0) {
      in.assign(message_floats(prev, i, min_bytes, max_bytes), -1.0f);
      group.push_back(PeerOp::recv(on_device ? device.recv(in.size()) : Buffer::of(in), prev));
    }
    Status st;
    if (mode == "grouped" && on_device) {
      // As NCCL users wait: the stream waits for the group, then the
      // message comes back on it; the host only waits for the stream.
      const Work w = comm.group_async(group, options);
      st = w.stream_wait(device.stream());
      if (st.ok()) device.fetch(in);
      if (st.ok()) st = w.wait();
    } else if (mode == "grouped") {
      st = comm.group_async(group).wait();
    } else if (on_device) {
      std::fprintf(stderr, "pipeline_worker: --mode ungrouped is for host memory\n");
      return 2;
    } else {
      // Receive first, then send: around a ring every stage waits on the one before.
      std::vector<Work> works;
      for (auto it = group.rbegin(); it != group.rend(); ++it)
        works.push_back(it->is_send ? comm.send_async(it->data, it->peer)
                                    : comm.recv_async(it->data, it->peer));
      for (auto& w : works) {
        Status one = w.wait();
        if (st.ok()) st = one;
      }
    }
    if (!st.ok()) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("stage %d: iteration %d failed after %.1f s: %s\n", s, i, secs,
                  st.to_string().c_str());
      if (expect == "desync" && st.code() == ErrorCode::kDesync) {
        std::printf("stage %d: failed with kDesync as expected\n", s);
        return 0;
      }
      return 1;
    }
    for (size_t k = 0; k < in.size(); ++k) {
      if (in[k] != value(prev, i, k)) {
        std::printf("stage %d: iteration %d: element %zu from stage %d is %g, want %g\n", s, i, k,
                    prev, static_cast<double>(in[k]), static_cast<double>(value(prev, i, k)));
        return 1;
      }
    }
    checked += static_cast<long>(in.size());
  }
  const Counters c = comm.counters();
  std::printf(
      "stage %d: %d iterations, %ld floats checked, %llu recoveries, transport %s%s%s, %.2f s\n", s,
      iters, checked, static_cast<unsigned long long>(c.recoveries), c.transport.c_str(),
      on_device ? ", device ops " : "", on_device ? c.device_transport.c_str() : "",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (expect != "ok") {
    std::printf("stage %d: completed, but expected %s\n", s, expect.c_str());
    return 1;
  }
  if (max_recoveries >= 0 && static_cast<long>(c.recoveries) > max_recoveries) {
    std::printf("stage %d: %llu recoveries, at most %ld allowed\n", s,
                static_cast<unsigned long long>(c.recoveries), max_recoveries);
    return 1;
  }
  if (on_device && !expect_device_transport.empty() &&
      c.device_transport != expect_device_transport) {
    std::printf("stage %d: device ops ran %s, expected %s\n", s, c.device_transport.c_str(),
                expect_device_transport.c_str());
    return 1;
  }
  if (on_device && c.device_transport == "nccl" && c.nccl_ops < static_cast<uint64_t>(iters)) {
    std::printf("stage %d: %llu ops completed on NCCL, expected one group per iteration (%d)\n", s,
                static_cast<unsigned long long>(c.nccl_ops), iters);
    return 1;
  }
  if (static_cast<long>(c.recoveries) < min_recoveries) {
    std::printf("stage %d: %llu recoveries, at least %ld expected\n", s,
                static_cast<unsigned long long>(c.recoveries), min_recoveries);
    return 1;
  }
  return 0;
}
