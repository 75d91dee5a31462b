// rcoll-run end to end: the real launcher runs small shell commands (and, for the store,
// this test binary in a "rank role") and the tests check what users rely on: the rank
// environment, prefixed output, exit codes, signal forwarding, stopping and --timeout.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "rcoll/store.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// ---- Rank role: this binary, started by rcoll-run, acting as a rank --------------------

constexpr const char* kRoleVar = "RCOLL_LAUNCHER_TEST_ROLE";

int store_client_role() {
  const char* addr = std::getenv("RCOLL_STORE_ADDR");
  const char* token = std::getenv("RCOLL_JOB_TOKEN");
  const char* rank_s = std::getenv("RCOLL_RANK");
  const char* world_s = std::getenv("RCOLL_WORLD_SIZE");
  if (!addr || !token || !rank_s || !world_s) {
    std::printf("missing RCOLL_STORE_ADDR/RCOLL_JOB_TOKEN/RCOLL_RANK/RCOLL_WORLD_SIZE\n");
    return 1;
  }
  const int rank = std::atoi(rank_s);
  const int world = std::atoi(world_s);
  std::string address = addr;
  const size_t colon = address.rfind(':');
  rcoll::TcpStoreOptions options;
  options.host = address.substr(0, colon);
  options.port = static_cast<uint16_t>(std::atoi(address.substr(colon + 1).c_str()));
  options.token = token;
  options.connect_timeout = std::chrono::milliseconds(10000);

  auto store = rcoll::connect_tcp_store(options);
  if (!store.ok()) {
    std::printf("connect failed: %s\n", store.status().to_string().c_str());
    return 1;
  }
  const std::string mine = "hello from " + std::to_string(rank);
  rcoll::Status s = store.value()->set("launcher_test/rank" + std::to_string(rank),
                                       rcoll::Bytes(mine.begin(), mine.end()));
  if (!s.ok()) {
    std::printf("set failed: %s\n", s.to_string().c_str());
    return 1;
  }
  for (int peer = 0; peer < world; ++peer) {
    auto value = store.value()->get("launcher_test/rank" + std::to_string(peer), 10000ms);
    if (!value.ok()) {
      std::printf("get of rank %d failed: %s\n", peer, value.status().to_string().c_str());
      return 1;
    }
    std::printf("got '%s'\n", std::string(value.value().begin(), value.value().end()).c_str());
  }
  auto count = store.value()->add("launcher_test/count", 1);
  if (!count.ok()) {
    std::printf("add failed: %s\n", count.status().to_string().c_str());
    return 1;
  }
  std::printf("store ok\n");
  return 0;
}

// Runs after main() has started (static initialisation is complete) and before any test:
// in a rank role, do the role's work and exit with its code.
class RankRoleEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* role = std::getenv(kRoleVar);
    if (role == nullptr) return;
    int code = std::string(role) == "store_client" ? store_client_role() : 99;
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
  }
};
[[maybe_unused]] auto* const kRankRole =
    ::testing::AddGlobalTestEnvironment(new RankRoleEnvironment);

// ---- Running the launcher ----------------------------------------------------------------

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string launcher_path() {
  if (const char* dir = std::getenv("RCOLL_TEST_BIN_DIR")) {
    return std::string(dir) + "/tools/rcoll-run";
  }
  // Run by hand: the binary is <build>/tests/launcher_test.
  std::string exe = self_exe();
  std::string tests_dir = exe.substr(0, exe.rfind('/'));
  return tests_dir.substr(0, tests_dir.rfind('/')) + "/tools/rcoll-run";
}

struct Outcome {
  bool exited = false;
  int exit_code = -1;
  int term_signal = 0;
  bool timed_out = false;  // the test had to kill the launcher
  std::string out;
  std::string err;
  double seconds = 0;
};

