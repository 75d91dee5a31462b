#include "tools/launcher/rank_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>

extern char** environ;

namespace rcoll::launcher {
namespace {

constexpr const char* kSetByLauncher[] = {
    "RCOLL_RANK",       "RCOLL_WORLD_SIZE", "RCOLL_LOCAL_RANK", "RCOLL_LOCAL_WORLD_SIZE",
    "RCOLL_STORE_ADDR", "RCOLL_JOB_TOKEN",  "RCOLL_JOB_ID"};

bool has_key(const std::string& entry, std::string_view key) {
  return entry.size() > key.size() && entry.compare(0, key.size(), key) == 0 &&
         entry[key.size()] == '=';
}

Status os_error(const std::string& what, int err) {
  return Status(ErrorCode::kInternal, what + ": " + ::strerror(err));
}

// Async-signal-safe: after fork() in a process with threads (the store server's), the
// child may only make system calls until exec.
void write_all_raw(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Everything the child needs between fork and exec, built before fork.
struct ChildSetup {
  int out_fd = -1;
  int err_fd = -1;
  int in_fd = -1;  // -1: keep stdin
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  std::string failure_prefix;  // "rcoll-run: rank R: cannot execute 'P': "
  std::string bind_failure;    // "rcoll-run: rank R: could not bind to CPUs L ("
  const cpu_set_t* cpus = nullptr;  // nullptr: no binding
  pid_t launcher_pid = 0;
};

[[noreturn]] void exec_in_child(const SpawnRequest& request, const SignalRouter& signals, const ChildSetup& c) {
  const int out_fd = c.out_fd, err_fd = c.err_fd, in_fd = c.in_fd;
  // A launcher that dies without stopping its ranks (SIGKILL, the OOM killer) takes them
  // along, stopped (SIGSTOP) ones included, instead of leaving them to hang.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != c.launcher_pid) ::_exit(128 + SIGKILL);  // it died before the prctl
  if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  // The store server's sockets and the other ranks' pipes must not leak into the rank.
  long closed = -1;
#ifdef SYS_close_range
  closed = ::syscall(SYS_close_range, 3U, ~0U, 0U);
#endif
  if (closed != 0) {
    for (int fd = 3; fd < 65536; ++fd) ::close(fd);  // kernels before 5.9
  }
  signals.restore_in_child();
  // Binding is a performance hint: a refused one is said, and the rank runs unbound.
  if (c.cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), c.cpus) != 0) {
    const char* why = ::strerrordesc_np(errno);
    write_all_raw(STDERR_FILENO, c.bind_failure.data(), c.bind_failure.size());
    if (why != nullptr) write_all_raw(STDERR_FILENO, why, ::strlen(why));
    static constexpr char kUnbound[] = "); running unbound\n";
    write_all_raw(STDERR_FILENO, kUnbound, sizeof(kUnbound) - 1);
  }
  ::execve(request.exec_path.c_str(), c.argv, c.envp);

  const int err = errno;
  const char* reason = ::strerrordesc_np(err);  // unlike strerror, async-signal-safe
  if (reason == nullptr) reason = "unknown error";
  write_all_raw(STDERR_FILENO, c.failure_prefix.data(), c.failure_prefix.size());
  write_all_raw(STDERR_FILENO, reason, ::strlen(reason));
  write_all_raw(STDERR_FILENO, "\n", 1);
  ::_exit(127);
}

}  // namespace

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

std::vector<std::string> rank_environment(const std::vector<std::string>& inherited,
                                          const JobEnvironment& job, int rank) {
  std::vector<std::string> env;
  env.reserve(inherited.size() + 9);
  for (const std::string& entry : inherited) {
    bool replaced = false;
    for (const char* key : kSetByLauncher) replaced = replaced || has_key(entry, key);
    if (!job.transport.empty()) replaced = replaced || has_key(entry, "RCOLL_TRANSPORT");
    if (job.inject) replaced = replaced || has_key(entry, "RCOLL_INJECT");
    if (!replaced) env.push_back(entry);
  }
  // Every rank is local: one launcher, one host.
  env.push_back("RCOLL_RANK=" + std::to_string(rank));
  env.push_back("RCOLL_WORLD_SIZE=" + std::to_string(job.world_size));
  env.push_back("RCOLL_LOCAL_RANK=" + std::to_string(rank));
  env.push_back("RCOLL_LOCAL_WORLD_SIZE=" + std::to_string(job.world_size));
  env.push_back("RCOLL_STORE_ADDR=" + job.store_addr);
  env.push_back("RCOLL_JOB_TOKEN=" + job.token);
  env.push_back("RCOLL_JOB_ID=" + job.job_id);
  if (!job.transport.empty()) env.push_back("RCOLL_TRANSPORT=" + job.transport);
  if (job.inject) env.push_back("RCOLL_INJECT=" + *job.inject);
  return env;
}

std::vector<int> usable_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

Result<std::string> random_hex(size_t n_bytes) {
  std::string bytes(n_bytes, '\0');
  size_t got = 0;
  while (got < n_bytes) {
    ssize_t n = ::getrandom(bytes.data() + got, n_bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error("getrandom failed", errno);
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

Result<SpawnedRank> spawn_rank(const SpawnRequest& request, const SignalRouter& signals) {
  std::array<int, 2> out{-1, -1};
  std::array<int, 2> err{-1, -1};
  if (::pipe2(out.data(), O_CLOEXEC) != 0) return os_error("pipe2 failed", errno);
  UniqueFd out_read(out[0]), out_write(out[1]);
  if (::pipe2(err.data(), O_CLOEXEC) != 0) return os_error("pipe2 failed", errno);
  UniqueFd err_read(err[0]), err_write(err[1]);
  UniqueFd devnull;
  if (!request.inherit_stdin) {
    devnull.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!devnull.valid()) return os_error("cannot open /dev/null", errno);
  }

  // Everything the child needs is built before fork: it must not allocate after it.
  std::vector<char*> argv;
  for (const std::string& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  ChildSetup setup;
  setup.failure_prefix = "rcoll-run: rank " + std::to_string(request.rank) + ": cannot execute '" +
                         request.argv[0] + "': ";

  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  std::string cpu_list;
  for (int c : request.cpus) {
    if (c < 0 || c >= CPU_SETSIZE) continue;
    CPU_SET(c, &cpus);
    cpu_list += (cpu_list.empty() ? "" : ",") + std::to_string(c);
  }
  setup.bind_failure = "rcoll-run: rank " + std::to_string(request.rank) + ": could not bind to CPUs " + cpu_list + " (";
  setup.cpus = cpu_list.empty() ? nullptr : &cpus;
  setup.out_fd = out_write.get();
  setup.err_fd = err_write.get();
  setup.in_fd = devnull.get();
  setup.argv = argv.data();
  setup.envp = envp.data();
  setup.launcher_pid = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) return os_error("fork failed", errno);
  if (pid == 0) exec_in_child(request, signals, setup);

  for (int fd : {out_read.get(), err_read.get()}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  SpawnedRank spawned;
  spawned.pid = pid;
  spawned.out = std::move(out_read);
  spawned.err = std::move(err_read);
  return spawned;
}

}  // namespace rcoll::launcher
