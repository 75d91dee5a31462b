// Tests for the CUDA reduction kernels (kernels/cuda_reduce.h).
//
// The device result of every dtype x op is compared with the host kernels
// (kernels/cpu_reduce.h) on the same inputs, bit for bit (NaN against NaN, since
// payloads differ between x86 and the GPU). The host kernels are checked
// against an independent reference in tests/kernels_test.cc, so this carries
// that reference over to the device. Sizes cover a tail shorter than a
// 16-byte vector, a misaligned buffer (the scalar path), aliasing (dst == a,
// dst == b) and more elements than one grid covers (the grid-stride loop).
//
// Tests that need a GPU skip, naming the reason, when there is none; the
// argument checks run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_reduce.h"
#include "kernels/cuda_reduce.h"
#include "rcoll/types.h"

namespace rcoll::kernels {
namespace {

// Every dtype and reduce op, in enum order.
std::vector<DataType> all_types() {
  std::vector<DataType> out;
  for (int i = 0; i < kNumDataTypes; ++i) out.push_back(static_cast<DataType>(i));
  return out;
}
std::vector<ReduceOp> all_ops() {
  std::vector<ReduceOp> out;
  for (int i = 0; i < kNumReduceOps; ++i) out.push_back(static_cast<ReduceOp>(i));
  return out;
}
constexpr int kAvgDivisor = 3;

bool no_device(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no usable CUDA device: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    return true;
  }
  if (n == 0) {
    *why = "no CUDA device";
    return true;
  }
  return false;
}

#define RCOLL_REQUIRE_GPU()                    \
  do {                                         \
    std::string why;                           \
    if (no_device(&why)) GTEST_SKIP() << why;  \
  } while (0)

// Device memory, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p_, std::max<size_t>(bytes, 1)) != cudaSuccess) p_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get() const { return static_cast<char*>(p_); }

 private:
  void* p_ = nullptr;
};

// Random operands: integers over their whole range; floats mostly in [-4, 4]
// (so that products neither overflow nor vanish), with NaN, infinities and
// signed zeros at fixed places.
std::vector<unsigned char> operand(DataType d, size_t count, uint32_t seed) {
  const size_t es = size_of(d);
  std::vector<unsigned char> bytes(count * es);
  std::mt19937 rng(seed);
  if (!is_floating(d)) {
    for (auto& b : bytes) b = static_cast<unsigned char>(rng());
    return bytes;
  }
  std::uniform_real_distribution<double> value(-4.0, 4.0);
  const double special[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(), 0.0, -0.0};
  std::vector<float> f32(count);
  for (size_t i = 0; i < count; ++i) {
    double v = i % 97 == 13 ? special[(i / 97 + seed) % 5] : value(rng);
    if (d == DataType::kFloat64) {
      std::memcpy(bytes.data() + i * es, &v, es);
    } else {
      f32[i] = static_cast<float>(v);
    }
  }
  if (d == DataType::kFloat32) std::memcpy(bytes.data(), f32.data(), bytes.size());
  for (size_t i = 0; d == DataType::kFloat16 && i < count; ++i) {
    const float16 h = to_float16(f32[i]);
    std::memcpy(bytes.data() + i * es, &h, es);
  }
  for (size_t i = 0; d == DataType::kBfloat16 && i < count; ++i) {
    const bfloat16 h = to_bfloat16(f32[i]);
    std::memcpy(bytes.data() + i * es, &h, es);
  }
  return bytes;
}

bool element_is_nan(DataType d, const unsigned char* p) {
  switch (d) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7fffu) > 0x7c00u;
    }
    case DataType::kBfloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7fffu) > 0x7f80u;
    }
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case DataType::kFloat64: {
      double f;
      std::memcpy(&f, p, 8);
      return std::isnan(f);
    }
    default:
      return false;
  }
}

// First element where the two results differ (NaN equals NaN), or -1.
long first_difference(DataType d, const std::vector<unsigned char>& want, const std::vector<unsigned char>& got) {
  const size_t es = size_of(d), n = want.size() / es;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char* w = want.data() + i * es;
    const unsigned char* g = got.data() + i * es;
    if (std::memcmp(w, g, es) == 0) continue;
    if (element_is_nan(d, w) && element_is_nan(d, g)) continue;
    return static_cast<long>(i);
  }
  return -1;
}

enum class Alias { kNone, kDstIsA, kDstIsB };

