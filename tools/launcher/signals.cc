#include "tools/launcher/signals.h"

#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

namespace rcoll::launcher {

Result<std::unique_ptr<SignalRouter>> SignalRouter::install() {
  std::unique_ptr<SignalRouter> router(new SignalRouter());

  // SIGCHLD must not be SIG_IGN (children would be reaped by the kernel, waitpid fails).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  struct sigaction ign = dfl;
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGCHLD, &dfl, &router->old_sigchld_);
  ::sigaction(SIGPIPE, &ign, &router->old_sigpipe_);

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int sig : kForwardedSignals) {
    struct sigaction current {};
    ::sigaction(sig, nullptr, &current);
    if (current.sa_handler != SIG_IGN) sigaddset(&set, sig);  // e.g. SIGHUP under nohup
  }
  ::pthread_sigmask(SIG_BLOCK, &set, &router->old_mask_);

  int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    ::pthread_sigmask(SIG_SETMASK, &router->old_mask_, nullptr);
    ::sigaction(SIGPIPE, &router->old_sigpipe_, nullptr);
    ::sigaction(SIGCHLD, &router->old_sigchld_, nullptr);
    return Status(ErrorCode::kInternal, std::string("signalfd failed: ") + ::strerror(err));
  }
  router->fd_.reset(fd);
  return router;
}

SignalRouter::~SignalRouter() {
  fd_.reset();
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  ::sigaction(SIGPIPE, &old_sigpipe_, nullptr);
  ::sigaction(SIGCHLD, &old_sigchld_, nullptr);
}

std::vector<SignalRouter::Received> SignalRouter::drain() {
  std::vector<Received> out;
  signalfd_siginfo info[16];
  for (;;) {
    ssize_t n = ::read(fd_.get(), info, sizeof(info));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: nothing more pending
    for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(info[0]); ++i) {
      const int signo = static_cast<int>(info[i].ssi_signo);
      out.push_back({signo, signo == SIGINT && info[i].ssi_code == SI_KERNEL});
    }
  }
  return out;
}

void SignalRouter::restore_in_child() const noexcept {
  ::sigaction(SIGPIPE, &old_sigpipe_, nullptr);
  ::sigaction(SIGCHLD, &old_sigchld_, nullptr);
  ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
}

std::string signal_name(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  if (abbrev == nullptr) return "signal " + std::to_string(signo);
  return std::string("SIG") + abbrev;
}

}  // namespace rcoll::launcher
