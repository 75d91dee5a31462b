// rcoll-loop-bench: back-to-back broadcasts, timed two ways. rcoll-bench
// reports the median of per-iteration times, which says how long one call
// takes; a loop of eager broadcasts can also be paced by waits that fall on
// a few iterations (a root waiting for the slowest rank's completion credits,
// a receiver woken late), which the median does not see. This prints both
// for each rank, and the max over ranks of each: the median per-iteration
// time and the loop's time per op (wall time of the timed loop / iterations).
//
//   rcoll-run -n 4 -- rcoll-loop-bench [BYTES [ITERS [ROOT]]]   [4096 10000 0]
#include <rcoll/rcoll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

namespace {

bool parse(const char* text, long lo, long hi, long* out) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long bytes = 4096, iters = 10000, root = 0;
  // Float32 elements; one timing per iteration is kept (8 bytes each).
  if (argc > 4 || (argc > 1 && (!parse(argv[1], 4, 1L << 30, &bytes) || bytes % 4 != 0)) ||
      (argc > 2 && !parse(argv[2], 1, 1L << 26, &iters)) || (argc > 3 && !parse(argv[3], 0, 1L << 20, &root))) {
    std::fprintf(stderr, "usage: rcoll-run -n N -- rcoll-loop-bench [BYTES (a multiple of 4, 4 to 2^30) [ITERS (1 to 2^26) [ROOT]]]\n");
    return 2;
  }
  try {
    rcoll::Communicator comm = rcoll::Communicator::create();
    if (root >= comm.size()) {
      if (comm.rank() == 0) std::fprintf(stderr, "rcoll-loop-bench: root %ld is not a rank of %d\n", root, comm.size());
      return 2;
    }
    std::vector<float> buf(static_cast<size_t>(bytes) / sizeof(float), 1.0f);
    const rcoll::Buffer b = rcoll::Buffer::of(buf);
    for (int i = 0; i < 100; ++i) comm.broadcast(b, static_cast<int>(root));
    comm.barrier();
    std::vector<double> us(static_cast<size_t>(iters));
    const auto start = std::chrono::steady_clock::now();
    for (auto& t : us) {
      const auto t0 = std::chrono::steady_clock::now();
      comm.broadcast(b, static_cast<int>(root));
      t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    const double loop = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
                        static_cast<double>(iters);
    std::nth_element(us.begin(), us.begin() + iters / 2, us.end());
    std::vector<double> mine = {us[static_cast<size_t>(iters / 2)], loop};
    std::printf("rank %d: broadcast %ld B x %ld: median %.2f us, loop %.2f us per op\n", comm.rank(), bytes, iters,
                mine[0], mine[1]);
    comm.allreduce(rcoll::Buffer::of(mine), rcoll::ReduceOp::kMax);
    if (comm.rank() == 0) {
      std::printf("max over %d ranks: median %.2f us, loop %.2f us per op\n", comm.size(), mine[0], mine[1]);
    }
    comm.barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rcoll-loop-bench: %s\n", e.what());
    return 3;
  }
  return 0;
}