// Runs one (dtype, op, count) on the device at `offset_elems` from a 256-byte
// boundary and returns the host-kernel result and the device one.
void run_case(DataType d, ReduceOp op, size_t count, size_t offset_elems, Alias alias, uint32_t seed) {
  SCOPED_TRACE(std::string(to_string(d)) + " " + to_string(op) + " count " + std::to_string(count) + " offset " +
               std::to_string(offset_elems) + " alias " + std::to_string(static_cast<int>(alias)));
  const size_t es = size_of(d), bytes = count * es, off = offset_elems * es;
  const auto a = operand(d, count, seed), b = operand(d, count, seed + 1);

  std::vector<unsigned char> want(bytes);
  reduce(d, op, want.data(), a.data(), b.data(), count);
  if (op == ReduceOp::kAvg) scale_avg(d, want.data(), count, kAvgDivisor);

  DeviceBuffer da(bytes + off), db(bytes + off), dd(bytes + off);
  ASSERT_NE(da.get(), nullptr);
  ASSERT_NE(db.get(), nullptr);
  ASSERT_NE(dd.get(), nullptr);
  ASSERT_EQ(cudaMemcpy(da.get() + off, a.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db.get() + off, b.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  char* dst = alias == Alias::kDstIsA ? da.get() + off : alias == Alias::kDstIsB ? db.get() + off : dd.get() + off;

  Status s = cuda::reduce(d, op, dst, da.get() + off, db.get() + off, count, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  if (op == ReduceOp::kAvg) {
    s = cuda::scale_avg(d, dst, count, kAvgDivisor, nullptr);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned char> got(bytes);
  ASSERT_EQ(cudaMemcpy(got.data(), dst, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  const long at = first_difference(d, want, got);
  EXPECT_EQ(at, -1) << "first differing element " << at;
}

TEST(CudaKernels, EveryDtypeAndOpEqualsTheHostKernels) {
  RCOLL_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DataType d : all_types()) {
    for (ReduceOp op : all_ops()) {
      if (!supports(d, op)) continue;
      for (size_t count : {size_t{1}, size_t{7}, size_t{4099}, (size_t{1} << 20) + 3}) {
        run_case(d, op, count, 0, Alias::kNone, seed++);
      }
    }
  }
}

TEST(CudaKernels, MisalignedBuffersTakeTheScalarPath) {
  RCOLL_REQUIRE_GPU();
  for (DataType d : all_types()) {
    run_case(d, ReduceOp::kSum, 100003, 1, Alias::kNone, 7);
  }
}

TEST(CudaKernels, DestinationMayAliasEitherInput) {
  RCOLL_REQUIRE_GPU();
  for (DataType d : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
    run_case(d, ReduceOp::kMax, 50001, 0, Alias::kDstIsA, 11);
    run_case(d, ReduceOp::kMax, 50001, 0, Alias::kDstIsB, 12);
  }
}

TEST(CudaKernels, MoreElementsThanOneGridCovers) {
  RCOLL_REQUIRE_GPU();
  // 4096 blocks x 512 threads x 4 floats per thread = 8 Mi elements per grid pass.
  run_case(DataType::kFloat32, ReduceOp::kSum, (size_t{8} << 20) * 2 + 5, 0, Alias::kNone, 21);
}

TEST(CudaKernels, IntegerAverageIsRefusedWithoutLaunching) {
  // Runs without a GPU: the check comes before any CUDA call.
  Status s = cuda::reduce(DataType::kInt32, ReduceOp::kAvg, nullptr, nullptr, nullptr, 10, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("avg of int32 is not supported"), std::string::npos) << s.to_string();
  s = cuda::scale_avg(DataType::kUint8, nullptr, 10, 3, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  s = cuda::scale_avg(DataType::kFloat32, nullptr, 10, 0, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(cuda::reduce(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0, nullptr).ok());
}

TEST(CudaKernels, WithoutADeviceALaunchFailsNamingTheCudaError) {
  std::string why;
  if (!no_device(&why)) GTEST_SKIP() << "a CUDA device is present: this checks the error path without one";
  Status s = cuda::reduce(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr, nullptr, 1024, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kTransport) << s.to_string();
  EXPECT_NE(s.message().find("CUDA reduction of 1024 float32 (sum) failed to launch: cuda"), std::string::npos)
      << s.to_string();
}

}  // namespace
}  // namespace rcoll::kernels
