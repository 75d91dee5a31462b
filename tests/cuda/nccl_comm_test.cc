// The NCCL communicator on its own (transports/nccl/nccl_comm.h), in one
// process: argument checks, the typed error without a GPU, and on a GPU a
// one-rank communicator's calls, ticket order and the abort's semantics.
// Several ranks, the stall and the rebuild: tests/cuda/nccl_worker.cc.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda_memory.h"
#include "kernels/stream_gate.h"
#include "transports/nccl/nccl_comm.h"

namespace rcoll::nccl {
namespace {

std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorName(e);
  return n == 0 ? "no CUDA device" : "";
}

Comm::Waiter within(Deadline d) {
  return [d] { return d.expired() ? Status(ErrorCode::kTimeout, "the test's enqueue deadline") : Status(); };
}

Comm::Config one_rank() {
  Comm::Config c;
  c.init_deadline = Deadline::after(std::chrono::seconds(30));
  return c;
}

TEST(NcclComm, UniqueIdsAreFreshBytes) {
  auto a = new_unique_id(), b = new_unique_id();
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(a.value().size(), 128u);
  EXPECT_NE(a.value(), b.value());
  EXPECT_NE(version().find('.'), std::string::npos) << version();
}

TEST(NcclComm, MalformedIdIsInvalidArgument) {
  auto c = Comm::create("not an id", one_rank());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("128 bytes, got 9"), std::string::npos) << c.status().to_string();
}

TEST(NcclComm, RankOutsideTheGroupIsInvalidArgument) {
  auto id = new_unique_id();
  ASSERT_TRUE(id.ok());
  Comm::Config cfg = one_rank();
  cfg.rank = 2;
  cfg.size = 2;
  auto c = Comm::create(id.value(), cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("rank 2 of 2"), std::string::npos) << c.status().to_string();
}

// Without a GPU the init fails at once with kUnsupported naming the CUDA
// error, instead of hanging or crashing; with one, this case cannot occur.
TEST(NcclComm, WithoutAGpuInitIsUnsupported) {
  const std::string why = no_gpu_reason();
  if (why.empty()) GTEST_SKIP() << "this host has a GPU";
  auto id = new_unique_id();
  ASSERT_TRUE(id.ok());
  const auto started = std::chrono::steady_clock::now();
  auto c = Comm::create(id.value(), one_rank());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(c.status().message().find("no usable CUDA device"), std::string::npos) << c.status().to_string();
  EXPECT_EQ(c.status().context().transport, "nccl");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
}

#define RCOLL_REQUIRE_GPU()                       \
  do {                                            \
    const std::string why = no_gpu_reason();      \
    if (!why.empty()) GTEST_SKIP() << why;        \
  } while (0)

