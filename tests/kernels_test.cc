// Tests for the CPU reduction kernels (kernels/cpu_reduce.h) and the 16-bit
// float conversions (kernels/half.cc).
//
// Every kernel result is compared with a scalar reference written here from the
// definitions, not from the kernel code: integers in uint64 wrap-around
// arithmetic, floats in double (for two float32 operands one double operation
// rounded to float is the correctly rounded float32 result), and 16-bit floats
// rounded by searching the table of all representable values.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu_reduce.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "rcoll/types.h"

namespace rcoll::kernels {
namespace {

constexpr DataType kAllTypes[] = {
    DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
    DataType::kInt64,   DataType::kUint64,  DataType::kFloat16, DataType::kBfloat16,
    DataType::kFloat32, DataType::kFloat64,
};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kAvg};
constexpr size_t kCounts[] = {0, 1, 7, 33, 1000, 4099};
constexpr int kAvgDivisor = 3;  // not a power of two, so the division rounds

// ---------------------------------------------------------------------------
// Reference model of a 16-bit float format (IEEE binary16 or bfloat16).

struct HalfFormat {
  int exp_bits;
  int mant_bits;

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint16_t inf_bits() const { return uint16_t(((1u << exp_bits) - 1) << mant_bits); }
  bool is_nan(uint16_t bits) const { return (bits & 0x7fffu) > inf_bits(); }

  // Value of a bit pattern from the format definition.
  double decode(uint16_t bits) const {
    const bool neg = bits & 0x8000u;
    const int e = (bits >> mant_bits) & ((1 << exp_bits) - 1);
    const int m = bits & ((1 << mant_bits) - 1);
    double v;
    if (e == (1 << exp_bits) - 1) {
      v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    } else if (e == 0) {
      v = std::ldexp(double(m), 1 - bias() - mant_bits);
    } else {
      v = std::ldexp(double(m + (1 << mant_bits)), e - bias() - mant_bits);
    }
    return neg ? -v : v;
  }
};

constexpr HalfFormat kF16Format{5, 10};
constexpr HalfFormat kBf16Format{8, 7};

// Round-to-nearest-even into a 16-bit format by searching all its values.
// Positive patterns are ordered like their values, so the index of a value in
// the table is its bit pattern. One extra entry past the largest finite value,
// at the next power of two with the infinity pattern (even), makes overflow
// round like any other tie.
class HalfRounder {
 public:
  explicit HalfRounder(HalfFormat f) : format_(f) {
    for (uint32_t bits = 0; bits < f.inf_bits(); ++bits)
      values_.push_back(f.decode(uint16_t(bits)));
    values_.push_back(std::ldexp(1.0, (1 << (f.exp_bits - 1))));  // 2^(emax+1) -> inf
  }

  uint16_t round(double x) const {
    if (std::isnan(x)) return uint16_t(format_.inf_bits() | (1u << (format_.mant_bits - 1)));
    const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
    const double ax = std::fabs(x);
    if (ax >= values_.back()) return sign | format_.inf_bits();
    // values_[i] <= ax < values_[i + 1]
    const size_t i =
        size_t(std::upper_bound(values_.begin(), values_.end(), ax) - values_.begin()) - 1;
    const double below = ax - values_[i];
    const double above = values_[i + 1] - ax;
    size_t pick;
    if (below < above) {
      pick = i;
    } else if (above < below) {
      pick = i + 1;
    } else {
      pick = (i % 2 == 0) ? i : i + 1;  // tie: even mantissa
    }
    return uint16_t(sign | pick);
  }

  const std::vector<double>& values() const { return values_; }

 private:
  HalfFormat format_;
  std::vector<double> values_;
};

const HalfRounder& f16_rounder() {
  static const HalfRounder r(kF16Format);
  return r;
}
const HalfRounder& bf16_rounder() {
  static const HalfRounder r(kBf16Format);
  return r;
}

// ---------------------------------------------------------------------------
// Reference reductions, one element at a time.

bool is_minmax(ReduceOp op) { return op == ReduceOp::kMin || op == ReduceOp::kMax; }

template <typename T>
T ref_int(ReduceOp op, T a, T b) {
  const uint64_t ua = uint64_t(a), ub = uint64_t(b);  // wraps mod 2^64, hence mod 2^bits
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return T(ua + ub);
    case ReduceOp::kProd:
      return T(ua * ub);
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
  }
  return T{};
}

// In double; for float operands the single rounding to float at the end is exact
// (double has more than 2*24+2 bits). min/max propagate NaN.
double ref_float(ReduceOp op, double a, double b) {
  if (is_minmax(op) && (std::isnan(a) || std::isnan(b)))
    return std::numeric_limits<double>::quiet_NaN();
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
  }
  return 0;
}

// Elements are handled as raw bytes so one test body covers every dtype.
struct Elem {
  uint64_t raw = 0;  // the element's bytes in the low size_of(dtype) bytes
};

template <typename T>
T get(Elem e) {
  T v;
  std::memcpy(&v, &e.raw, sizeof v);
  return v;
}
template <typename T>
Elem put(T v) {
  Elem e;
  std::memcpy(&e.raw, &v, sizeof v);
  return e;
}

Elem ref_reduce(DataType dtype, ReduceOp op, Elem a, Elem b) {
  switch (dtype) {
    case DataType::kInt8:
      return put(ref_int(op, get<int8_t>(a), get<int8_t>(b)));
    case DataType::kUint8:
      return put(ref_int(op, get<uint8_t>(a), get<uint8_t>(b)));
    case DataType::kInt32:
      return put(ref_int(op, get<int32_t>(a), get<int32_t>(b)));
    case DataType::kUint32:
      return put(ref_int(op, get<uint32_t>(a), get<uint32_t>(b)));
    case DataType::kInt64:
      return put(ref_int(op, get<int64_t>(a), get<int64_t>(b)));
    case DataType::kUint64:
      return put(ref_int(op, get<uint64_t>(a), get<uint64_t>(b)));
    case DataType::kFloat32:
      return put(float(ref_float(op, get<float>(a), get<float>(b))));
    case DataType::kFloat64: {
      // One double operation is its own correctly rounded reference.
      return put(double(ref_float(op, get<double>(a), get<double>(b))));
    }
    case DataType::kFloat16:
    case DataType::kBfloat16: {
      const HalfFormat& f = dtype == DataType::kFloat16 ? kF16Format : kBf16Format;
      const HalfRounder& r = dtype == DataType::kFloat16 ? f16_rounder() : bf16_rounder();
      // The float32 computation, then one rounding to 16 bits.
      const float x = float(ref_float(op, f.decode(get<uint16_t>(a)), f.decode(get<uint16_t>(b))));
      return put(r.round(x));
    }
  }
  return {};
}

