#include "bench/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

#include "base/unique_fd.h"

namespace rcoll::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPollEvery{20};
constexpr std::chrono::seconds kGrace{5};  // between SIGTERM and SIGKILL

// Async-signal-safe: between fork and exec the child may only make system calls.
void write_raw(int fd, const char* s) {
  size_t left = std::strlen(s);
  while (left > 0) {
    const ssize_t n = ::write(fd, s, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s += n;
    left -= static_cast<size_t>(n);
  }
}

// waitpid without blocking; the wait status once `pid` has exited.
bool try_reap(pid_t pid, int* status) {
  for (;;) {
    const pid_t p = ::waitpid(pid, status, WNOHANG);
    if (p < 0 && errno == EINTR) continue;
    if (p < 0) {
      *status = 127 << 8;  // not our child any more: nothing left to wait for
      return true;
    }
    return p == pid;
  }
}

// Reaps `pid` if it exits within `limit`.
bool reap_within(pid_t pid, Clock::duration limit, int* status) {
  const auto until = Clock::now() + limit;
  while (!try_reap(pid, status)) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(kPollEvery);
  }
  return true;
}

}  // namespace

std::string executable_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

bool is_executable(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), X_OK) == 0;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  const std::string dirs = path;
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t colon = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, colon - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (is_executable(candidate)) return candidate;
    start = colon + 1;
  }
  return "";
}

bool ChildExit::ok() const {
  return !timed_out && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

int ChildExit::code() const {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 125;
}

std::string ChildExit::describe() const {
  if (timed_out) return "ran past its " + std::to_string(seconds) + " s deadline and was stopped";
  if (WIFEXITED(wait_status)) return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

ChildProcess ChildProcess::start(const std::vector<std::string>& argv, int output_fd) {
  // Everything the child needs is built before fork: it must not allocate after it.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string failure = "rcoll-bench: cannot execute " + argv.front() + ": ";
  UniqueFd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_in.valid())
    throw std::runtime_error(std::string("cannot open /dev/null: ") + std::strerror(errno));

  std::fflush(stdout);  // nothing of ours may sit in stdio buffers across fork
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0)
    throw std::runtime_error("cannot start " + argv.front() +
                             ": fork failed: " + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // rcoll-bench died before the prctl
    ::dup2(null_in.get(), STDIN_FILENO);
    ::dup2(output_fd, STDOUT_FILENO);
    ::dup2(output_fd, STDERR_FILENO);
    ::execv(args[0], args.data());
    const char* reason = ::strerrordesc_np(errno);  // unlike strerror, async-signal-safe
    write_raw(STDERR_FILENO, failure.c_str());
    write_raw(STDERR_FILENO, reason ? reason : "unknown error");
    write_raw(STDERR_FILENO, "\n");
    ::_exit(127);
  }
  return ChildProcess(pid);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) stop();
}

int ChildProcess::stop() {
  int status = 0;
  ::kill(pid_, SIGTERM);
  if (!reap_within(pid_, kGrace, &status)) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);  // SIGKILL cannot be ignored: this returns
  }
  pid_ = -1;
  return status;
}

ChildExit ChildProcess::wait(std::chrono::seconds deadline) {
  ChildExit exit;
  exit.seconds = static_cast<int>(deadline.count());
  if (pid_ <= 0) throw std::logic_error("ChildProcess::wait: no child");
  if (reap_within(pid_, deadline, &exit.wait_status)) {
    pid_ = -1;
    return exit;
  }
  exit.timed_out = true;
  exit.wait_status = stop();
  return exit;
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./,:=+@%") == std::string::npos;
    if (!out.empty()) out += ' ';
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

}  // namespace rcoll::bench
