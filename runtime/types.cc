#include "rcoll/types.h"

#include <string>

namespace rcoll {

size_t size_of(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8:
    case DataType::kUint8: return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

const char* to_string(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kUint32: return "uint32";
    case DataType::kInt64: return "int64";
    case DataType::kUint64: return "uint64";
    case DataType::kFloat16: return "float16";
    case DataType::kBfloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
  }
  return "invalid-dtype";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "invalid-op";
}

bool is_floating(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBfloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

std::optional<DataType> parse_data_type(std::string_view name) {
  struct Alias {
    const char* name;
    DataType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"int8", DataType::kInt8},        {"i8", DataType::kInt8},
      {"uint8", DataType::kUint8},      {"u8", DataType::kUint8},
      {"int32", DataType::kInt32},      {"i32", DataType::kInt32},
      {"int", DataType::kInt32},        {"uint32", DataType::kUint32},
      {"u32", DataType::kUint32},       {"int64", DataType::kInt64},
      {"i64", DataType::kInt64},        {"uint64", DataType::kUint64},
      {"u64", DataType::kUint64},       {"float16", DataType::kFloat16},
      {"half", DataType::kFloat16},     {"f16", DataType::kFloat16},
      {"fp16", DataType::kFloat16},     {"bfloat16", DataType::kBfloat16},
      {"bf16", DataType::kBfloat16},    {"float32", DataType::kFloat32},
      {"float", DataType::kFloat32},    {"f32", DataType::kFloat32},
      {"fp32", DataType::kFloat32},     {"float64", DataType::kFloat64},
      {"double", DataType::kFloat64},   {"f64", DataType::kFloat64},
      {"fp64", DataType::kFloat64},
  };
  for (const auto& a : kAliases)
    if (name == a.name) return a.dtype;
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    auto op = static_cast<ReduceOp>(i);
    if (name == to_string(op)) return op;
  }
  return std::nullopt;
}

}  // namespace rcoll