// The second step of avg on one already-reduced element.
Elem ref_scale(DataType dtype, Elem sum, int divisor) {
  switch (dtype) {
    case DataType::kFloat32:
      return put(float(double(get<float>(sum)) / divisor));
    case DataType::kFloat64:
      return put(get<double>(sum) / divisor);
    case DataType::kFloat16:
      return put(f16_rounder().round(float(kF16Format.decode(get<uint16_t>(sum)) / divisor)));
    case DataType::kBfloat16:
      return put(bf16_rounder().round(float(kBf16Format.decode(get<uint16_t>(sum)) / divisor)));
    default:
      return sum;
  }
}

// Equal, where any NaN equals any NaN, and for min/max +0 equals -0 (which of
// two equal zeros min/max returns is not specified).
bool same(DataType dtype, ReduceOp op, Elem got, Elem want) {
  if (got.raw == want.raw) return true;
  switch (dtype) {
    case DataType::kFloat32: {
      const float g = get<float>(got), w = get<float>(want);
      return (std::isnan(g) && std::isnan(w)) || (is_minmax(op) && g == w);
    }
    case DataType::kFloat64: {
      const double g = get<double>(got), w = get<double>(want);
      return (std::isnan(g) && std::isnan(w)) || (is_minmax(op) && g == w);
    }
    case DataType::kFloat16:
    case DataType::kBfloat16: {
      const HalfFormat& f = dtype == DataType::kFloat16 ? kF16Format : kBf16Format;
      const uint16_t g = get<uint16_t>(got), w = get<uint16_t>(want);
      return (f.is_nan(g) && f.is_nan(w)) ||
             (is_minmax(op) && (g & 0x7fffu) == 0 && (w & 0x7fffu) == 0);
    }
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------
// Inputs.

// Mostly ordinary values, with random bit patterns and special values mixed in
// so that overflow, subnormals, infinities and NaN go through every kernel.
Elem random_elem(DataType dtype, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> ordinary(-300.0, 300.0);
  const uint64_t bits = rng();
  const int kind = int(rng() % 100);  // < 80 ordinary, < 95 random bits, else special
  switch (dtype) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kInt64:
    case DataType::kUint64: {
      const size_t bytes = size_of(dtype);
      return Elem{bytes == 8 ? bits : bits & ((uint64_t(1) << (8 * bytes)) - 1)};
    }
    case DataType::kFloat32: {
      if (kind < 80) return put(float(ordinary(rng)));
      if (kind < 95) return put(std::bit_cast<float>(uint32_t(bits)));
      constexpr float kSpecial[] = {0.0f, -0.0f,  INFINITY, -INFINITY,
                                    NAN,  1e-40f, -1e-45f,  3.4e38f};
      return put(kSpecial[bits % std::size(kSpecial)]);
    }
    case DataType::kFloat64: {
      if (kind < 80) return put(ordinary(rng));
      if (kind < 95) return put(std::bit_cast<double>(bits));
      constexpr double kSpecial[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-310, -5e-324, 1.7e308};
      return put(kSpecial[bits % std::size(kSpecial)]);
    }
    case DataType::kFloat16:
    case DataType::kBfloat16: {
      const bool f16 = dtype == DataType::kFloat16;
      if (kind < 80) return put((f16 ? f16_rounder() : bf16_rounder()).round(float(ordinary(rng))));
      if (kind < 95) return put(uint16_t(bits));
      // zeros, infinities, a quiet and a signalling NaN, the largest finite value, the smallest
      // subnormal
      constexpr uint16_t kF16Special[] = {0x0000, 0x8000, 0x7c00, 0xfc00,
                                          0x7e00, 0x7c01, 0x7bff, 0x0001};
      constexpr uint16_t kBf16Special[] = {0x0000, 0x8000, 0x7f80, 0xff80,
                                           0x7fc0, 0x7f81, 0x7f7f, 0x0001};
      return put((f16 ? kF16Special : kBf16Special)[bits % 8]);
    }
  }
  return {};
}

// A buffer of elements at a chosen misalignment from a 64-byte boundary.
class TestBuffer {
 public:
  TestBuffer(DataType dtype, size_t count, size_t offset_elems)
      : size_(size_of(dtype)), count_(count), storage_((count + offset_elems) * size_ + 64) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((64 - base % 64) % 64) + offset_elems * size_;
  }
  void* data() { return data_; }
  Elem at(size_t i) const {
    Elem e;
    std::memcpy(&e.raw, data_ + i * size_, size_);
    return e;
  }
  void set(size_t i, Elem e) { std::memcpy(data_ + i * size_, &e.raw, size_); }
  size_t count() const { return count_; }

 private:
  size_t size_;
  size_t count_;
  std::vector<unsigned char> storage_;
  unsigned char* data_;
};

// ---------------------------------------------------------------------------
// Every dtype x op x count, through every entry point and aliasing pattern.

using KernelParam = std::tuple<DataType, ReduceOp, size_t>;

class KernelTest : public ::testing::TestWithParam<KernelParam> {};

// How the kernel is called.
enum class Call { kInplace, kOutOfPlace, kDstIsA, kDstIsB, kInplaceUnaligned };
constexpr Call kAllCalls[] = {Call::kInplace, Call::kOutOfPlace, Call::kDstIsA, Call::kDstIsB,
                              Call::kInplaceUnaligned};
const char* call_name(Call c) {
  switch (c) {
    case Call::kInplace:
      return "reduce_inplace";
    case Call::kOutOfPlace:
      return "reduce(dst, a, b)";
    case Call::kDstIsA:
      return "reduce(a, a, b)";
    case Call::kDstIsB:
      return "reduce(b, a, b)";
    case Call::kInplaceUnaligned:
      return "reduce_inplace at +1 element";
  }
  return "";
}

// Pins the float16 path for a scope (kernels/cpu_reduce.h), back to kBest after.
struct PinnedFloat16Path {
  explicit PinnedFloat16Path(Float16Path p) { pin_float16_path(p); }
  ~PinnedFloat16Path() { pin_float16_path(Float16Path::kBest); }
};

// The float16 paths this CPU has, the default first.
std::vector<Float16Path> float16_paths() {
  std::vector<Float16Path> paths;
  for (Float16Path p : {Float16Path::kBest, Float16Path::kAvx512Fp16, Float16Path::kAvx512Bw,
                        Float16Path::kAvx2, Float16Path::kF16c, Float16Path::kPortable}) {
    if (float16_path_available(p)) paths.push_back(p);
  }
  return paths;
}

// The same for bfloat16.
struct PinnedBfloat16Path {
  explicit PinnedBfloat16Path(Bfloat16Path p) { pin_bfloat16_path(p); }
  ~PinnedBfloat16Path() { pin_bfloat16_path(Bfloat16Path::kBest); }
};

