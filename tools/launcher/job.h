// Supervises the ranks of one job: relays their output, forwards signals to them,
// notices the first failure or the --timeout, stops the others (SIGTERM, a grace
// period, SIGKILL) and decides the launcher's exit code.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/unique_fd.h"
#include "tools/launcher/options.h"
#include "tools/launcher/output_relay.h"
#include "tools/launcher/rank_process.h"
#include "tools/launcher/signals.h"

namespace rcoll::launcher {

class Job {
 public:
  Job(const LaunchOptions& options, std::string exec_path, JobEnvironment env,
      SignalRouter& signals);
  // Starts the ranks and returns once every one has been reaped: the exit code.
  int run();

 private:
  // How long SIGKILLed ranks get to be reaped before the launcher gives up on them.
  static constexpr std::chrono::seconds kReapAfterKill{10};
  // The main loop wakes at least this often even with nothing to do.
  static constexpr std::chrono::milliseconds kMaxPollWait{1000};

  enum class State { kRunning, kLingering, kStopping, kKilling };

  struct Rank {
    int rank = 0;
    pid_t pid = -1;
    bool alive = false;  // started and not yet reaped
    UniqueFd out;
    UniqueFd err;
    LineRelay out_relay;
    LineRelay err_relay;
  };

  bool start_ranks();
  void poll_once(Deadline until);
  void handle_signals();
  void read_pipe(UniqueFd& fd, LineRelay& relay, int max_reads);
  void reap();
  void on_rank_exit(Rank& rank, int wait_status);
  void begin_stop();
  void kill_remaining();
  void give_up_on_remaining();

  int live_count() const;
  std::string live_rank_list() const;
  void say(const std::string& line);  // "rcoll-run: ..." on stderr

  const LaunchOptions& options_;
  std::string exec_path_;
  JobEnvironment env_;
  SignalRouter& signals_;
  OutputSink stdout_sink_;
  OutputSink stderr_sink_;
  std::vector<Rank> ranks_;
  State state_ = State::kRunning;
  Deadline escalation_deadline_ = Deadline::never();  // SIGKILL, then giving up
  int exit_code_ = 0;
};

}  // namespace rcoll::launcher
