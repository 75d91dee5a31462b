// float16 sum without VCVTPH2PS: five ways of widening by integer operations,
// timed against the path rcoll takes (F16C on CPUs without AVX512-FP16) and
// checked bit for bit against it. An experiment kept so that it can be re-run
// on another CPU; on the Zen 4 where it was written every variant is slower
// than F16C (bench/RESULTS.md, stop 32), so none is in kernels/.
//
//   rcoll-f16-sum-variants [Google Benchmark flags]    time each variant
//   rcoll-f16-sum-variants --check STEP                every b against every
//       STEP-th a (and every a that is a NaN, an infinity or a subnormal);
//       exit 1 on a difference, naming the variant and the operands, 77 when
//       no variant runs on this CPU
//
// The idea. A float16's bits shifted left by 13 into a float32, sign kept at
// bit 31, are the float32 of value x 2^-112, exactly, subnormals included
// (they become float32 subnormals of the same scale). Sums of scaled values
// are the scaled sums, so one conversion can be saved or all three:
//   fma       a by VCVTPH2PS, b scaled, a + b x 2^112 in one FMA, VCVTPS2PH
//   int_mul   both scaled, added, x 2^112, VCVTPS2PH
//   int       both scaled, added, rounded to float16 with integer operations
// (`512` suffix: 16 lanes a step, AVX-512.) A block with an infinity or a NaN
// (exponent 31, which scaling would make a finite number) takes F16C. Under
// MXCSR.DAZ/FTZ the float32 subnormals would be flushed, so a kernel built on
// this would have to fall back there as well; this experiment does not set
// them.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu_reduce.h"
#include "rcoll/types.h"

// GCC 12 warns inside its own AVX-512 headers (their undefined-vector
// placeholders) wherever these intrinsics inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace rcoll::kernels {
namespace {

#define RCOLL_AVX2_ISA "avx2,f16c,fma"
#define RCOLL_AVX512_ISA "avx512bw,avx512f,avx512vl,f16c,fma"
constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
constexpr float kUnscale = 0x1p112f;

// The blocks a variant leaves to rcoll's own kernel (an exponent-31 operand).
void library_sum(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n) {
  reduce(DataType::kFloat16, ReduceOp::kSum, d, a, b, n);
}

// ---- AVX2: 16 halves a step ----

// 8 halves, sign-extended to 32 bits, as value x 2^-112.
__attribute__((target(RCOLL_AVX2_ISA), always_inline)) inline __m256 scaled8(__m128i h) {
  const __m256i w = _mm256_slli_epi32(_mm256_cvtepi16_epi32(h), 13);
  return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(int(0x8fffffffu))));
}
// Lanes holding h in their upper 16 bits (unpack with zero), as value x 2^-112.
__attribute__((target(RCOLL_AVX2_ISA), always_inline)) inline __m256 scaled_high8(__m256i x) {
  const __m256i w = _mm256_srai_epi32(x, 3);
  return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(int(0x8fffffffu))));
}
// A scaled float32 rounded to float16 (nearest even) with integer operations;
// a magnitude past the largest finite half becomes infinity.
__attribute__((target(RCOLL_AVX2_ISA), always_inline)) inline __m256i narrow8(__m256 f) {
  const __m256i s = _mm256_castps_si256(f);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(s, 13), _mm256_set1_epi32(1));
  const __m256i t = _mm256_add_epi32(_mm256_add_epi32(s, _mm256_set1_epi32(0xfff)), odd);
  const __m256i m =
      _mm256_min_epu32(_mm256_and_si256(_mm256_srli_epi32(t, 13), _mm256_set1_epi32(0x7fff)),
                       _mm256_set1_epi32(0x7c00));
  return _mm256_or_si256(m, _mm256_and_si256(_mm256_srli_epi32(s, 16), _mm256_set1_epi32(0x8000)));
}
// Any lane of a block of 16 with exponent 31 (infinity or NaN).
__attribute__((target(RCOLL_AVX2_ISA), always_inline)) inline bool has_exp31(__m256i h) {
  const __m256i big =
      _mm256_cmpgt_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7bff));
  return !_mm256_testz_si256(big, big);
}

enum class Narrow { kFma, kMul, kInt };