std::vector<Bfloat16Path> bfloat16_paths() {
  std::vector<Bfloat16Path> paths;
  for (Bfloat16Path p : {Bfloat16Path::kBest, Bfloat16Path::kAvx512Bf16, Bfloat16Path::kAvx512Bw,
                         Bfloat16Path::kAvx2, Bfloat16Path::kPortable}) {
    if (bfloat16_path_available(p)) paths.push_back(p);
  }
  return paths;
}

void check_against_reference(DataType dtype, ReduceOp op, size_t count);

// float16 and bfloat16 run through every path the CPU has; the other types have one.
TEST_P(KernelTest, MatchesScalarReference) {
  const auto [dtype, op, count] = GetParam();
  if (dtype == DataType::kFloat16) {
    for (Float16Path path : float16_paths()) {
      SCOPED_TRACE(std::string("float16 path ") + to_string(path));
      PinnedFloat16Path pin(path);
      check_against_reference(dtype, op, count);
      if (HasFatalFailure()) return;
    }
  } else if (dtype == DataType::kBfloat16) {
    for (Bfloat16Path path : bfloat16_paths()) {
      SCOPED_TRACE(std::string("bfloat16 path ") + to_string(path));
      PinnedBfloat16Path pin(path);
      check_against_reference(dtype, op, count);
      if (HasFatalFailure()) return;
    }
  } else {
    check_against_reference(dtype, op, count);
  }
}

void check_against_reference(DataType dtype, ReduceOp op, size_t count) {
  const bool avg = op == ReduceOp::kAvg;
  // Integer avg is refused; the kernels then behave as sum (documented).
  const bool scale = avg && is_floating(dtype);
  ASSERT_EQ(supports(dtype, op), !avg || is_floating(dtype));

  std::mt19937_64 rng(uint64_t(dtype) * 1000003u + uint64_t(op) * 10007u + count);
  std::vector<Elem> a(count), b(count), want(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = random_elem(dtype, rng);
    b[i] = random_elem(dtype, rng);
    want[i] = ref_reduce(dtype, op, a[i], b[i]);
    if (scale) want[i] = ref_scale(dtype, want[i], kAvgDivisor);
  }

  for (Call call : kAllCalls) {
    SCOPED_TRACE(call_name(call));
    const size_t offset = call == Call::kInplaceUnaligned ? 1 : 0;
    TestBuffer ba(dtype, count, offset), bb(dtype, count, offset), out(dtype, count, 0);
    for (size_t i = 0; i < count; ++i) {
      ba.set(i, a[i]);
      bb.set(i, b[i]);
    }
    TestBuffer* result = &ba;
    switch (call) {
      case Call::kInplace:
      case Call::kInplaceUnaligned:
        reduce_inplace(dtype, op, ba.data(), bb.data(), count);
        break;
      case Call::kOutOfPlace:
        reduce(dtype, op, out.data(), ba.data(), bb.data(), count);
        result = &out;
        break;
      case Call::kDstIsA:
        reduce(dtype, op, ba.data(), ba.data(), bb.data(), count);
        break;
      case Call::kDstIsB:
        reduce(dtype, op, bb.data(), ba.data(), bb.data(), count);
        result = &bb;
        break;
    }
    if (scale) scale_avg(dtype, result->data(), count, kAvgDivisor);

    for (size_t i = 0; i < count; ++i) {
      ASSERT_TRUE(same(dtype, op, result->at(i), want[i]))
          << to_string(dtype) << " " << to_string(op) << " element " << i << " of " << count
          << ": a=0x" << std::hex << a[i].raw << " b=0x" << b[i].raw << " got=0x"
          << result->at(i).raw << " want=0x" << want[i].raw;
    }
    // Inputs that are not the destination are left untouched.
    for (size_t i = 0; i < count; ++i) {
      if (result != &ba) {
        ASSERT_EQ(ba.at(i).raw, a[i].raw) << "input a modified at " << i;
      }
      if (result != &bb) {
        ASSERT_EQ(bb.at(i).raw, b[i].raw) << "input b modified at " << i;
      }
    }
  }
}

// Every path of a 16-bit type gives the same bits as its portable one, NaNs
// included (payload and quietness), except that where both operands are NaN
// the result may be either one made quiet (cpu_reduce.cc): each of the 65536
// patterns against 64 others (the specials, then random patterns), every op,
// at a length that leaves a partial vector at the end, with a canary after.
// Then a signalling NaN and a number: the NaN, made quiet, whatever the op.
template <typename Path>
void check_paths_agree(DataType dtype, std::vector<uint16_t> others, const std::vector<Path>& paths,
                       Path portable, void (*pin)(Path), const char* (*path_taken)(ReduceOp)) {
  const HalfFormat& format = dtype == DataType::kFloat16 ? kF16Format : kBf16Format;
  const uint16_t quiet = uint16_t(1u << (format.mant_bits - 1));
  struct Unpin {  // back to kBest however the check ends
    void (*pin)(Path);
    ~Unpin() { pin(Path::kBest); }
  } unpin{pin};
  std::mt19937 rng(5);
  while (others.size() < 64) others.push_back(uint16_t(rng()));
  std::vector<uint16_t> a, b;
  // Each pattern twice: in order, then scattered (an odd multiplier permutes
  // the 16-bit patterns), so that NaNs also sit among other values in a
  // block rather than only beside each other and the infinities.
  for (uint16_t y : others) {
    for (uint32_t scatter : {1u, 40503u}) {
      for (uint32_t x = 0; x < 65536; ++x) {
        a.push_back(uint16_t(x * scatter));
        b.push_back(y);
      }
    }
  }
  // Every pair of those 64 once more, in blocks of 32 whose first element is a
  // NaN: a kernel may take another way through a block with a NaN in it.
  // (The blocks start at multiples of 32: so far a.size() is one.)
  const auto one = uint16_t(format.bias() << format.mant_bits);
  for (uint16_t x : others) {
    for (uint16_t y : others) {
      if (a.size() % 32 == 0) {
        a.push_back(uint16_t(format.inf_bits() | quiet));
        b.push_back(one);
      }
      a.push_back(x);
      b.push_back(y);
    }
  }
  for (int i = 0; i < 37; ++i) {  // the partial vector
    a.push_back(uint16_t(rng()));
    b.push_back(uint16_t(rng()));
  }
  auto nan = [&](uint16_t h) { return format.is_nan(h); };
  auto agree = [&](size_t i, uint16_t got, uint16_t want) {
    if (got == want) return true;
    if (!nan(a[i]) || !nan(b[i])) return false;
    return got == (a[i] | quiet) || got == (b[i] | quiet);
  };
  constexpr size_t kCanary = 64;  // after the data: a store past the end shows here
  for (ReduceOp op : kAllOps) {
    std::vector<uint16_t> want(a.size()), got;
    pin(portable);
    reduce(dtype, op, want.data(), a.data(), b.data(), a.size());
    if (op == ReduceOp::kAvg) scale_avg(dtype, want.data(), want.size(), kAvgDivisor);
    for (Path path : paths) {
      got.assign(a.size() + kCanary, 0xdead);  // nothing left from the path before
      pin(path);
      reduce(dtype, op, got.data(), a.data(), b.data(), a.size());
      if (op == ReduceOp::kAvg) scale_avg(dtype, got.data(), a.size(), kAvgDivisor);
      const std::string taken = path_taken(op);
      size_t i = 0;
      while (i < a.size() && agree(i, got[i], want[i])) ++i;
      ASSERT_EQ(i, a.size()) << to_string(dtype) << " " << to_string(op) << " on path "
                             << to_string(path) << " (" << taken << "): a=0x" << std::hex << a[i]
                             << " b=0x" << b[i] << " got=0x" << got[i] << " want=0x" << want[i];
      for (size_t c = a.size(); c < got.size(); ++c) {
        ASSERT_EQ(got[c], 0xdead) << to_string(op) << " on path " << to_string(path) << " wrote "
                                  << c - a.size() + 1 << " elements past the end";
      }
    }
  }
  const auto snan = uint16_t(format.inf_bits() | 1u);
  for (Path path : paths) {
    pin(path);
    for (ReduceOp op : kAllOps) {
      uint16_t x[2] = {snan, one}, y[2] = {one, uint16_t(0x8000u | snan)};
      reduce(dtype, op, x, x, y, 2);
      EXPECT_EQ(x[0], snan | quiet) << to_string(op) << " on path " << to_string(path);
      EXPECT_EQ(x[1], 0x8000u | snan | quiet) << to_string(op) << " on path " << to_string(path);
    }
  }
}

