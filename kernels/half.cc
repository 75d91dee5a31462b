// Portable conversions between float32 and the two 16-bit float formats.
//
// Both conversions to 16 bits round to nearest, ties to even, and treat NaN,
// infinity, overflow and subnormals the way the hardware converters do (x86
// F16C for float16), so that a kernel that uses the hardware on one machine and
// these functions on another gives the same bits:
//   - NaN stays NaN: the quiet bit is set and the top of the payload is kept,
//     so a NaN whose payload lives only in the low bits cannot turn into inf.
//   - Finite values too large for the format round to infinity.
//   - Subnormal results are produced, never flushed to zero.
#include <bit>
#include <cstdint>

#include "rcoll/types.h"

namespace rcoll {
namespace {

constexpr uint32_t kF32AbsMask = 0x7fffffffu;
constexpr uint32_t kF32Inf = 0x7f800000u;
constexpr uint32_t kF32Quiet = 0x00400000u;

constexpr uint16_t kF16Inf = 0x7c00u;
constexpr uint16_t kF16Quiet = 0x0200u;
// The smallest float32 that rounds to float16 infinity: 65520, halfway between
// the largest half (65504, odd mantissa) and 2^16, so the tie goes up.
constexpr uint32_t kF16OverflowF32 = 0x477ff000u;
// 2^-14, the smallest normal float16. Below it the result is subnormal.
constexpr uint32_t kF16MinNormalF32 = 0x38800000u;
// float32 exponent bias (127) minus float16 exponent bias (15), in place.
constexpr uint32_t kRebias = (127u - 15u) << 23;

}  // namespace

float to_float(float16 v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16;
  const uint32_t exp = (v.bits >> 10) & 0x1fu;
  const uint32_t mant = v.bits & 0x3ffu;
  if (exp == 0x1f) {
    // Infinity, or NaN made quiet (as VCVTPH2PS does).
    return std::bit_cast<float>(sign | kF32Inf | (mant << 13) | (mant != 0 ? kF32Quiet : 0u));
  }
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float32.
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(mant) * 0x1p-24f));
  }
  return std::bit_cast<float>(sign | ((exp << 23) + kRebias) | (mant << 13));
}

float16 to_float16(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & kF32AbsMask;
  if (a > kF32Inf) {
    // NaN: keep the top 10 payload bits, force the quiet bit.
    return float16{uint16_t(sign | kF16Inf | kF16Quiet | ((a >> 13) & 0x3ffu))};
  }
  if (a >= kF16OverflowF32) return float16{uint16_t(sign | kF16Inf)};
  if (a < kF16MinNormalF32) {
    // Subnormal result: round(|v| * 2^24) to an integer, ties to even. With the
    // implicit bit m = 1.f * 2^23, |v| * 2^24 = m * 2^(e - 126). The result may
    // round up to 0x400, which is exactly the encoding of the smallest normal.
    const uint32_t e = a >> 23;
    const uint32_t shift = 126u - e;       // >= 14 here
    if (shift > 24) return float16{sign};  // below 2^-25: rounds to zero
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t kept = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    const uint32_t round_up = (rest > half || (rest == half && (kept & 1u))) ? 1u : 0u;
    return float16{uint16_t(sign | (kept + round_up))};
  }
  // Normal: rebias the exponent and drop 13 mantissa bits, adding just under
  // half an ulp plus the lowest kept bit (ties to even). A carry out of the
  // mantissa correctly bumps the exponent.
  const uint32_t r = (a - kRebias + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  return float16{uint16_t(sign | r)};
}

// bfloat16 is the top half of a float32, so widening is a shift.
float to_float(bfloat16 v) { return std::bit_cast<float>(uint32_t(v.bits) << 16); }

bfloat16 to_bfloat16(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  if ((u & kF32AbsMask) > kF32Inf) {
    // NaN: truncate and force the quiet bit (0x40 in bfloat16).
    return bfloat16{uint16_t((u >> 16) | 0x40u)};
  }
  // Same exponent range as float32: subnormals need nothing special, and the
  // carry of a round-up past the largest finite value gives infinity.
  return bfloat16{uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

}  // namespace rcoll
