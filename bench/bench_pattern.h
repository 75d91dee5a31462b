// The --check input pattern: every rank fills its inputs from a formula of
// (rank, element), so each rank can compute the expected result of an op on its
// own, in plain scalar code that shares nothing with the library under test.
// Values are small integers (and +-1, +-2 for prod), so sums and products are
// exact in every floating dtype and any wrong element shows up as a mismatch.
#pragma once

#include <cstdint>

namespace rcoll::bench {

enum class Reduction : uint8_t { kSum, kProd, kMin, kMax, kAvg };

// What rank `rank` contributes at element `i`. `salt` keeps the ops of one run apart.
inline int64_t pattern_value(int rank, uint64_t i, int salt, Reduction red, bool is_unsigned) {
  const auto r = static_cast<uint64_t>(rank), s = static_cast<uint64_t>(salt);
  if (red == Reduction::kProd) {
    static constexpr int64_t kProdValues[] = {1, -1, 2, -2};
    const int64_t v = kProdValues[(i * 5 + r * 3 + s) % 4];
    return is_unsigned && v < 0 ? -v : v;
  }
  const auto v = static_cast<int64_t>((i * 7 + r * 13 + s * 5) % 9);
  return is_unsigned ? v : v - 4;
}

// The exact reduction over ranks [0, nranks) of element i, in int64 (wrapping
// modulo 2^64 for prod, which narrowing to the dtype then wraps as hardware does).
// For avg: the sum (divide by nranks in floating point).
inline int64_t reduce_pattern(int nranks, uint64_t i, int salt, Reduction red, bool is_unsigned) {
  int64_t acc = pattern_value(0, i, salt, red, is_unsigned);
  for (int r = 1; r < nranks; ++r) {
    const int64_t v = pattern_value(r, i, salt, red, is_unsigned);
    switch (red) {
      case Reduction::kSum:
      case Reduction::kAvg: acc += v; break;
      case Reduction::kProd: acc = static_cast<int64_t>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v)); break;
      case Reduction::kMin: acc = v < acc ? v : acc; break;
      case Reduction::kMax: acc = v > acc ? v : acc; break;
    }
  }
  return acc;
}

}  // namespace rcoll::bench
