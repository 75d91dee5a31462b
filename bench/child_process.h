// Other programs that rcoll-bench starts (the baseline benchmarks for
// --compare, gnuplot for --plot): finding them, starting one with its output in
// a file, and waiting for it with a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace rcoll::bench {

// The directory of the running executable (from /proc/self/exe); "" if unknown.
std::string executable_dir();
// `name` in the first directory of $PATH that holds it as an executable; "" if none.
std::string find_on_path(const std::string& name);
bool is_executable(const std::string& path);

// How a child ended.
struct ChildExit {
  bool timed_out = false;  // stopped by us at the deadline
  int wait_status = 0;
  int seconds = 0;  // the deadline, for the message
  bool ok() const;
  int code() const;  // the exit code; 128 + N if killed by signal N
  // "exited with code 3", "was killed by signal 9 (Killed)", "ran past its 600 s deadline and was
  // stopped".
  std::string describe() const;
};

// One started program. Move-only; a child still running when its owner goes
// away is stopped (SIGTERM, then SIGKILL) and reaped.
class ChildProcess {
 public:
  // Starts argv[0] (a path: no $PATH search) with stdin from /dev/null and
  // stdout and stderr on `output_fd`. The kernel sends it SIGTERM should this
  // thread die first, so a killed rcoll-bench leaves no benchmark behind.
  // Throws std::runtime_error if fork fails; an exec failure shows as exit code
  // 127 with the reason written to `output_fd`.
  static ChildProcess start(const std::vector<std::string>& argv, int output_fd);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  // Waits until the child exits or `deadline` has passed; in the second case
  // stops it as the destructor would.
  ChildExit wait(std::chrono::seconds deadline);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  // SIGTERM, up to kGrace for it to exit, then SIGKILL; returns its wait status.
  int stop();

  pid_t pid_ = -1;  // -1 once reaped
};

// A shell-style rendering of a command line, for messages ("a b 'c d'").
std::string command_line(const std::vector<std::string>& argv);

}  // namespace rcoll::bench