class DeviceFloats {
 public:
  explicit DeviceFloats(size_t n) : n_(n) { EXPECT_EQ(cudaMalloc(&p_, n * sizeof(float)), cudaSuccess); }
  ~DeviceFloats() { cudaFree(p_); }
  float* get() const { return p_; }
  // Waited for: from pageable memory the copy may land after cudaMemcpy
  // returns, and NCCL reads on a stream of its own.
  void put(const std::vector<float>& v) {
    ASSERT_EQ(cudaMemcpy(p_, v.data(), n_ * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  }
  std::vector<float> fetch() const {
    std::vector<float> v(n_);
    EXPECT_EQ(cudaMemcpy(v.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

 private:
  float* p_ = nullptr;
  size_t n_;
};

// A one-rank communicator from a fresh unique id.
Result<std::unique_ptr<Comm>> make_one_rank() {
  auto id = new_unique_id();
  if (!id.ok()) return id.status();
  return Comm::create(id.value(), one_rank());
}

bool wait(Comm& c, uint64_t ticket) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until) {
    auto r = c.poll(ticket);
    if (!r.ok()) return false;
    if (r.value()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return false;
}

TEST(NcclComm, OneRankCallsCompleteInOrder) {
  RCOLL_REQUIRE_GPU();
  auto c = make_one_rank();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  Comm& comm = *c.value();
  const size_t n = 1 << 20;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);
  DeviceFloats a(n), b(n);
  a.put(host);
  const Comm::Waiter d = within(Deadline::after(std::chrono::seconds(30)));
  // Two calls; the second's completion implies the first's.
  auto t1 = comm.issue(Call{CallKind::kAllReduce, a.get(), b.get(), n, DataType::kFloat32, ReduceOp::kSum}, d);
  auto t2 = comm.issue(Call{CallKind::kBroadcast, b.get(), a.get(), n, DataType::kFloat32, ReduceOp::kSum, 0}, d);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_LT(t1.value(), t2.value());
  ASSERT_TRUE(wait(comm, t2.value()));
  auto first = comm.poll(t1.value());
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first.value());
  EXPECT_EQ(a.fetch(), host);  // one rank: the sum and the broadcast are the input
  EXPECT_EQ(b.fetch(), host);
}

// After abort(): calls that completed before it stay completed; new calls
// and pending ones fail with kAborted, and the reason is kept.
TEST(NcclComm, AbortFailsWhatComesAfter) {
  RCOLL_REQUIRE_GPU();
  auto c = make_one_rank();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  Comm& comm = *c.value();
  DeviceFloats a(1024);
  a.put(std::vector<float>(1024, 1.0f));
  const Comm::Waiter d = within(Deadline::after(std::chrono::seconds(30)));
  auto t = comm.issue(Call{CallKind::kAllReduce, a.get(), a.get(), 1024, DataType::kFloat32, ReduceOp::kSum}, d);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(wait(comm, t.value()));
  comm.abort(Status(ErrorCode::kTimeout, "test says so"));
  EXPECT_TRUE(comm.aborted());
  auto before = comm.poll(t.value());
  ASSERT_TRUE(before.ok());
  EXPECT_TRUE(before.value());
  auto later = comm.issue(Call{CallKind::kAllReduce, a.get(), a.get(), 1024, DataType::kFloat32, ReduceOp::kSum}, d);
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.status().code(), ErrorCode::kAborted);
  EXPECT_NE(later.status().message().find("test says so"), std::string::npos);
  comm.abort(Status(ErrorCode::kTimeout, "again"));  // idempotent
}

// Under a held gate an abort leaves NCCL alone: stopping it would free
// pinned memory, a wait for the held stream (stop 52's hang). The stop is put
// off, the call issued before it runs to its end, work ordered after the
// communicator waits for its calls, and once the gate opened finish_stop()
// stops it and release() frees it at once.
TEST(NcclComm, AnAbortUnderAHeldGateIsPutOffToRelease) {
  RCOLL_REQUIRE_GPU();
  namespace cuda = kernels::cuda;
  auto gate = cuda::StreamGate::create(0);
  if (!gate.ok()) GTEST_SKIP() << "no stream gate here: " << gate.status().to_string();
  if (!revocable()) GTEST_SKIP() << "NCCL " << version() << " cannot revoke";
  auto c = make_one_rank();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  Comm& comm = *c.value();
  const size_t n = 1 << 20;
  DeviceFloats a(n);
  a.put(std::vector<float>(n, 3.0f));

  cudaStream_t held = nullptr, after = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&after, cudaStreamNonBlocking), cudaSuccess);
  gate.value()->hold(1);
  ASSERT_TRUE(gate.value()->enqueue_wait(held, 1).ok());
  auto t = comm.issue(
      Call{CallKind::kAllReduce, a.get(), a.get(), n, DataType::kFloat32, ReduceOp::kSum},
      within(Deadline::after(std::chrono::seconds(30))));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::atomic<bool> done{false};
  std::thread aborting([&] {
    comm.abort(Status(ErrorCode::kTransport, "the test's failed link"));
    done = true;
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool in_time = done;
  if (!in_time) gate.value()->open_through(1);  // lets a stuck stop go, so the test ends
  aborting.join();
  EXPECT_TRUE(in_time) << "the abort waited for the stream held at the gate";
  EXPECT_TRUE(comm.aborted());
  EXPECT_TRUE(comm.stop_put_off());
  auto polled = comm.poll(t.value());
  EXPECT_FALSE(polled.ok()) << "a call pending at the abort must not count as done";
  // Not stopped: the call runs to its end (one rank: the sum is the input),
  // and a stream ordered after the communicator sees it done.
  ASSERT_TRUE(comm.order_after_me(after).ok());
  ASSERT_EQ(cudaStreamSynchronize(after), cudaSuccess);
  EXPECT_EQ(a.fetch(), std::vector<float>(n, 3.0f));

  gate.value()->open_through(1);
  EXPECT_EQ(cudaStreamSynchronize(held), cudaSuccess);
  comm.finish_stop();
  EXPECT_FALSE(comm.stop_put_off());
  EXPECT_TRUE(release(std::move(c).value(), 0)) << "no gate holds a stream: freed at once";
  (void)cudaStreamDestroy(held);
  (void)cudaStreamDestroy(after);
}

// A confirmation's ticket comes after the calls before it and completes once
// its pair is back in host memory.
TEST(NcclComm, AConfirmationCompletesAfterTheCallsBeforeIt) {
  RCOLL_REQUIRE_GPU();
  auto c = make_one_rank();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  Comm& comm = *c.value();
  const size_t n = 1 << 20;
  DeviceFloats a(n), b(n);
  a.put(std::vector<float>(n, 2.0f));
  const Comm::Waiter d = within(Deadline::after(std::chrono::seconds(30)));
  auto t1 = comm.issue(
      Call{CallKind::kAllReduce, a.get(), b.get(), n, DataType::kFloat32, ReduceOp::kSum}, d);
  auto t2 = comm.issue_confirmation(42, d);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_LT(t1.value(), t2.value());
  ASSERT_TRUE(wait(comm, t2.value()));
  auto first = comm.poll(t1.value());
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first.value());
  EXPECT_TRUE(comm.fingerprints_agree()) << "the confirmation's pair was read before it landed";
  EXPECT_EQ(b.fetch(), std::vector<float>(n, 2.0f));
}

// While a stream waits at a stream gate, freeing pinned memory or an NCCL
// communicator (each waits for the whole GPU) is put off, not done: the
// runtime's verdict for that stream may need the very thread that frees.
// Once the gate opens, free_deferred frees them.
TEST(NcclComm, FreesArePutOffWhileAStreamWaitsAtAGate) {
  RCOLL_REQUIRE_GPU();
  namespace cuda = kernels::cuda;
  auto gate = cuda::StreamGate::create(0);
  if (!gate.ok()) GTEST_SKIP() << "no stream gate here: " << gate.status().to_string();
  auto c = make_one_rank();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  DeviceFloats a(1024);
  a.put(std::vector<float>(1024, 1.0f));
  auto t = c.value()->issue(Call{CallKind::kAllReduce, a.get(), a.get(), 1024, DataType::kFloat32, ReduceOp::kSum},
                            within(Deadline::after(std::chrono::seconds(30))));
  ASSERT_TRUE(t.ok() && wait(*c.value(), t.value()));
  cuda::PinnedBuffer pinned;
  ASSERT_TRUE(pinned.reserve(1 << 20).ok());

  cudaStream_t held = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), cudaSuccess);
  gate.value()->hold(1);
  ASSERT_TRUE(gate.value()->enqueue_wait(held, 1).ok());
  EXPECT_TRUE(cuda::StreamGate::any_held());

  std::atomic<bool> done{false};
  bool destroyed_now = true;
  std::thread freeing([&] {
    pinned.release();
    destroyed_now = release(std::move(c).value(), 0);
    done = true;
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool in_time = done;
  gate.value()->open_through(1);  // lets the stream (and a free stuck behind it) go
  freeing.join();
  EXPECT_TRUE(in_time) << "a free waited for the stream held at the gate";
  EXPECT_FALSE(destroyed_now) << "the communicator was destroyed while a stream was held";
  EXPECT_FALSE(cuda::StreamGate::any_held());
  cuda::StreamGate::free_deferred();
  EXPECT_EQ(cudaStreamSynchronize(held), cudaSuccess);
  (void)cudaStreamDestroy(held);
}

}  // namespace
}  // namespace rcoll::nccl
