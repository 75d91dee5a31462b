// The launcher's signals, read through a signalfd so the main loop sees them as an
// ordinary readable fd: SIGCHLD (a rank changed state) and the signals forwarded to the
// ranks. They are blocked in every thread, so create this before starting any thread
// (the store server's) and the threads inherit the mask.
#pragma once

#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "rcoll/status.h"

namespace rcoll::launcher {

// Forwarded to every live rank. SIGSTOP/SIGCONT are not: job control is the shell's.
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

class SignalRouter {
 public:
  struct Received {
    int signo;
    // Ctrl-C at the terminal: the kernel sent SIGINT to the whole foreground process
    // group, which the ranks share, so they got it too and it is not sent again.
    bool to_process_group;
  };

  // Blocks SIGCHLD and the forwarded signals (those the launcher's parent did not set to
  // be ignored), ignores SIGPIPE (a closed stdout must not kill the launcher) and opens
  // the signalfd.
  static Result<std::unique_ptr<SignalRouter>> install();
  ~SignalRouter();
  SignalRouter(const SignalRouter&) = delete;
  SignalRouter& operator=(const SignalRouter&) = delete;

  int fd() const { return fd_.get(); }
  // Everything pending, without blocking. SIGCHLD is included: it means "reap now".
  std::vector<Received> drain();
  // In a forked child, before exec: the signal state the launcher itself started with.
  // Async-signal-safe.
  void restore_in_child() const noexcept;

 private:
  SignalRouter() = default;

  sigset_t old_mask_{};
  struct sigaction old_sigpipe_ {};
  struct sigaction old_sigchld_ {};
  UniqueFd fd_;
};

// "SIGKILL"; "signal 42" for one without a name.
std::string signal_name(int signo);

}  // namespace rcoll::launcher