TEST(Kernels, Float16PathsAgreeBitForBit) {
  check_paths_agree(DataType::kFloat16,
                    {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe01, 0x7bff, 0xfbff, 0x0001,
                     0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x3800},
                    float16_paths(), Float16Path::kPortable, &pin_float16_path, &float16_path_name);
}

// bfloat16's specials include the subnormals and the smallest normals: on
// AVX512-BF16 a block with a subnormal result rounds with integer operations
// (the instruction would flush it to zero), so blocks of both kinds, and
// blocks that mix them, are checked.
TEST(Kernels, Bfloat16PathsAgreeBitForBit) {
  check_paths_agree(
      DataType::kBfloat16,
      {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xff81, 0x7f7f, 0xff7f, 0x0001,
       0x8001, 0x007f, 0x807f, 0x0080, 0x8080, 0x0081, 0x3f80, 0xbf80, 0x3f00, 0x0100},
      bfloat16_paths(), Bfloat16Path::kPortable, &pin_bfloat16_path, &bfloat16_path_name);
}

// A subnormal result in one lane of a block of 32 sends the whole block
// through integer rounding; the other lanes must come out the same, and the
// subnormal must not be flushed to zero (as VCVTNE2PS2BF16 would).
TEST(Kernels, Bfloat16SubnormalResultsAreNotFlushed) {
  for (Bfloat16Path path : bfloat16_paths()) {
    PinnedBfloat16Path pin(path);
    // 100 elements: lanes in the two-block loop (0-63), the one-block loop
    // (64-95) and the masked tail (96-99).
    for (size_t lane : {size_t(0), size_t(1), size_t(17), size_t(31), size_t(40), size_t(70),
                        size_t(95), size_t(97)}) {
      std::vector<uint16_t> a(100, 0x3f80), b(100, 0x3f00), want(100, 0x3fc0);  // 1 + 0.5
      // 2^-126 - 2^-127 = 2^-127, subnormal (0x0040)
      a[lane] = 0x0080;
      b[lane] = 0x8040;
      want[lane] = 0x0040;
      reduce(DataType::kBfloat16, ReduceOp::kSum, a.data(), a.data(), b.data(), a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i], want[i]) << "sum, subnormal in lane " << lane << ", element " << i
                                 << " on path " << to_string(path);
      }
    }
  }
}

// Which code ran, told by its rounding: under round-toward-zero in MXCSR,
// AVX512-FP16 rounds 1 + 3 x 2^-12 in float16 toward zero (1.0, 0x3c00), while
// F16C and the portable path add in float32 (exact here) and narrow to nearest
// (1 + 2^-10, 0x3c01). Sum and prod take AVX512-FP16 where the CPU has it (and
// by default); that min and max never do, Float16PathsAgreeBitForBit shows (a
// signalling NaN would come back as it is).
TEST(Kernels, Float16PathTakenIsTheOneChosen) {
  auto under_rz = [](Float16Path path, ReduceOp op) {
    PinnedFloat16Path pin(path);
    // 97 elements: the two-block loop, the one-block loop and a masked tail of one.
    std::vector<uint16_t> a(97, 0x3c00), b(97, 0x1200);
    // (1 + 23 x 2^-10)^2 = 1 + (46 + 529/1024) x 2^-10: 0x3c2e toward zero, 0x3c2f to nearest.
    if (op == ReduceOp::kProd) a.assign(97, 0x3c17), b.assign(97, 0x3c17);
    const int old = std::fegetround();
    std::fesetround(FE_TOWARDZERO);
    reduce(DataType::kFloat16, op, a.data(), a.data(), b.data(), a.size());
    std::fesetround(old);
    const uint16_t first = a[0];
    for (size_t i = 1; i < a.size(); ++i) EXPECT_EQ(a[i], first) << "element " << i;
    return first;
  };
  const bool fp16 = float16_path_available(Float16Path::kAvx512Fp16);
  RecordProperty("avx512fp16_path", fp16 ? "tested" : "not on this CPU");
  EXPECT_EQ(under_rz(Float16Path::kBest, ReduceOp::kSum), fp16 ? 0x3c00 : 0x3c01);
  EXPECT_EQ(under_rz(Float16Path::kPortable, ReduceOp::kSum), 0x3c01);
  EXPECT_EQ(under_rz(Float16Path::kPortable, ReduceOp::kProd), 0x3c2f);
  if (float16_path_available(Float16Path::kF16c)) {
    EXPECT_EQ(under_rz(Float16Path::kF16c, ReduceOp::kSum), 0x3c01);
  }
  if (fp16) {
    EXPECT_EQ(under_rz(Float16Path::kAvx512Fp16, ReduceOp::kSum), 0x3c00);
    EXPECT_EQ(under_rz(Float16Path::kAvx512Fp16, ReduceOp::kProd), 0x3c2e);
    EXPECT_EQ(under_rz(Float16Path::kBest, ReduceOp::kProd), 0x3c2e);
  } else {
    std::fprintf(stderr, "this CPU has no AVX512-FP16: that path is not tested here\n");
  }
}