// One launcher process, in a process group of its own so that whatever it leaves behind
// can be ended by the test (its ranks share that group).
class LauncherRun {
 public:
  explicit LauncherRun(const std::vector<std::string>& args,
                       const std::vector<std::string>& extra_env = {}) {
    start_ = Clock::now();
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) std::abort();
    std::vector<std::string> argv_s = {launcher_path()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
    env_s.insert(env_s.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);

    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      int devnull = ::open("/dev/null", O_RDONLY);
      ::dup2(devnull, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(126);
    }
    ::setpgid(pid_, pid_);  // also here: no race with the signals the test sends
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }

  ~LauncherRun() {
    if (!reaped_) finish(1s);
    ::kill(-pid_, SIGKILL);  // leftovers of this test's own process group, if any
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  pid_t pid() const { return pid_; }
  const std::string& out() const { return outcome_.out; }

  // Reads output until `count` stdout lines contain `needle` or the timeout passes.
  bool wait_for_stdout(const std::string& needle, int count, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      int seen = 0;
      for (size_t pos = 0; (pos = outcome_.out.find(needle, pos)) != std::string::npos;
           pos += needle.size()) {
        ++seen;
      }
      if (seen >= count) return true;
      if (!pump(deadline)) return false;
    }
    return false;
  }

  void signal(int sig) { ::kill(pid_, sig); }

  // Stops reading the launcher's stdout, as `| head` does.
  void close_stdout() {
    ::close(out_fd_);
    out_fd_ = -1;
  }

