// Starting one rank: its environment, and fork+exec with its stdout and stderr on pipes.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "rcoll/status.h"
#include "tools/launcher/signals.h"

namespace rcoll::launcher {

// What every rank of the job shares.
struct JobEnvironment {
  int world_size = 0;
  std::string store_addr;  // "127.0.0.1:PORT"
  std::string token;
  std::string job_id;
  std::string transport;              // empty: not set (the inherited value stays)
  std::optional<std::string> inject;  // unset: not set
};

// The launcher's environment ("KEY=VALUE" entries) with the variables rcoll-run sets
// removed, then rank's own values appended.
std::vector<std::string> rank_environment(const std::vector<std::string>& inherited,
                                          const JobEnvironment& job, int rank);

// The current process environment as "KEY=VALUE" entries.
std::vector<std::string> current_environment();

// n random bytes from the kernel as 2n lowercase hex digits.
Result<std::string> random_hex(size_t n_bytes);

struct SpawnRequest {
  int rank = 0;
  std::string exec_path;          // resolved: exec'ed without a PATH search
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::vector<std::string> env;
  bool inherit_stdin = false;  // otherwise stdin is /dev/null
  std::vector<int> cpus;       // not empty: the child runs on these CPUs only (sched_setaffinity)
};

// The CPUs this process may run on (its affinity mask), in increasing order.
std::vector<int> usable_cpus();

struct SpawnedRank {
  pid_t pid = -1;
  UniqueFd out;  // read ends, non-blocking
  UniqueFd err;
};

// fork+exec. If exec fails, the child says so on its stderr ("rcoll-run: rank 0: cannot
// execute 'foo': ...") and exits 127. Every fd but 0, 1 and 2 is closed in the child, and
// the child is SIGKILLed by the kernel should the launcher die first.
Result<SpawnedRank> spawn_rank(const SpawnRequest& request, const SignalRouter& signals);

}  // namespace rcoll::launcher