// Sum and prod take AVX512-FP16 where the CPU has it, min and max AVX-512BW's
// integer compares (else AVX2's), and F16C what the CPU has neither for. A
// pinned path that does not compute an op leaves it to the default's choice.
TEST(Kernels, Float16PathsAreTheFastestTheCpuHas) {
  const std::string fallback = float16_path_available(Float16Path::kF16c) ? "f16c" : "portable";
  const std::string arithmetic = float16_path_name(ReduceOp::kSum);
  EXPECT_EQ(arithmetic, float16_path_name(ReduceOp::kProd));
  EXPECT_EQ(arithmetic, float16_path_available(Float16Path::kAvx512Fp16) ? "avx512fp16" : fallback);
  const std::string select = float16_path_name(ReduceOp::kMin);
  EXPECT_EQ(select, float16_path_name(ReduceOp::kMax));
  EXPECT_EQ(select, float16_path_available(Float16Path::kAvx512Bw) ? "avx512bw"
                    : float16_path_available(Float16Path::kAvx2)   ? "avx2"
                                                                   : fallback);
  {
    PinnedFloat16Path pin(Float16Path::kPortable);
    EXPECT_EQ(std::string(float16_path_name(ReduceOp::kSum)), "portable");
    EXPECT_EQ(std::string(float16_path_name(ReduceOp::kMax)), "portable");
  }
  {
    PinnedFloat16Path pin(Float16Path::kF16c);
    EXPECT_EQ(std::string(float16_path_name(ReduceOp::kMax)), fallback);
  }
  if (float16_path_available(Float16Path::kAvx512Fp16)) {
    PinnedFloat16Path pin(Float16Path::kAvx512Fp16);
    EXPECT_EQ(std::string(float16_path_name(ReduceOp::kSum)), "avx512fp16");
    EXPECT_EQ(float16_path_name(ReduceOp::kMin), select);
  }
  for (Float16Path p : {Float16Path::kAvx512Bw, Float16Path::kAvx2}) {
    if (!float16_path_available(p)) continue;
    PinnedFloat16Path pin(p);
    EXPECT_EQ(std::string(float16_path_name(ReduceOp::kMin)), to_string(p));
    EXPECT_EQ(float16_path_name(ReduceOp::kSum), arithmetic);
  }
  EXPECT_EQ(float16_path_name(ReduceOp::kSum), arithmetic);  // unpinned again
  EXPECT_EQ(float16_path_name(ReduceOp::kMax), select);
}

// Which code ran for min and max, told by the case the contract leaves open:
// of two NaNs, the integer compares (AVX-512BW, AVX2) return the one of larger
// magnitude (they key them alike), F16C and the portable path return a.
TEST(Kernels, SelectPathTakenIsTheOneChosen) {
  struct Case {
    DataType dtype;
    uint16_t nan_a, nan_b;  // quiet NaNs, nan_b of larger payload
  };
  enum class Pin { kBest, kAvx512Bw, kAvx2, kPortable };
  // Pins p for dtype; whether the CPU has it.
  auto pin = [](DataType dtype, Pin p) {
    constexpr Float16Path kF16[] = {Float16Path::kBest, Float16Path::kAvx512Bw, Float16Path::kAvx2,
                                    Float16Path::kPortable};
    constexpr Bfloat16Path kBf16[] = {Bfloat16Path::kBest, Bfloat16Path::kAvx512Bw,
                                      Bfloat16Path::kAvx2, Bfloat16Path::kPortable};
    if (dtype == DataType::kFloat16) {
      pin_float16_path(kF16[int(p)]);
      return float16_path_available(kF16[int(p)]);
    }
    pin_bfloat16_path(kBf16[int(p)]);
    return bfloat16_path_available(kBf16[int(p)]);
  };
  for (const Case& c :
       {Case{DataType::kFloat16, 0x7e01, 0x7eff}, Case{DataType::kBfloat16, 0x7fc1, 0x7fff}}) {
    auto run = [&](ReduceOp op) {
      // 97 elements: the two-block loops, the one-block loops and a tail.
      std::vector<uint16_t> a(97, c.nan_a), b(97, c.nan_b);
      reduce(c.dtype, op, a.data(), a.data(), b.data(), a.size());
      for (size_t i = 1; i < a.size(); ++i) EXPECT_EQ(a[i], a[0]) << "element " << i;
      return a[0];
    };
    const bool bw = pin(c.dtype, Pin::kAvx512Bw), avx2 = pin(c.dtype, Pin::kAvx2);
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      SCOPED_TRACE(std::string(to_string(c.dtype)) + " " + to_string(op));
      pin(c.dtype, Pin::kBest);
      EXPECT_EQ(run(op), bw || avx2 ? c.nan_b : c.nan_a) << "the default path";
      pin(c.dtype, Pin::kPortable);
      EXPECT_EQ(run(op), c.nan_a) << "portable";
      pin(c.dtype, Pin::kAvx512Bw);
      EXPECT_EQ(run(op), bw ? c.nan_b : c.nan_a) << "avx512bw (portable when unavailable)";
      pin(c.dtype, Pin::kAvx2);
      EXPECT_EQ(run(op), avx2 ? c.nan_b : c.nan_a) << "avx2 (portable when unavailable)";
    }
    pin(c.dtype, Pin::kBest);
    if (float16_path_available(Float16Path::kF16c) && c.dtype == DataType::kFloat16) {
      PinnedFloat16Path f16c(Float16Path::kF16c);
      EXPECT_EQ(run(ReduceOp::kMax), c.nan_a) << "f16c";
    }
    if (!bw) std::fprintf(stderr, "this CPU has no AVX-512BW: that path is not tested here\n");
    if (!avx2) std::fprintf(stderr, "this CPU has no AVX2: that path is not tested here\n");
  }
}

#if defined(__x86_64__)
// Sets MXCSR bits for a scope (DAZ 0x0040, FTZ 0x8000), restoring it after.
struct ScopedMxcsr {
  explicit ScopedMxcsr(unsigned bits) : saved(_mm_getcsr()) { _mm_setcsr(saved | bits); }
  ~ScopedMxcsr() { _mm_setcsr(saved); }
  unsigned saved;
};

