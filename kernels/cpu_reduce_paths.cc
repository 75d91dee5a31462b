// Which float16 and bfloat16 path a reduce takes: what the CPU has, what a
// test or benchmark pinned (pin_float16_path, pin_bfloat16_path), and their
// names. The paths themselves: cpu_reduce.cc and the cpu_reduce_*.cc files.
#include <atomic>

#include "kernels/cpu_reduce.h"
#include "kernels/cpu_reduce_internal.h"

namespace rcoll::kernels {
namespace {

std::atomic<Bfloat16Path> g_bf16_path{Bfloat16Path::kBest};
std::atomic<Float16Path> g_f16_path{Float16Path::kBest};

}  // namespace

// The path a bfloat16 op takes. A pinned path that does not compute the op
// (kAvx512Bf16 for min and max, kAvx512Bw and kAvx2 for the rest) leaves it
// to kBest's.
Bfloat16Path bf16_path(bool select) {
  const Bfloat16Path p = g_bf16_path.load(std::memory_order_relaxed);
  if (!bfloat16_path_available(p)) return Bfloat16Path::kPortable;
  const bool select_path = p == Bfloat16Path::kAvx512Bw || p == Bfloat16Path::kAvx2;
  if (p == Bfloat16Path::kBest || (p == Bfloat16Path::kAvx512Bf16 && select) ||
      (select_path && !select)) {
    if (!select) {
      return bfloat16_path_available(Bfloat16Path::kAvx512Bf16) ? Bfloat16Path::kAvx512Bf16
                                                                : Bfloat16Path::kPortable;
    }
    for (Bfloat16Path fast : {Bfloat16Path::kAvx512Bw, Bfloat16Path::kAvx2}) {
      if (bfloat16_path_available(fast)) return fast;
    }
    return Bfloat16Path::kPortable;
  }
  return p;
}

// The path a float16 op takes. A pinned path that does not compute the op
// (kAvx512Fp16 for min and max, kAvx512Bw and kAvx2 for the rest) leaves it
// to kBest's.
Float16Path f16_path(bool select) {
  const Float16Path p = g_f16_path.load(std::memory_order_relaxed);
  if (!float16_path_available(p)) return Float16Path::kPortable;
  const bool select_path = p == Float16Path::kAvx512Bw || p == Float16Path::kAvx2;
  if (p == Float16Path::kBest || (p == Float16Path::kAvx512Fp16 && select) ||
      (select_path && !select)) {
    if (select) {
      for (Float16Path fast : {Float16Path::kAvx512Bw, Float16Path::kAvx2}) {
        if (float16_path_available(fast)) return fast;
      }
    } else if (float16_path_available(Float16Path::kAvx512Fp16)) {
      return Float16Path::kAvx512Fp16;
    }
    return float16_path_available(Float16Path::kF16c) ? Float16Path::kF16c : Float16Path::kPortable;
  }
  return p;
}

bool float16_path_available(Float16Path path) {
  switch (path) {
    case Float16Path::kBest:
    case Float16Path::kPortable:
      return true;
    case Float16Path::kF16c:
#if RCOLL_X86
      return has_f16c();
#else
      return false;
#endif
    case Float16Path::kAvx512Fp16:
#if RCOLL_AVX512FP16
      return has_avx512fp16();
#else
      return false;
#endif
    case Float16Path::kAvx512Bw:
#if RCOLL_X86
      return has_avx512bw();
#else
      return false;
#endif
    case Float16Path::kAvx2:
#if RCOLL_X86
      return has_avx2();
#else
      return false;
#endif
  }
  return false;
}

void pin_float16_path(Float16Path path) { g_f16_path.store(path, std::memory_order_relaxed); }

const char* to_string(Float16Path path) {
  switch (path) {
    case Float16Path::kBest:
      return "best";
    case Float16Path::kAvx512Fp16:
      return "avx512fp16";
    case Float16Path::kAvx512Bw:
      return "avx512bw";
    case Float16Path::kAvx2:
      return "avx2";
    case Float16Path::kF16c:
      return "f16c";
    case Float16Path::kPortable:
      return "portable";
  }
  return "?";
}

const char* float16_path_name(ReduceOp op) { return to_string(f16_path(is_select(op))); }

bool bfloat16_path_available(Bfloat16Path path) {
  switch (path) {
    case Bfloat16Path::kBest:
    case Bfloat16Path::kPortable:
      return true;
    case Bfloat16Path::kAvx512Bf16:
#if RCOLL_AVX512BF16
      return has_avx512bf16();
#else
      return false;
#endif
    case Bfloat16Path::kAvx512Bw:
#if RCOLL_X86
      return has_avx512bw();
#else
      return false;
#endif
    case Bfloat16Path::kAvx2:
#if RCOLL_X86
      return has_avx2();
#else
      return false;
#endif
  }
  return false;
}

void pin_bfloat16_path(Bfloat16Path path) { g_bf16_path.store(path, std::memory_order_relaxed); }

const char* to_string(Bfloat16Path path) {
  switch (path) {
    case Bfloat16Path::kBest:
      return "best";
    case Bfloat16Path::kAvx512Bf16:
      return "avx512bf16";
    case Bfloat16Path::kAvx512Bw:
      return "avx512bw";
    case Bfloat16Path::kAvx2:
      return "avx2";
    case Bfloat16Path::kPortable:
      return "portable";
  }
  return "?";
}

const char* bfloat16_path_name(ReduceOp op) { return to_string(bf16_path(is_select(op))); }

}  // namespace rcoll::kernels
