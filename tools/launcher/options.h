// Command line of rcoll-run: what to launch and how to supervise it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rcoll/status.h"

namespace rcoll::launcher {

inline constexpr int kMaxRanks = 1024;
// Exit codes of the launcher itself (a failing rank's own code wins otherwise).
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTimeout = 124;         // as timeout(1)
inline constexpr int kExitLauncherFailed = 125;  // the launcher could not run the job
inline constexpr int kExitCannotExecute = 127;   // exec failed in a rank, as the shell

struct LaunchOptions {
  int num_ranks = 0;
  std::string transport;              // empty: not given, RCOLL_TRANSPORT is inherited
  std::optional<std::string> inject;  // checked by the ranks, not here
  std::optional<double> timeout_s;    // wall-clock limit for the whole job
  double linger_s = 0.0;              // after the first failure, let the others run (and report) this long
  double grace_s = 5.0;               // SIGTERM -> SIGKILL delay when stopping ranks
  bool tag_output = true;
  uint16_t store_port = 0;           // 0: any free port
  std::string store_host = "127.0.0.1";  // address the store binds and the ranks dial
  // CPU binding: "core" gives each rank its own share of the logical CPUs
  // rcoll-run may use (consecutive in its affinity mask, every CPU used; with
  // more ranks than CPUs one each, wrapping around), "none" leaves the
  // scheduler free, "auto" = core for up to 2 ranks when there are CPUs
  // enough (what Open MPI's mpirun binds by default), else none.
  std::string bind_to = "auto";
  std::vector<std::string> command;  // program and its arguments
  bool show_help = false;
  bool show_version = false;
};

// Parses argv (argv[0] excluded). Errors are kInvalidArgument with a message fit for
// "rcoll-run: <message>".
Result<LaunchOptions> parse_launch_options(const std::vector<std::string>& args);

const char* usage_text();

// Finds the program as execvp would (PATH search when it has no '/'), and checks that it
// is an executable regular file. Errors say what is wrong with it.
Result<std::string> resolve_program(const std::string& program);

}  // namespace rcoll::launcher