// A caller may run with denormals-are-zero and flush-to-zero set (-ffast-math's
// startup code does, and torch.set_flush_denormal): the float32 operations
// then see subnormal operands as zero, on every path alike, and every path
// must still agree, including the ones whose instructions read MXCSR to
// classify a value. min(2^-133, 1) keeps the subnormal's bits, DAZ or not.
TEST(Kernels, Bfloat16PathsAgreeUnderDenormalsAreZero) {
  for (unsigned bits : {0x0040u, 0x8040u}) {
    SCOPED_TRACE(bits == 0x0040u ? "DAZ" : "DAZ and FTZ");
    ScopedMxcsr mxcsr(bits);
    check_paths_agree(DataType::kBfloat16, {0x0000, 0x0001, 0x8040, 0x007f, 0x0080, 0x3f80, 0x7fc0},
                      bfloat16_paths(), Bfloat16Path::kPortable, &pin_bfloat16_path,
                      &bfloat16_path_name);
    for (Bfloat16Path path : bfloat16_paths()) {
      PinnedBfloat16Path pin(path);
      uint16_t x[1] = {0x0001}, y[1] = {0x3f80};
      reduce(DataType::kBfloat16, ReduceOp::kMin, x, x, y, 1);
      EXPECT_EQ(x[0], 0x0001u) << "min on path " << to_string(path);
      std::vector<uint16_t> m(40, 0x0001), one(40, 0x3f80);  // a whole block, then the tail
      reduce(DataType::kBfloat16, ReduceOp::kMin, m.data(), m.data(), one.data(), m.size());
      for (size_t i = 0; i < m.size(); ++i)
        ASSERT_EQ(m[i], 0x0001u) << "element " << i << " on " << to_string(path);
    }
  }
}

// float16 values and their sums and products are normal in float32, and
// AVX512-FP16 ignores DAZ and FTZ: all its paths agree under both too.
TEST(Kernels, Float16PathsAgreeUnderDenormalsAreZero) {
  ScopedMxcsr mxcsr(0x8040u);
  check_paths_agree(DataType::kFloat16, {0x0000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0x7e00},
                    float16_paths(), Float16Path::kPortable, &pin_float16_path, &float16_path_name);
}
#endif

// bfloat16 sum and prod take AVX512-BF16 where the CPU has it, min and max
// AVX-512BW's integer compares (else AVX2's). (Every path gives the same bits, so unlike
// float16's no result tells which ran; the micro-benchmark shows it,
// bfloat16_sum against bfloat16_sum@portable.)
TEST(Kernels, Bfloat16PathIsTheFastestTheCpuHas) {
  const bool bf16 = bfloat16_path_available(Bfloat16Path::kAvx512Bf16);
  const bool bw = bfloat16_path_available(Bfloat16Path::kAvx512Bw);
  const bool avx2 = bfloat16_path_available(Bfloat16Path::kAvx2);
  RecordProperty("avx512bf16_path", bf16 ? "tested" : "not on this CPU");
  RecordProperty("avx512bw_path", bw ? "tested" : "not on this CPU");
  RecordProperty("avx2_path", avx2 ? "tested" : "not on this CPU");
  const std::string arithmetic = bf16 ? "avx512bf16" : "portable";
  const std::string select = bw ? "avx512bw" : avx2 ? "avx2" : "portable";
  auto taken = [](ReduceOp op) { return std::string(bfloat16_path_name(op)); };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kAvg})
    EXPECT_EQ(taken(op), arithmetic);
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) EXPECT_EQ(taken(op), select);
  {
    PinnedBfloat16Path pin(Bfloat16Path::kPortable);
    EXPECT_EQ(taken(ReduceOp::kSum), "portable");
    EXPECT_EQ(taken(ReduceOp::kMin), "portable");
  }
  {
    PinnedBfloat16Path pin(Bfloat16Path::kAvx512Bf16);  // min goes to the default's choice
    EXPECT_EQ(taken(ReduceOp::kSum), arithmetic);
    EXPECT_EQ(taken(ReduceOp::kMin), bf16 ? select : "portable");
  }
  {
    PinnedBfloat16Path pin(Bfloat16Path::kAvx512Bw);  // sum goes to the default's choice
    EXPECT_EQ(taken(ReduceOp::kMax), bw ? "avx512bw" : "portable");
    EXPECT_EQ(taken(ReduceOp::kSum), bw ? arithmetic : "portable");
  }
  {
    PinnedBfloat16Path pin(Bfloat16Path::kAvx2);
    EXPECT_EQ(taken(ReduceOp::kMax), avx2 ? "avx2" : "portable");
    EXPECT_EQ(taken(ReduceOp::kSum), avx2 ? arithmetic : "portable");
  }
  EXPECT_EQ(taken(ReduceOp::kSum), arithmetic);  // unpinned again
  EXPECT_EQ(taken(ReduceOp::kMax), select);
}

std::string kernel_param_name(const ::testing::TestParamInfo<KernelParam>& info) {
  const auto [dtype, op, count] = info.param;
  return std::string(to_string(dtype)) + "_" + to_string(op) + "_" + std::to_string(count);
}

INSTANTIATE_TEST_SUITE_P(AllTypesOpsCounts, KernelTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllOps),
                                            ::testing::ValuesIn(kCounts)),
                         kernel_param_name);

TEST(Kernels, ZeroCountTouchesNothing) {
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      reduce_inplace(dtype, op, nullptr, nullptr, 0);
      reduce(dtype, op, nullptr, nullptr, nullptr, 0);
    }
    if (is_floating(dtype)) scale_avg(dtype, nullptr, 0, 4);
  }
}

TEST(Kernels, SupportsRefusesExactlyIntegerAvg) {
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      const bool integer = !(dtype == DataType::kFloat16 || dtype == DataType::kBfloat16 ||
                             dtype == DataType::kFloat32 || dtype == DataType::kFloat64);
      EXPECT_EQ(supports(dtype, op), !(integer && op == ReduceOp::kAvg))
          << to_string(dtype) << " " << to_string(op);
    }
  }
}

TEST(Kernels, IntegerSumAndProdWrapAround) {
  std::vector<int32_t> a = {INT32_MAX, INT32_MIN, -1, 65536};
  std::vector<int32_t> b = {1, -1, INT32_MIN, 65536};
  reduce_inplace(DataType::kInt32, ReduceOp::kSum, a.data(), b.data(), a.size());
  EXPECT_EQ(a, (std::vector<int32_t>{INT32_MIN, INT32_MAX, INT32_MAX, 131072}));

  std::vector<int32_t> p = {65536, INT32_MIN, -3, 46341};
  std::vector<int32_t> q = {65536, -1, 5, 46341};
  reduce_inplace(DataType::kInt32, ReduceOp::kProd, p.data(), q.data(), p.size());
  // 2^32 -> 0; INT32_MIN * -1 -> INT32_MIN; 46341^2 = 2147488281 -> -2147479015
  EXPECT_EQ(p, (std::vector<int32_t>{0, INT32_MIN, -15, -2147479015}));

  std::vector<uint8_t> u = {200, 255, 16};
  std::vector<uint8_t> v = {100, 255, 16};
  reduce_inplace(DataType::kUint8, ReduceOp::kSum, u.data(), v.data(), u.size());
  EXPECT_EQ(u, (std::vector<uint8_t>{44, 254, 32}));
  reduce_inplace(DataType::kUint8, ReduceOp::kProd, u.data(), v.data(), u.size());
  EXPECT_EQ(u, (std::vector<uint8_t>{uint8_t(44 * 100), uint8_t(254 * 255), 0}));

  std::vector<int8_t> s = {127, -128, -128};
  std::vector<int8_t> t = {1, -1, -1};
  reduce_inplace(DataType::kInt8, ReduceOp::kSum, s.data(), t.data(), s.size());
  EXPECT_EQ(s, (std::vector<int8_t>{-128, 127, 127}));

  std::vector<int64_t> x = {INT64_MAX, INT64_MIN};
  std::vector<int64_t> y = {INT64_MAX, -1};
  reduce_inplace(DataType::kInt64, ReduceOp::kProd, x.data(), y.data(), x.size());
  EXPECT_EQ(x, (std::vector<int64_t>{1, INT64_MIN}));
}

