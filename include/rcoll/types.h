// Data types, reduce ops and buffers as the public API sees them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rcoll {

enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat16,
  kBfloat16,
  kFloat32,
  kFloat64,
};
inline constexpr int kNumDataTypes = 10;

enum class ReduceOp : uint8_t { kSum = 0, kProd, kMin, kMax, kAvg };
inline constexpr int kNumReduceOps = 5;

enum class MemoryKind : uint8_t { kHost = 0, kCuda };

size_t size_of(DataType dtype);
const char* to_string(DataType dtype);
const char* to_string(ReduceOp op);
std::optional<DataType> parse_data_type(std::string_view name);  // "float32", "f32", "bf16", ...
std::optional<ReduceOp> parse_reduce_op(std::string_view name);  // "sum", "prod", ...
bool is_floating(DataType dtype);

// IEEE binary16 and bfloat16 as stored bits. Conversions round to nearest even.
struct float16 {
  uint16_t bits;
};
struct bfloat16 {
  uint16_t bits;
};
float to_float(float16 v);
float to_float(bfloat16 v);
float16 to_float16(float v);
bfloat16 to_bfloat16(float v);

template <typename T>
constexpr std::optional<DataType> data_type_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, int8_t>) return DataType::kInt8;
  else if constexpr (std::is_same_v<U, uint8_t>) return DataType::kUint8;
  else if constexpr (std::is_same_v<U, int32_t>) return DataType::kInt32;
  else if constexpr (std::is_same_v<U, uint32_t>) return DataType::kUint32;
  else if constexpr (std::is_same_v<U, int64_t>) return DataType::kInt64;
  else if constexpr (std::is_same_v<U, uint64_t>) return DataType::kUint64;
  else if constexpr (std::is_same_v<U, float16>) return DataType::kFloat16;
  else if constexpr (std::is_same_v<U, bfloat16>) return DataType::kBfloat16;
  else if constexpr (std::is_same_v<U, float>) return DataType::kFloat32;
  else if constexpr (std::is_same_v<U, double>) return DataType::kFloat64;
  else return std::nullopt;
}

// A typed view of memory the caller owns. rcoll never frees it and never
// writes to a buffer that an op takes as input.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;  // elements, not bytes
  DataType dtype = DataType::kFloat32;
  MemoryKind memory = MemoryKind::kHost;

  size_t bytes() const { return count * size_of(dtype); }

  template <typename T>
  static Buffer of(T* data, size_t count) {
    static_assert(data_type_of<T>().has_value(), "rcoll: unsupported element type");
    return Buffer{const_cast<std::remove_cv_t<T>*>(data), count, *data_type_of<T>()};
  }
  template <typename T>
  static Buffer of(std::vector<T>& v) {
    return of(v.data(), v.size());
  }
  template <typename T>
  static Buffer of(const std::vector<T>& v) {
    return of(v.data(), v.size());
  }
};

}  // namespace rcoll
