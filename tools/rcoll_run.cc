// rcoll-run: the local launcher. Starts the embedded rendezvous store and N ranks of a
// program on this host, relays their output with rank prefixes, forwards signals, and
// stops the job at the first failure or at --timeout. See tools/launcher/ for the parts.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "rcoll/store.h"
#include "rcoll/version.h"
#include "tools/launcher/job.h"
#include "tools/launcher/options.h"
#include "tools/launcher/rank_process.h"
#include "tools/launcher/signals.h"

namespace rcoll::launcher {
namespace {

constexpr size_t kSecretBytes = 8;  // 16 hex digits for the job token and the job id

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "rcoll-run: %s\n", message.c_str());
  return code;
}

// A launcher started with stdin, stdout or stderr closed would hand those numbers to
// its pipes, and the ranks' dup2 onto 0-2 would go wrong: fill them with /dev/null.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1) {
      int null_fd = ::open("/dev/null", O_RDWR);
      if (null_fd >= 0 && null_fd != fd) ::close(null_fd);  // open() took the lowest: fd
    }
  }
}

// What the launcher and each rank it starts (they inherit the limit) hold:
// the launcher two pipes per rank and, hosting the store, up to two
// connections per rank (its client and its epoch watch); a rank one data-plane
// and one liveness socket per peer, plus its own few (store, listeners, UCX).
// Either way about 4 per rank: -n 64 needed more than a soft limit of 240
// ("accept failed: Too many open files"). Raised only when needed, never past
// the hard limit.
void raise_fd_limit(int num_ranks) {
  rlimit lim{};
  const rlim_t want = 4 * static_cast<rlim_t>(num_ranks) + 128;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= want) return;
  lim.rlim_cur = std::min(want, lim.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &lim);
}

int launch(int argc, char** argv) {
  ensure_standard_fds();
  Result<LaunchOptions> parsed =
      parse_launch_options(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) {
    std::fprintf(stderr, "rcoll-run: %s\nTry 'rcoll-run --help' for the usage.\n",
                 parsed.status().message().c_str());
    return kExitUsage;
  }
  const LaunchOptions& options = parsed.value();
  if (options.show_help) {
    std::fputs(usage_text(), stdout);
    return 0;
  }
  if (options.show_version) {
    std::printf("rcoll-run %d.%d.%d\n", RCOLL_VERSION_MAJOR, RCOLL_VERSION_MINOR,
                RCOLL_VERSION_PATCH);
    return 0;
  }
  Result<std::string> exec_path = resolve_program(options.command[0]);
  if (!exec_path.ok()) return fail(kExitUsage, exec_path.status().message());

  raise_fd_limit(options.num_ranks);

  JobEnvironment env;
  env.world_size = options.num_ranks;
  env.transport = options.transport;
  env.inject = options.inject;
  Result<std::string> token = random_hex(kSecretBytes);
  Result<std::string> job_id = random_hex(kSecretBytes);
  if (!token.ok()) return fail(kExitLauncherFailed, token.status().message());
  if (!job_id.ok()) return fail(kExitLauncherFailed, job_id.status().message());
  env.token = token.value();
  env.job_id = job_id.value();

  // Signals first: the store's thread must inherit the mask that routes them to us.
  Result<std::unique_ptr<SignalRouter>> signals = SignalRouter::install();
  if (!signals.ok()) return fail(kExitLauncherFailed, signals.status().message());

  TcpStoreOptions store_options;
  store_options.host = options.store_host;
  store_options.port = options.store_port;
  store_options.token = env.token;
  Result<std::unique_ptr<TcpStoreServer>> store = start_tcp_store_server(store_options);
  if (!store.ok()) {
    return fail(kExitLauncherFailed, "cannot start the rendezvous store on " + options.store_host +
                                         ":" + std::to_string(options.store_port) + ": " +
                                         store.status().to_string());
  }
  env.store_addr = store.value()->address();

  std::fflush(stdout);  // nothing of ours may sit in stdio buffers across fork
  std::fflush(stderr);
  Job job(options, exec_path.value(), env, *signals.value());
  const int code = job.run();
  store.value()->stop();
  return code;
}

}  // namespace
}  // namespace rcoll::launcher

int main(int argc, char** argv) { return rcoll::launcher::launch(argc, argv); }