TEST(Kernels, SignedAndUnsignedMinMaxDiffer) {
  std::vector<int32_t> a = {-1, 5};
  std::vector<int32_t> b = {1, -7};
  std::vector<int32_t> out(2);
  reduce(DataType::kInt32, ReduceOp::kMin, out.data(), a.data(), b.data(), 2);
  EXPECT_EQ(out, (std::vector<int32_t>{-1, -7}));
  std::vector<uint32_t> ua = {0xffffffffu, 5};
  std::vector<uint32_t> ub = {1, 0xfffffff9u};
  std::vector<uint32_t> uout(2);
  reduce(DataType::kUint32, ReduceOp::kMin, uout.data(), ua.data(), ub.data(), 2);
  EXPECT_EQ(uout, (std::vector<uint32_t>{1, 5}));
}

TEST(Kernels, AvgOnIntegersIsSumInTheKernel) {
  std::vector<int32_t> a = {1, 2, 3}, b = {10, 20, 30};
  reduce_inplace(DataType::kInt32, ReduceOp::kAvg, a.data(), b.data(), a.size());
  EXPECT_EQ(a, (std::vector<int32_t>{11, 22, 33}));
}

// NaN in either operand, at either position of a vector and in the tail, gives
// NaN for min and max; infinities order normally.
template <typename T>
void check_nan_and_inf_minmax(DataType dtype, T (*from)(float), float (*to)(T)) {
  constexpr size_t kN = 37;  // vector blocks plus a tail on every ISA
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> fa(kN), fb(kN);
  for (size_t i = 0; i < kN; ++i) {
    fa[i] = (i % 3 == 0) ? nan : (i % 4 == 1 ? inf : float(i));
    fb[i] = (i % 5 == 0) ? nan : (i % 4 == 2 ? -inf : -float(i));
  }
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    for (bool swapped : {false, true}) {
      std::vector<T> a(kN), b(kN), out(kN);
      for (size_t i = 0; i < kN; ++i) {
        a[i] = from(swapped ? fb[i] : fa[i]);
        b[i] = from(swapped ? fa[i] : fb[i]);
      }
      reduce(dtype, op, out.data(), a.data(), b.data(), kN);
      for (size_t i = 0; i < kN; ++i) {
        const float x = fa[i], y = fb[i], got = to(out[i]);
        SCOPED_TRACE(std::string(to_string(dtype)) + " " + to_string(op) + " element " +
                     std::to_string(i) + (swapped ? " swapped" : ""));
        if (std::isnan(x) || std::isnan(y)) {
          EXPECT_TRUE(std::isnan(got)) << got;
        } else {
          EXPECT_EQ(got, op == ReduceOp::kMin ? std::min(x, y) : std::max(x, y));
        }
      }
    }
  }
}

TEST(Kernels, MinMaxPropagateNanAndOrderInfinity) {
  check_nan_and_inf_minmax<float>(
      DataType::kFloat32, [](float f) { return f; }, [](float f) { return f; });
  check_nan_and_inf_minmax<double>(
      DataType::kFloat64, [](float f) { return double(f); }, [](double d) { return float(d); });
  check_nan_and_inf_minmax<float16>(
      DataType::kFloat16, [](float f) { return to_float16(f); },
      [](float16 h) { return to_float(h); });
  check_nan_and_inf_minmax<bfloat16>(
      DataType::kBfloat16, [](float f) { return to_bfloat16(f); },
      [](bfloat16 h) { return to_float(h); });
}

TEST(Kernels, Float16RoundsOnceAfterFloat32Math) {
  // 2048 + 1 is a tie in float16 (spacing 2 above 2048): rounds to even, 2048.
  // 2048 + 3 = 2051 is a tie between 2050 and 2052: rounds to 2052.
  // 65504 + 16 = 65520 is the overflow threshold: inf.
  std::vector<float16> a = {to_float16(2048), to_float16(2048), to_float16(65504)};
  std::vector<float16> b = {to_float16(1), to_float16(3), to_float16(16)};
  reduce_inplace(DataType::kFloat16, ReduceOp::kSum, a.data(), b.data(), a.size());
  EXPECT_EQ(to_float(a[0]), 2048.0f);
  EXPECT_EQ(to_float(a[1]), 2052.0f);
  EXPECT_EQ(a[2].bits, 0x7c00u);

  // Subnormal products: 1 ulp * 0.5 is a tie between 0 and 1 ulp (even: 0);
  // 3 ulps * 0.5 is a tie between 1 and 2 ulps (even: 2).
  std::vector<float16> p = {float16{0x0001}, float16{0x0003}};
  std::vector<float16> half = {float16{0x3800}, float16{0x3800}};
  reduce_inplace(DataType::kFloat16, ReduceOp::kProd, p.data(), half.data(), p.size());
  EXPECT_EQ(p[0].bits, 0x0000u);
  EXPECT_EQ(p[1].bits, 0x0002u);
}

TEST(Kernels, ScaleAvgDividesAndRoundsOnce) {
  std::vector<float> f = {3.0f, 1.0f, -7.5f};
  scale_avg(DataType::kFloat32, f.data(), f.size(), 3);
  EXPECT_EQ(f, (std::vector<float>{1.0f, 1.0f / 3.0f, -2.5f}));
  std::vector<bfloat16> b = {to_bfloat16(1.0f), to_bfloat16(-96.0f)};
  scale_avg(DataType::kBfloat16, b.data(), b.size(), 3);
  EXPECT_EQ(b[0].bits, to_bfloat16(1.0f / 3.0f).bits);
  EXPECT_EQ(to_float(b[1]), -32.0f);
  std::vector<float16> h(19, to_float16(1.0f));  // a vector block plus a tail
  scale_avg(DataType::kFloat16, h.data(), h.size(), 3);
  for (const float16& x : h) EXPECT_EQ(x.bits, 0x3555u);  // 1/3 in float16
}

// ---------------------------------------------------------------------------
// Conversions.

TEST(Half, Float16ToFloatIsExactForAllPatterns) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float f = to_float(float16{uint16_t(bits)});
    const double want = kF16Format.decode(uint16_t(bits));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
    } else {
      ASSERT_EQ(double(f), want) << std::hex << bits;
      ASSERT_EQ(std::signbit(f), std::signbit(want)) << std::hex << bits;
    }
  }
}