template <Narrow kHow>
__attribute__((target(RCOLL_AVX2_ISA))) void avx2_sum(uint16_t* d, const uint16_t* a,
                                                      const uint16_t* b, size_t n) {
  const __m256 unscale = _mm256_set1_ps(kUnscale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    if (__builtin_expect(has_exp31(y) || (kHow != Narrow::kFma && has_exp31(x)), 0)) {
      library_sum(d + i, a + i, b + i, 16);
      continue;
    }
    if constexpr (kHow == Narrow::kInt) {
      const __m256i z = _mm256_setzero_si256();
      const __m256 lo = _mm256_add_ps(scaled_high8(_mm256_unpacklo_epi16(z, x)),
                                      scaled_high8(_mm256_unpacklo_epi16(z, y)));
      const __m256 hi = _mm256_add_ps(scaled_high8(_mm256_unpackhi_epi16(z, x)),
                                      scaled_high8(_mm256_unpackhi_epi16(z, y)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                          _mm256_packus_epi32(narrow8(lo), narrow8(hi)));
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      const __m128i xh = h == 0 ? _mm256_castsi256_si128(x) : _mm256_extracti128_si256(x, 1);
      const __m128i yh = h == 0 ? _mm256_castsi256_si128(y) : _mm256_extracti128_si256(y, 1);
      const __m256 s = kHow == Narrow::kFma
                           ? _mm256_fmadd_ps(scaled8(yh), unscale, _mm256_cvtph_ps(xh))
                           : _mm256_mul_ps(_mm256_add_ps(scaled8(xh), scaled8(yh)), unscale);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 8 * h),
                       _mm256_cvtps_ph(s, kRoundNearest));
    }
  }
  if (i < n) library_sum(d + i, a + i, b + i, n - i);
}

// ---- AVX-512: 32 halves a step ----

__attribute__((target(RCOLL_AVX512_ISA), always_inline)) inline __m512 scaled16(__m256i h) {
  const __m512i w = _mm512_slli_epi32(_mm512_cvtepi16_epi32(h), 13);
  return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(int(0x8fffffffu))));
}

template <Narrow kHow>
__attribute__((target(RCOLL_AVX512_ISA))) void avx512_sum(uint16_t* d, const uint16_t* a,
                                                          const uint16_t* b, size_t n) {
  static_assert(kHow != Narrow::kInt);
  const __m512 unscale = _mm512_set1_ps(kUnscale);
  const __m512i magnitude = _mm512_set1_epi16(0x7fff), inf = _mm512_set1_epi16(0x7c00);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i x = _mm512_loadu_si512(a + i), y = _mm512_loadu_si512(b + i);
    const __m512i m = kHow == Narrow::kFma ? _mm512_and_si512(y, magnitude)
                                           : _mm512_max_epu16(_mm512_and_si512(x, magnitude),
                                                              _mm512_and_si512(y, magnitude));
    if (__builtin_expect(_mm512_cmpge_epu16_mask(m, inf) != 0, 0)) {
      library_sum(d + i, a + i, b + i, 32);
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i xh = h == 0 ? _mm512_castsi512_si256(x) : _mm512_extracti64x4_epi64(x, 1);
      const __m256i yh = h == 0 ? _mm512_castsi512_si256(y) : _mm512_extracti64x4_epi64(y, 1);
      const __m512 s = kHow == Narrow::kFma
                           ? _mm512_fmadd_ps(scaled16(yh), unscale, _mm512_cvtph_ps(xh))
                           : _mm512_mul_ps(_mm512_add_ps(scaled16(xh), scaled16(yh)), unscale);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 16 * h),
                          _mm512_cvtps_ph(s, kRoundNearest));
    }
  }
  if (i < n) library_sum(d + i, a + i, b + i, n - i);
}

using SumFn = void (*)(uint16_t*, const uint16_t*, const uint16_t*, size_t);
struct Variant {
  const char* name;
  SumFn fn;
  bool avx512;
};
constexpr Variant kVariants[] = {
    {"fma", avx2_sum<Narrow::kFma>, false},         {"int_mul", avx2_sum<Narrow::kMul>, false},
    {"int", avx2_sum<Narrow::kInt>, false},         {"fma512", avx512_sum<Narrow::kFma>, true},
    {"int_mul512", avx512_sum<Narrow::kMul>, true},
};

