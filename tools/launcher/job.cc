#include "tools/launcher/job.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

namespace rcoll::launcher {
namespace {

std::string describe_exit(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) +
           (WCOREDUMP(wait_status) ? ", core dumped" : "") + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kExitLauncherFailed;
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

std::string plural_ranks(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

}  // namespace

Job::Job(const LaunchOptions& options, std::string exec_path, JobEnvironment env,
         SignalRouter& signals)
    : options_(options),
      exec_path_(std::move(exec_path)),
      env_(std::move(env)),
      signals_(signals),
      stdout_sink_(STDOUT_FILENO),
      stderr_sink_(STDERR_FILENO) {}

int Job::run() {
  if (!start_ranks()) begin_stop();
  const Deadline job_deadline = options_.timeout_s
                                    ? Deadline::after(std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(*options_.timeout_s)))
                                    : Deadline::never();
  while (live_count() > 0) {
    Deadline wake = state_ == State::kRunning ? job_deadline : escalation_deadline_;
    poll_once(wake.earlier(Deadline::after(kMaxPollWait)));
    handle_signals();
    reap();
    if (live_count() == 0) break;

    if (state_ == State::kRunning && job_deadline.expired()) {
      say("job exceeded --timeout " + format_seconds(*options_.timeout_s) +
          " s; ranks still running: " + live_rank_list() + " \u2014 stopping them");
      exit_code_ = kExitTimeout;
      begin_stop();
    } else if (state_ == State::kLingering && escalation_deadline_.expired()) {
      say("ranks " + live_rank_list() + " still running " + format_seconds(options_.linger_s) +
          " s after the first failure; stopping them");
      begin_stop();
    } else if (state_ == State::kStopping && escalation_deadline_.expired()) {
      kill_remaining();
    } else if (state_ == State::kKilling && escalation_deadline_.expired()) {
      give_up_on_remaining();
      break;
    }
  }
  return exit_code_;
}

bool Job::start_ranks() {
  const std::vector<std::string> inherited = current_environment();
  // Bound ranks keep their caches and, while there are CPUs enough, never share
  // one; with more ranks than CPUs they wrap around. auto binds what mpirun
  // binds by default: up to 2 ranks.
  const std::vector<int> cpus = usable_cpus();
  const auto n = static_cast<size_t>(options_.num_ranks);
  const bool bind = options_.bind_to == "core" || (options_.bind_to == "auto" && n <= 2 && n <= cpus.size());
  if (bind && cpus.empty()) say("--bind-to core: cannot read this launcher's CPU affinity; ranks run unbound");
  // Shares of cpus/n logical CPUs, the first cpus%n ranks one more: every CPU used.
  const size_t share = cpus.size() / n, extra = cpus.size() % n;
  ranks_.reserve(static_cast<size_t>(options_.num_ranks));
  for (int r = 0; r < options_.num_ranks; ++r) {
    SpawnRequest request;
    request.rank = r;
    if (bind && !cpus.empty()) {
      const auto ur = static_cast<size_t>(r);
      if (share == 0) {
        request.cpus.push_back(cpus[ur % cpus.size()]);
      } else {
        const size_t first = ur * share + std::min(ur, extra);
        for (size_t i = 0; i < share + (ur < extra ? 1 : 0); ++i) request.cpus.push_back(cpus[first + i]);
      }
    }
    request.exec_path = exec_path_;
    request.argv = options_.command;
    request.env = rank_environment(inherited, env_, r);
    request.inherit_stdin = (r == 0);  // as mpirun: only rank 0 reads the launcher's stdin

    Result<SpawnedRank> spawned = spawn_rank(request, signals_);
    if (!spawned.ok()) {
      say("cannot start rank " + std::to_string(r) + ": " + spawned.status().message() +
          "; stopping the " + plural_ranks(r) + " already started");
      exit_code_ = kExitLauncherFailed;
      return false;
    }
    ranks_.push_back(Rank{r, spawned.value().pid, true, std::move(spawned.value().out),
                          std::move(spawned.value().err),
                          LineRelay(stdout_sink_, r, options_.tag_output),
                          LineRelay(stderr_sink_, r, options_.tag_output)});
  }
  return true;
}

void Job::poll_once(Deadline until) {
  std::vector<pollfd> fds;
  std::vector<std::pair<UniqueFd*, LineRelay*>> pipes;
  fds.push_back({signals_.fd(), POLLIN, 0});
  for (Rank& r : ranks_) {
    // Nobody reads our stdout any more (`rcoll-run ... | head`): close the ranks' ends
    // too, so that they get SIGPIPE as they would in a plain pipeline.
    if (stdout_sink_.broken()) r.out.reset();
    if (stderr_sink_.broken()) r.err.reset();
    if (r.out.valid()) {
      fds.push_back({r.out.get(), POLLIN, 0});
      pipes.emplace_back(&r.out, &r.out_relay);
    }
    if (r.err.valid()) {
      fds.push_back({r.err.get(), POLLIN, 0});
      pipes.emplace_back(&r.err, &r.err_relay);
    }
  }
  // Round up so that a deadline a fraction of a millisecond away does not spin.
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(until.remaining());
  int n = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  if (n <= 0) return;  // timeout, or EINTR: the caller re-checks everything anyway
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) read_pipe(*pipes[i - 1].first, *pipes[i - 1].second, 1);
  }
}