TEST(Half, Float16RoundTripAllPatterns) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t h = uint16_t(bits);
    const uint16_t back = to_float16(to_float(float16{h})).bits;
    if (kF16Format.is_nan(h)) {
      ASSERT_TRUE(kF16Format.is_nan(back)) << std::hex << bits << " -> " << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << bits;  // sign kept
      ASSERT_TRUE(back & 0x0200u) << std::hex << bits;             // made quiet
    } else {
      ASSERT_EQ(back, h) << std::hex << bits;
    }
  }
}

TEST(Half, Float16RoundsToNearestEven) {
  const HalfRounder& r = f16_rounder();
  auto check = [&](float x) {
    ASSERT_EQ(to_float16(x).bits, r.round(x))
        << x << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(x) << ")";
  };
  // Every midpoint between neighbouring values (exact in float), and the floats
  // on either side of it, for both signs; this includes subnormals, the
  // subnormal/normal boundary and the overflow threshold 65520.
  const std::vector<double>& v = r.values();
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    const float mid = float((v[i] + v[i + 1]) / 2);
    ASSERT_EQ(double(mid), (v[i] + v[i + 1]) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), float(v[i])}) {
      check(x);
      check(-x);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const float x = std::bit_cast<float>(uint32_t(rng()));
    if (!std::isnan(x)) check(x);
  }
  EXPECT_EQ(to_float16(65519.99f).bits, 0x7bffu);
  EXPECT_EQ(to_float16(65520.0f).bits, 0x7c00u);
  EXPECT_EQ(to_float16(std::numeric_limits<float>::max()).bits, 0x7c00u);
  EXPECT_EQ(to_float16(-INFINITY).bits, 0xfc00u);
  EXPECT_EQ(to_float16(0x1p-25f).bits, 0x0000u);         // tie between 0 and 2^-24: even
  EXPECT_EQ(to_float16(0x1.000002p-25f).bits, 0x0001u);  // just above the tie
  EXPECT_EQ(to_float16(0x3p-25f).bits, 0x0002u);         // tie between 1 and 2 ulps: even
  EXPECT_EQ(to_float16(-0.0f).bits, 0x8000u);
  EXPECT_EQ(to_float16(1e-30f).bits, 0x0000u);
}

TEST(Half, Float16NanStaysNan) {
  for (uint32_t payload : {0x1u, 0x1fffu, 0x2000u, 0x400000u, 0x7fffffu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float nan = std::bit_cast<float>(sign | 0x7f800000u | payload);
      ASSERT_TRUE(std::isnan(nan));
      const uint16_t h = to_float16(nan).bits;
      EXPECT_TRUE(kF16Format.is_nan(h)) << std::hex << payload << " -> " << h;
      EXPECT_EQ(h & 0x8000u, sign >> 16);
    }
  }
}

#if defined(__x86_64__)
// The kernels use the F16C instructions when present and half.cc otherwise;
// both must give the same bits, NaNs included.
__attribute__((target("f16c"))) float hw_to_float(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_to_half(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

TEST(Half, Float16MatchesF16cBitForBit) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU has no F16C";
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t h = uint16_t(bits);
    ASSERT_EQ(std::bit_cast<uint32_t>(to_float(float16{h})),
              std::bit_cast<uint32_t>(hw_to_float(h)))
        << std::hex << bits;
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    const float x = std::bit_cast<float>(uint32_t(rng()));
    ASSERT_EQ(to_float16(x).bits, hw_to_half(x)) << std::hex << std::bit_cast<uint32_t>(x);
  }
}
#endif

TEST(Half, Bfloat16ToFloatIsExactForAllPatterns) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float f = to_float(bfloat16{uint16_t(bits)});
    const double want = kBf16Format.decode(uint16_t(bits));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
    } else {
      ASSERT_EQ(double(f), want) << std::hex << bits;
    }
    if (!kBf16Format.is_nan(uint16_t(bits))) {
      ASSERT_EQ(to_bfloat16(f).bits, bits) << std::hex << bits;  // round trip
    } else {
      ASSERT_TRUE(kBf16Format.is_nan(to_bfloat16(f).bits)) << std::hex << bits;
    }
  }
}

TEST(Half, Bfloat16RoundsToNearestEven) {
  auto bf = [](uint32_t f32_bits) { return to_bfloat16(std::bit_cast<float>(f32_bits)).bits; };
  EXPECT_EQ(bf(0x3f808000u), 0x3f80u);  // 1 + 2^-8: tie, 0x3f80 is even
  EXPECT_EQ(bf(0x3f818000u), 0x3f82u);  // tie between 0x3f81 and 0x3f82: up to even
  EXPECT_EQ(bf(0x3f808001u), 0x3f81u);  // just above the tie
  EXPECT_EQ(bf(0x3f807fffu), 0x3f80u);  // just below the tie
  EXPECT_EQ(bf(0xbf818000u), 0xbf82u);  // negative tie
  EXPECT_EQ(bf(0x3fffffffu), 0x4000u);  // carry into the exponent
  EXPECT_EQ(bf(0x7f7f7fffu), 0x7f7fu);  // largest finite stays finite
  EXPECT_EQ(bf(0x7f7f8000u), 0x7f80u);  // tie at the top, 0x7f7f is odd: inf
  EXPECT_EQ(bf(0x7f7fffffu), 0x7f80u);  // FLT_MAX overflows to inf
  EXPECT_EQ(bf(0xff800000u), 0xff80u);  // -inf
  EXPECT_EQ(bf(0x00008000u), 0x0000u);  // subnormal tie: even
  EXPECT_EQ(bf(0x00018000u), 0x0002u);  // subnormal tie: up to even
  EXPECT_EQ(bf(0x007fffffu), 0x0080u);  // largest subnormal rounds to the smallest normal
  EXPECT_EQ(bf(0x80000000u), 0x8000u);  // -0
  // NaN with its payload only in the low half must not truncate to inf.
  for (uint32_t nan : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7f80ffffu}) {
    EXPECT_TRUE(kBf16Format.is_nan(bf(nan))) << std::hex << nan;
    EXPECT_EQ(bf(nan) & 0x8000u, (nan >> 16) & 0x8000u);
  }
  const HalfRounder& r = bf16_rounder();
  std::mt19937 rng(13);
  for (int i = 0; i < 1000000; ++i) {
    const float x = std::bit_cast<float>(uint32_t(rng()));
    if (!std::isnan(x)) {
      ASSERT_EQ(to_bfloat16(x).bits, r.round(x)) << std::hex << std::bit_cast<uint32_t>(x);
    }
  }
}

}  // namespace
}  // namespace rcoll::kernels