bool runs_here(const Variant& v) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
                    __builtin_cpu_supports("fma");
  return avx2 &&
         (!v.avx512 || (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")));
}

bool is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool special(uint16_t h) { return (h & 0x7c00) == 0x7c00 || (h & 0x7c00) == 0; }

// Every b against the sampled a, both operand orders, against rcoll's F16C
// path. Two NaNs may differ in payload (as rcoll's own paths may).
int check(int step) {
  pin_float16_path(Float16Path::kF16c);
  std::vector<uint16_t> a(65536), b(65536), want(65536), got(65536);
  for (int i = 0; i < 65536; ++i) b[i] = uint16_t(i);
  long bad = 0, compared = 0;
  for (int x = 0; x < 65536; ++x) {
    if (x % step != 0 && !special(uint16_t(x))) continue;
    std::fill(a.begin(), a.end(), uint16_t(x));
    library_sum(want.data(), a.data(), b.data(), 65536);
    for (const Variant& v : kVariants) {
      if (!runs_here(v)) continue;
      for (bool swapped : {false, true}) {
        v.fn(got.data(), swapped ? b.data() : a.data(), swapped ? a.data() : b.data(), 65536);
        for (int i = 0; i < 65536; ++i) {
          ++compared;
          if (got[i] == want[i] || (is_nan(got[i]) && is_nan(want[i]))) continue;
          if (bad++ < 10) {
            std::fprintf(stderr, "%s: %04x + %04x gave %04x, rcoll's f16c path %04x\n", v.name,
                         swapped ? i : x, swapped ? x : i, got[i], want[i]);
          }
        }
      }
    }
  }
  std::printf("rcoll-f16-sum-variants --check %d: %ld sums compared, %ld differ\n", step, compared,
              bad);
  if (compared == 0) {
    std::printf("no variant runs on this CPU (they need AVX2, F16C and FMA): nothing checked\n");
    return 77;
  }
  return bad == 0 ? 0 : 1;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Halves = std::unique_ptr<uint16_t, FreeDeleter>;

// dst += src as in rcoll-micro-kernels: dst starts at 1.0, src is 1/1024.
// Rates are memory traffic, 3 x size, as there.
void bm_sum(benchmark::State& state, SumFn fn) {
  const size_t bytes = size_t(state.range(0)), n = bytes / 2;
  Halves dst(static_cast<uint16_t*>(std::aligned_alloc(64, bytes)));
  Halves src(static_cast<uint16_t*>(std::aligned_alloc(64, bytes)));
  for (size_t i = 0; i < n; ++i) {
    dst.get()[i] = 0x3c00;
    src.get()[i] = 0x1400;
  }
  for (auto _ : state) {
    fn(dst.get(), dst.get(), src.get(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes) * 3);
}

void bm_library(benchmark::State& state, Float16Path path) {
  pin_float16_path(path);
  bm_sum(state, library_sum);
  pin_float16_path(Float16Path::kBest);
}

void register_all() {
  for (int64_t size : {int64_t(64) << 10, int64_t(1) << 20}) {
    const std::string at = "/" + std::to_string(size >> 10) + "KiB";
    benchmark::RegisterBenchmark(("rcoll" + at).c_str(), bm_library, Float16Path::kBest)->Arg(size);
    if (float16_path_available(Float16Path::kF16c))
      benchmark::RegisterBenchmark(("rcoll@f16c" + at).c_str(), bm_library, Float16Path::kF16c)
          ->Arg(size);
    for (const Variant& v : kVariants) {
      if (runs_here(v))
        benchmark::RegisterBenchmark((v.name + at).c_str(), bm_sum, v.fn)->Arg(size);
    }
  }
}

}  // namespace
}  // namespace rcoll::kernels

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--check") == 0) {
    const int step = std::atoi(argv[2]);
    if (step < 1 || step > 65536) {
      std::fprintf(stderr,
                   "rcoll-f16-sum-variants: --check takes a step from 1 to 65536, not '%s'\n",
                   argv[2]);
      return 2;
    }
    return rcoll::kernels::check(step);
  }
  rcoll::kernels::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