  // Waits for the launcher to exit (killing its group at the deadline) and returns what
  // it did. Output written after it exited by processes it left behind is not awaited.
  Outcome finish(std::chrono::milliseconds timeout = 30s) {
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    for (;;) {
      pid_t p = ::waitpid(pid_, &status, WNOHANG);
      if (p == pid_) break;
      if (Clock::now() >= deadline) {
        outcome_.timed_out = true;
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      pump(std::min(deadline, Clock::now() + 50ms));
    }
    reaped_ = true;
    while (pump(Clock::now())) {
    }
    outcome_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    outcome_.exited = WIFEXITED(status);
    outcome_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    outcome_.term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return outcome_;
  }

 private:
  // One poll round on both pipes; false when nothing was read.
  bool pump(Clock::time_point until) {
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    int n = ::poll(fds, 2, static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (n <= 0) return false;
    bool got = false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      char buf[65536];
      ssize_t r = ::read(fds[i].fd, buf, sizeof(buf));
      if (r > 0) {
        (i == 0 ? outcome_.out : outcome_.err).append(buf, static_cast<size_t>(r));
        got = true;
      }
    }
    return got;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool reaped_ = false;
  Clock::time_point start_;
  Outcome outcome_;
};

Outcome run_launcher(const std::vector<std::string>& args,
                     const std::vector<std::string>& extra_env = {},
                     std::chrono::milliseconds timeout = 30s) {
  LauncherRun run(args, extra_env);
  return run.finish(timeout);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string describe(const Outcome& o) {
  return "exit " + std::to_string(o.exit_code) + " signal " + std::to_string(o.term_signal) +
         (o.timed_out ? " (killed by the test)" : "") + "\n--- stdout:\n" + o.out +
         "--- stderr:\n" + o.err;
}

// ---- Tests ---------------------------------------------------------------------------------

TEST(Launcher, EveryRankGetsItsEnvironment) {
  Outcome o = run_launcher(
      {"-n", "4", "--", "/bin/sh", "-c",
       "echo \"rank=$RCOLL_RANK world=$RCOLL_WORLD_SIZE local=$RCOLL_LOCAL_RANK/"
       "$RCOLL_LOCAL_WORLD_SIZE store=$RCOLL_STORE_ADDR token=$RCOLL_JOB_TOKEN "
       "job=$RCOLL_JOB_ID transport=${RCOLL_TRANSPORT-unset} inject=${RCOLL_INJECT-unset}\""},
      {"RCOLL_RANK=99", "RCOLL_WORLD_SIZE=99", "RCOLL_TRANSPORT=ucx"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);

  const std::regex line_re(R"(\[(\d+)\] rank=(\d+) world=4 local=(\d+)/4 store=127\.0\.0\.1:(\d+) )"
                           R"(token=([0-9a-f]{16}) job=([0-9a-f]+) transport=ucx inject=unset)");
  std::set<int> ranks;
  std::set<std::string> stores, tokens, jobs;
  for (const std::string& line : lines_of(o.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << "unexpected line: " << line;
    EXPECT_EQ(m[1], m[2]) << "the prefix must name the rank: " << line;
    EXPECT_EQ(m[2], m[3]) << line;
    ranks.insert(std::stoi(m[2]));
    stores.insert(m[4]);
    tokens.insert(m[5]);
    jobs.insert(m[6]);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(stores.size(), 1u) << "every rank must see the same store";
  EXPECT_EQ(tokens.size(), 1u);
  EXPECT_EQ(jobs.size(), 1u);
}

TEST(Launcher, TransportAndInjectAreSetForEveryRank) {
  const std::string spec = "close-link:rank=1,peer=2,op=20;stall:rank=0,op=4,ms=10";
  Outcome o = run_launcher({"-n", "2", "--transport", "tcp", "--inject", spec, "--", "/bin/sh",
                            "-c", "echo \"$RCOLL_TRANSPORT|$RCOLL_INJECT\""},
                           {"RCOLL_INJECT=stale-value"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  std::vector<std::string> lines = lines_of(o.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[0] tcp|" + spec, "[1] tcp|" + spec}));
}

TEST(Launcher, PrefixesEveryLineOfStdoutAndStderr) {
  // The last stdout line has no newline: it is flushed, prefixed, when the rank exits.
  Outcome o = run_launcher({"-n", "2", "--", "/bin/sh", "-c",
                            "printf 'first\\nsecond\\n\\nlast'; printf 'oops 1\\noops 2\\n' >&2"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  for (int r = 0; r < 2; ++r) {
    const std::string p = "[" + std::to_string(r) + "] ";
    std::vector<std::string> mine_out, mine_err;
    for (const auto& l : lines_of(o.out)) {
      if (l.rfind(p, 0) == 0) mine_out.push_back(l);
    }
    for (const auto& l : lines_of(o.err)) {
      if (l.rfind(p, 0) == 0) mine_err.push_back(l);
    }
    EXPECT_EQ(mine_out, (std::vector<std::string>{p + "first", p + "second", p, p + "last"}))
        << describe(o);
    EXPECT_EQ(mine_err, (std::vector<std::string>{p + "oops 1", p + "oops 2"})) << describe(o);
  }
  EXPECT_EQ(lines_of(o.out).size(), 8u) << describe(o);
  EXPECT_EQ(o.out.back(), '\n');
}

TEST(Launcher, LinesOfConcurrentRanksNeverInterleave) {
  // Four ranks each write 3000 long lines as fast as they can; each must come out whole,
  // with its own prefix, in the rank's order.
  Outcome o = run_launcher(
      {"-n", "4", "--", "/bin/sh", "-c",
       "i=0; while [ $i -lt 3000 ]; do echo \"$RCOLL_RANK:$i:"
       "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz\"; "
       "i=$((i+1)); done"});
  ASSERT_EQ(o.exit_code, 0) << "exit " << o.exit_code << "\n" << o.err;
  const std::regex line_re(R"(\[(\d)\] (\d):(\d+):(abcdefghijklmnopqrstuvwxyz){3})");
  std::map<int, int> next;
  size_t count = 0;
  for (const std::string& line : lines_of(o.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << "mangled line: " << line;
    ASSERT_EQ(m[1], m[2]) << line;
    const int rank = std::stoi(m[1]);
    ASSERT_EQ(std::stoi(m[3]), next[rank]++) << "out of order for rank " << rank;
    ++count;
  }
  EXPECT_EQ(count, 4u * 3000u);
}

TEST(Launcher, NoTagOutputPassesOutputThroughUntouched) {
  Outcome o = run_launcher({"-n", "1", "--no-tag-output", "--", "/bin/sh", "-c",
                            "printf 'a\\nb\\npartial'; printf 'e' >&2"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_EQ(o.out, "a\nb\npartial");
  EXPECT_EQ(o.err, "e");
}

TEST(Launcher, FirstFailingRankDecidesTheExitCodeAndTheOthersAreStopped) {
  Outcome o = run_launcher({"-n", "4", "--", "/bin/sh", "-c",
                            "if [ \"$RCOLL_RANK\" = 2 ]; then sleep 0.2; exit 3; fi; "
                            "exec sleep 100"});
  EXPECT_EQ(o.exit_code, 3) << describe(o);
  EXPECT_LT(o.seconds, 4.0) << "the sleeping ranks were not stopped promptly\n" << describe(o);
  EXPECT_TRUE(std::regex_search(
      o.err, std::regex(R"(rcoll-run: rank 2 \(pid \d+\) exited with code 3 \(first failure\); )"
                        R"(stopping the other 3 ranks)")))
      << describe(o);
}

TEST(Launcher, RankKilledBySignalGives128PlusSignal) {
  Outcome o = run_launcher({"-n", "3", "--", "/bin/sh", "-c",
                            "if [ \"$RCOLL_RANK\" = 1 ]; then sleep 0.2; kill -9 $$; fi; "
                            "exec sleep 100"});
  EXPECT_EQ(o.exit_code, 128 + 9) << describe(o);
  EXPECT_LT(o.seconds, 4.0) << describe(o);
  EXPECT_TRUE(std::regex_search(
      o.err,
      std::regex(R"(rank 1 \(pid \d+\) was killed by signal 9 \(SIGKILL\) \(first failure\))")))
      << describe(o);
}

TEST(Launcher, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  // Rank 1 ignores SIGTERM (sleep inherits the ignored disposition) and then says so
  // through a file; rank 0 waits for that and fails.
  const std::string flag =
      ::testing::TempDir() + "rcoll_launcher_flag_" + std::to_string(::getpid());
  std::remove(flag.c_str());
  Outcome o =
      run_launcher({"-n", "2", "--grace", "0.5", "--", "/bin/sh", "-c",
                    "if [ \"$RCOLL_RANK\" = 0 ]; then i=0; while [ ! -e '" + flag +
                        "' ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; exit 5; fi; "
                        "trap '' TERM; touch '" +
                        flag + "'; exec sleep 100"});
  std::remove(flag.c_str());
  EXPECT_EQ(o.exit_code, 5) << describe(o);
  EXPECT_LT(o.seconds, 6.0) << describe(o);
  EXPECT_NE(o.err.find("ranks still running 0.5 s after SIGTERM: 1; sending SIGKILL"),
            std::string::npos)
      << describe(o);
}

TEST(Launcher, ForwardsSignalsToEveryRank) {
  LauncherRun run({"-n", "2", "--", "/bin/sh", "-c",
                   "trap 'echo got USR1' USR1; trap 'echo got TERM; exit 0' TERM; "
                   "echo ready; while :; do sleep 0.05; done"});
  ASSERT_TRUE(run.wait_for_stdout("] ready", 2, 10s)) << run.out();
  run.signal(SIGUSR1);
  ASSERT_TRUE(run.wait_for_stdout("] got USR1", 2, 10s)) << run.out();
  run.signal(SIGTERM);
  Outcome o = run.finish(10s);
  EXPECT_EQ(o.exit_code, 0) << describe(o);
  for (const char* line : {"[0] got USR1", "[1] got USR1", "[0] got TERM", "[1] got TERM"}) {
    EXPECT_NE(o.out.find(std::string(line) + "\n"), std::string::npos) << line << "\n"
                                                                       << describe(o);
  }
}

TEST(Launcher, ClosedStdoutEndsTheRanksAsInAPipeline) {
  // `rcoll-run -n 2 -- yes | head`: the ranks must die of SIGPIPE, not write forever.
  LauncherRun run({"-n", "2", "--", "yes"});
  ASSERT_TRUE(run.wait_for_stdout("] y\n", 1, 10s)) << run.out();
  run.close_stdout();
  Outcome o = run.finish(10s);
  EXPECT_EQ(o.exit_code, 128 + SIGPIPE) << describe(o);
  EXPECT_NE(o.err.find("was killed by signal 13 (SIGPIPE) (first failure)"), std::string::npos)
      << describe(o);
}

bool process_gone(pid_t pid) {
  // Gone, or a zombie nobody has reaped yet (the launcher that would have is dead).
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

TEST(Launcher, RanksDieWithAKilledLauncher) {
  LauncherRun run({"-n", "2", "--", "/bin/sh", "-c", "echo pid=$$; exec sleep 100"});
  ASSERT_TRUE(run.wait_for_stdout("pid=", 2, 10s)) << run.out();
  std::vector<pid_t> pids;
  for (const std::string& line : lines_of(run.out())) {
    size_t at = line.find("pid=");
    if (at != std::string::npos) pids.push_back(std::stoi(line.substr(at + 4)));
  }
  ASSERT_EQ(pids.size(), 2u) << run.out();
  run.signal(SIGKILL);
  Outcome o = run.finish(10s);
  EXPECT_EQ(o.term_signal, SIGKILL);
  for (pid_t pid : pids) {
    const auto deadline = Clock::now() + 5s;
    while (!process_gone(pid) && Clock::now() < deadline) ::usleep(20000);
    EXPECT_TRUE(process_gone(pid)) << "rank pid " << pid << " outlived the launcher";
  }
}

TEST(Launcher, TimeoutStopsTheJobWith124) {
  Outcome o = run_launcher({"-n", "3", "--timeout", "1", "--", "/bin/sh", "-c",
                            "if [ \"$RCOLL_RANK\" = 1 ]; then exit 0; fi; exec sleep 100"});
  EXPECT_EQ(o.exit_code, 124) << describe(o);
  EXPECT_GE(o.seconds, 1.0) << describe(o);
  EXPECT_LT(o.seconds, 5.0) << describe(o);
  EXPECT_NE(o.err.find("rcoll-run: job exceeded --timeout 1 s; ranks still running: 0,2"),
            std::string::npos)
      << describe(o);
}

TEST(Launcher, BadUsageExits2WithAMessage) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--", "/bin/true"}, "missing -n"},
      {{"-n", "0", "--", "/bin/true"}, "-n wants a number of ranks from 1 to 1024"},
      {{"-n", "1025", "--", "/bin/true"}, "-n wants a number of ranks from 1 to 1024"},
      {{"-n", "two", "--", "/bin/true"}, "got 'two'"},
      {{"-n", "2", "--"}, "no program to run"},
      {{"-n", "2"}, "no program to run"},
      {{"-n"}, "option -n needs a value"},
      {{"-n", "2", "--frobnicate", "--", "/bin/true"}, "unknown option '--frobnicate'"},
      {{"-n", "2", "--transport", "carrier-pigeon", "--", "/bin/true"}, "--transport must be"},
      {{"-n", "2", "--timeout", "-1", "--", "/bin/true"}, "--timeout wants a positive"},
      {{"-n", "2", "--inject", "", "--", "/bin/true"}, "--inject needs a non-empty"},
      {{"-n", "2", "--store-port", "70000", "--", "/bin/true"}, "--store-port wants a port"},
      {{"-n", "2", "--store-host", "", "--", "/bin/true"}, "--store-host wants a numeric address"},
      {{"-n", "2", "--bind-to", "socket", "--", "/bin/true"}, "--bind-to must be core, none or auto, got 'socket'"},
      {{"-n", "2", "--", "no-such-program-rcoll"}, "cannot find program 'no-such-program-rcoll'"},
      {{"-n", "2", "--", "/no/such/dir/program"}, "cannot run '/no/such/dir/program'"},
      {{"-n", "2", "--", "/tmp"}, "is a directory"},
  };
  for (const auto& [args, message] : cases) {
    Outcome o = run_launcher(args);
    EXPECT_EQ(o.exit_code, 2) << describe(o);
    EXPECT_NE(o.err.find("rcoll-run: "), std::string::npos) << describe(o);
    EXPECT_NE(o.err.find(message), std::string::npos) << "want '" << message << "'\n"
                                                      << describe(o);
    EXPECT_EQ(o.out, "") << describe(o);
  }
}

// The CPUs this test may run on (its affinity mask), in increasing order.
std::vector<int> my_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// "0-3,8,10-11" (the kernel's Cpus_allowed_list) as a set.
std::set<int> parse_cpu_list(const std::string& list) {
  std::set<int> cpus;
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    const size_t dash = part.find('-');
    const int lo = std::stoi(part.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return cpus;
}

// The CPUs each rank is allowed, as the kernel reports them to the rank itself.
std::map<int, std::set<int>> allowed_cpus_of_ranks(const std::vector<std::string>& launcher_args) {
  std::vector<std::string> args = launcher_args;
  for (const char* a : {"--", "/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"}) args.push_back(a);
  Outcome o = run_launcher(args);
  EXPECT_EQ(o.exit_code, 0) << describe(o);
  std::map<int, std::set<int>> by_rank;
  const std::regex line_re(R"(\[(\d+)\] Cpus_allowed_list:\s*(\S+))");
  for (const std::string& line : lines_of(o.out)) {
    std::smatch m;
    if (std::regex_match(line, m, line_re)) by_rank[std::stoi(m[1])] = parse_cpu_list(m[2]);
  }
  return by_rank;
}

// What --bind-to core promises rank r of n: consecutive CPUs of the mask, the
// first size%n ranks one more, every CPU used; one each, wrapping, past that.
std::set<int> expected_share(const std::vector<int>& cpus, int r, int n) {
  const size_t size = cpus.size(), ur = static_cast<size_t>(r), un = static_cast<size_t>(n);
  const size_t share = size / un, extra = size % un;
  if (share == 0) return {cpus[ur % size]};
  const size_t first = ur * share + std::min(ur, extra);
  std::set<int> out;
  for (size_t i = 0; i < share + (ur < extra ? 1 : 0); ++i) out.insert(cpus[first + i]);
  return out;
}

TEST(Launcher, BindToCoreGivesEachRankItsOwnShareOfTheCpus) {
  const std::vector<int> cpus = my_cpus();
  if (cpus.empty() || cpus.size() >= 1000) GTEST_SKIP() << "CPU mask unreadable or too large for -n";
  const int wrap = static_cast<int>(cpus.size()) + 1;  // more ranks than CPUs: one each, wrapping
  for (int n : std::set<int>{1, 2, static_cast<int>(cpus.size()), wrap}) {
    auto by_rank = allowed_cpus_of_ranks({"-n", std::to_string(n), "--bind-to", "core"});
    ASSERT_EQ(by_rank.size(), static_cast<size_t>(n)) << n << " ranks";
    std::set<int> used;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(by_rank[r], expected_share(cpus, r, n)) << "rank " << r << " of " << n;
      used.insert(by_rank[r].begin(), by_rank[r].end());
    }
    EXPECT_EQ(used, std::set<int>(cpus.begin(), cpus.end())) << "every CPU used by " << n << " ranks";
  }
}

TEST(Launcher, BindToNoneAndAutoAboveTwoRanksLeaveTheMaskAlone) {
  const std::vector<int> cpus = my_cpus();
  ASSERT_FALSE(cpus.empty());
  const std::set<int> all(cpus.begin(), cpus.end());
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-n", "2", "--bind-to", "none"},
                                               std::vector<std::string>{"-n", "3"},
                                               std::vector<std::string>{"-n", "3", "--bind-to", "auto"}}) {
    auto by_rank = allowed_cpus_of_ranks(args);
    ASSERT_FALSE(by_rank.empty());
    for (const auto& [rank, set] : by_rank) EXPECT_EQ(set, all) << "rank " << rank << " of " << args[1];
  }
}

TEST(Launcher, BindToAutoBindsUpToTwoRanks) {
  const std::vector<int> cpus = my_cpus();
  ASSERT_FALSE(cpus.empty());
  const int n = cpus.size() >= 2 ? 2 : 1;
  auto by_rank = allowed_cpus_of_ranks({"-n", std::to_string(n)});
  ASSERT_EQ(by_rank.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) EXPECT_EQ(by_rank[r], expected_share(cpus, r, n)) << "rank " << r;
}

TEST(Launcher, HelpPrintsTheUsage) {
  Outcome o = run_launcher({"--help"});
  EXPECT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_NE(o.out.find("Usage: rcoll-run -n N"), std::string::npos) << describe(o);
}

TEST(Launcher, ExecFailureInARankExits127) {
  // Found and executable, but its interpreter does not exist: exec fails in the rank.
  const std::string script =
      ::testing::TempDir() + "rcoll_launcher_bad_interpreter_" + std::to_string(::getpid()) + ".sh";
  {
    std::ofstream f(script);
    f << "#!/no/such/interpreter\necho never\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  Outcome o = run_launcher({"-n", "2", "--", script});
  std::remove(script.c_str());
  EXPECT_EQ(o.exit_code, 127) << describe(o);
  // Whichever rank fails first gets the others stopped, perhaps before they tried exec.
  bool reported = false;
  for (int r = 0; r < 2; ++r) {
    const std::string rank = std::to_string(r);
    reported =
        reported || o.err.find("[" + rank + "] rcoll-run: rank " + rank + ": cannot execute '" +
                               script + "': No such file or directory\n") != std::string::npos;
  }
  EXPECT_TRUE(reported) << describe(o);
}

TEST(Launcher, RanksInheritNoDescriptorsButStdio) {
  // The store's sockets and the other ranks' pipes must not leak into a rank.
  Outcome o =
      run_launcher({"-n", "2", "--no-tag-output", "--", "/bin/sh", "-c", "exec ls /proc/self/fd"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  std::vector<std::string> fds = lines_of(o.out);
  std::sort(fds.begin(), fds.end());
  // Per rank: 0, 1, 2 and the directory ls itself reads.
  EXPECT_EQ(fds, (std::vector<std::string>{"0", "0", "1", "1", "2", "2", "3", "3"})) << o.out;
}

TEST(Launcher, StorePortOptionIsUsed) {
  // Ask the kernel for a free port, release it, and hand it to the launcher.
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  ::close(s);

  Outcome o = run_launcher(
      {"-n", "1", "--store-port", port, "--", "/bin/sh", "-c", "echo $RCOLL_STORE_ADDR"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_EQ(o.out, "[0] 127.0.0.1:" + port + "\n");
}

TEST(Launcher, StoreHostIsBoundAndHandedToTheRanks) {
  // Any loopback address works without configuration on Linux: 127.0.0.2 is not the default.
  Outcome o = run_launcher({"-n", "1", "--store-host", "127.0.0.2", "--", "/bin/sh", "-c",
                            "echo $RCOLL_STORE_ADDR"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_EQ(o.out.rfind("[0] 127.0.0.2:", 0), 0u) << describe(o);
  Outcome bad = run_launcher({"-n", "1", "--store-host", "192.0.2.1", "--", "/bin/true"});
  EXPECT_EQ(bad.exit_code, 125) << describe(bad);
  EXPECT_NE(bad.err.find("cannot start the rendezvous store on 192.0.2.1:0"), std::string::npos)
      << describe(bad);
}

TEST(Launcher, RanksReachTheEmbeddedStore) {
  // Three copies of this binary connect to RCOLL_STORE_ADDR with RCOLL_JOB_TOKEN, publish
  // a key each and read everyone's.
  Outcome o = run_launcher({"-n", "3", "--timeout", "60", "--", self_exe()},
                           {std::string(kRoleVar) + "=store_client"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  for (int r = 0; r < 3; ++r) {
    const std::string p = "[" + std::to_string(r) + "] ";
    EXPECT_NE(o.out.find(p + "store ok\n"), std::string::npos) << describe(o);
    for (int peer = 0; peer < 3; ++peer) {
      EXPECT_NE(o.out.find(p + "got 'hello from " + std::to_string(peer) + "'\n"),
                std::string::npos)
          << describe(o);
    }
  }
}

}  // namespace