void Job::handle_signals() {
  for (const SignalRouter::Received& sig : signals_.drain()) {
    if (sig.signo == SIGCHLD || sig.to_process_group) continue;
    if (sig.signo == SIGINT || sig.signo == SIGTERM || sig.signo == SIGHUP) {
      say("received " + signal_name(sig.signo) + "; forwarding it to " +
          plural_ranks(live_count()));
    }
    for (Rank& r : ranks_) {
      if (r.alive) ::kill(r.pid, sig.signo);
    }
  }
}

// Reads at most max_reads chunks (the main loop reads one per wakeup, to be fair to the
// other ranks); at end of file the relay flushes its partial line and the pipe is closed.
void Job::read_pipe(UniqueFd& fd, LineRelay& relay, int max_reads) {
  char buf[64 * 1024];
  for (int i = 0; i < max_reads && fd.valid(); ++i) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n > 0) {
      relay.feed(std::string_view(buf, static_cast<size_t>(n)));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {
      relay.finish();
      fd.reset();
    }
  }
}

void Job::reap() {
  for (Rank& r : ranks_) {
    if (!r.alive) continue;
    int status = 0;
    pid_t p = ::waitpid(r.pid, &status, WNOHANG);
    if (p == 0 || (p < 0 && errno == EINTR)) continue;  // still running; next round
    if (p < 0) {
      say("cannot wait for rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) +
          "): " + ::strerror(errno) + "; treating it as failed");
      status = kExitLauncherFailed << 8;
    }
    r.alive = false;
    // What the rank wrote before exiting is all in the pipes now. Whatever a process it
    // left behind writes later is not relayed: the pipes are closed here, bounded reads.
    constexpr int kMaxDrainReads = 64;
    for (auto [fd, relay] : {std::pair{&r.out, &r.out_relay}, std::pair{&r.err, &r.err_relay}}) {
      read_pipe(*fd, *relay, kMaxDrainReads);
      relay->finish();
      fd->reset();
    }
    on_rank_exit(r, status);
  }
}

void Job::on_rank_exit(Rank& rank, int wait_status) {
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) return;
  if (state_ != State::kRunning) return;  // being stopped by us, or after the first failure
  exit_code_ = exit_code_of(wait_status);
  const int others = live_count();
  say("rank " + std::to_string(rank.rank) + " (pid " + std::to_string(rank.pid) + ") " +
      describe_exit(wait_status) + " (first failure); " +
      (others > 0 ? (options_.linger_s > 0 ? "letting the other " + plural_ranks(others) + " report for up to " +
                                                  format_seconds(options_.linger_s) + " s (--linger)"
                                            : "stopping the other " + plural_ranks(others))
                  : "no other ranks are running"));
  if (options_.linger_s > 0 && others > 0) {
    // The survivors usually have something to say about the failure (rcoll
    // reports a dead peer within seconds): let them, then stop them.
    state_ = State::kLingering;
    escalation_deadline_ = Deadline::after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.linger_s)));
    return;
  }
  begin_stop();
}

void Job::begin_stop() {
  state_ = State::kStopping;
  escalation_deadline_ = Deadline::after(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.grace_s)));
  for (Rank& r : ranks_) {
    if (r.alive) ::kill(r.pid, SIGTERM);
  }
}

void Job::kill_remaining() {
  say("ranks still running " + format_seconds(options_.grace_s) +
      " s after SIGTERM: " + live_rank_list() + "; sending SIGKILL");
  state_ = State::kKilling;
  escalation_deadline_ = Deadline::after(kReapAfterKill);
  for (Rank& r : ranks_) {
    if (r.alive) ::kill(r.pid, SIGKILL);
  }
}

void Job::give_up_on_remaining() {
  std::string list;
  for (const Rank& r : ranks_) {
    if (!r.alive) continue;
    list += (list.empty() ? "" : ", ") + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) +
            ")";
  }
  say("ranks " + list + " did not exit " + std::to_string(kReapAfterKill.count()) +
      " s after SIGKILL; exiting without them");
  if (exit_code_ == 0) exit_code_ = kExitLauncherFailed;
}

int Job::live_count() const {
  int n = 0;
  for (const Rank& r : ranks_) n += r.alive ? 1 : 0;
  return n;
}

std::string Job::live_rank_list() const {
  std::string list;
  for (const Rank& r : ranks_) {
    if (r.alive) list += (list.empty() ? "" : ",") + std::to_string(r.rank);
  }
  return list;
}

void Job::say(const std::string& line) { stderr_sink_.write("rcoll-run: " + line + "\n"); }

}  // namespace rcoll::launcher
