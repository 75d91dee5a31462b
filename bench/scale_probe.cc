// rcoll-scale-probe: what creation and one recovery cost at P ranks (#37's
// table). Each rank times Communicator::create(), runs 1 KiB all-reduces
// (a fault from RCOLL_INJECT, e.g. close-link at op 3, costs one recovery),
// and prints one line: rank, create seconds, recovery seconds (from its
// counters), the recoveries, and the descriptors it holds after creation.
// With a second argument, it then stays idle that many seconds between two
// ops and prints the CPU seconds its process used meanwhile (the side
// channel's heartbeats, the epoch watch: what an idle job costs).
// bench/store_scale.sh runs it under rcoll-run for several P.
#include <dirent.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "rcoll/rcoll.h"

namespace {

int open_descriptors() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
    n -= 3;  // ".", "..", and the directory's own
  }
  return n;
}

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const int ops = argc > 1 ? std::atoi(argv[1]) : 5;
  const double idle_s = argc > 2 ? std::atof(argv[2]) : 0;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    rcoll::Communicator c = rcoll::Communicator::create();
    const double create_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int fds = open_descriptors();
    std::vector<float> v(256);
    int wrong = 0;
    for (int op = 0; op < ops; ++op) {
      std::fill(v.begin(), v.end(), 1.0f);
      c.allreduce(rcoll::Buffer::of(v), rcoll::Buffer::of(v), rcoll::ReduceOp::kSum);
      if (v[0] != static_cast<float>(c.size())) ++wrong;
    }
    double idle_cpu = 0;
    if (idle_s > 0) {
      const double before = cpu_seconds();
      std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
      idle_cpu = (cpu_seconds() - before) / idle_s;
      c.barrier();
    }
    const rcoll::Counters k = c.counters();
    std::printf(
        "scale-probe rank %d of %d: create %.4f s, recovery %.4f s, recoveries %llu, fds %d, wrong "
        "%d, idle cpu %.4f\n",
        c.rank(), c.size(), create_s, k.recovery_seconds,
        static_cast<unsigned long long>(k.recoveries), fds, wrong, idle_cpu);
    c.close();
    return wrong == 0 ? 0 : 1;
  } catch (const rcoll::Error& e) {
    std::fprintf(stderr, "scale-probe: %s\n", e.what());
    return 1;
  }
}
