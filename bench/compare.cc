#include "bench/compare.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <initializer_list>
#include <stdexcept>

#include "base/unique_fd.h"
#include "bench/child_process.h"
#include "bench/row_json.h"

namespace rcoll::bench {
namespace {

constexpr const char* kLibraries[] = {"gloo", "mpi", "nccl"};
constexpr int kLogTailLines = 12;  // of a failed baseline's output, repeated on stderr

using Clock = std::chrono::steady_clock;

// Where the baselines write. A temporary one is removed once every baseline
// succeeded (what they wrote is in rcoll-bench's table and JSON by then).
class WorkDir {
 public:
  explicit WorkDir(const std::string& dir) {
    if (!dir.empty()) {
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        throw std::runtime_error("--compare-dir " + dir +
                                 ": cannot create it: " + std::strerror(errno));
      }
      path_ = dir;
      return;
    }
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/rcoll-bench-compare-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      throw std::runtime_error("cannot create a temporary directory " + templ + ": " +
                               std::strerror(errno));
    }
    path_ = templ;
    temporary_ = true;
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  ~WorkDir() {
    if (!temporary_ || keep_) return;
    for (const auto& f : files_) ::unlink(f.c_str());
    ::rmdir(path_.c_str());
  }

  // A file in the directory, removed with it.
  std::string file(const std::string& name) {
    files_.push_back(path_ + "/" + name);
    return files_.back();
  }
  void keep() { keep_ = true; }
  const std::string& path() const { return path_; }
  bool temporary() const { return temporary_; }

 private:
  std::string path_;
  bool temporary_ = false;
  bool keep_ = false;
  std::vector<std::string> files_;
};

// The first of `candidates` that is an executable, without "..": "" if none.
std::string first_executable(std::initializer_list<std::string> candidates) {
  for (const auto& c : candidates) {
    if (!is_executable(c)) continue;
    char resolved[PATH_MAX];
    return ::realpath(c.c_str(), resolved) != nullptr ? std::string(resolved) : c;
  }
  return "";
}

std::vector<std::string> baseline_argv(const CompareOptions& o, const std::string& library,
                                       const std::string& json) {
  std::vector<std::string> argv;
  const std::string n = std::to_string(o.ranks);
  if (library == "gloo") {
    argv = {o.programs.rcoll_run, "-n", n, "--", o.programs.gloo_bench};
  } else if (library == "nccl") {
    argv = {o.programs.rcoll_run, "-n", n, "--", o.programs.nccl_bench};
  } else {
    argv = {o.programs.mpirun};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    // The tcp BTL: MPI goes through TCP sockets on loopback, like rcoll's tcp transport and Gloo.
    argv.insert(argv.end(),
                {"--oversubscribe", "-np", n, "--mca", "btl", "tcp,self", o.programs.mpi_bench});
  }
  argv.insert(argv.end(), {"--op", o.op, "--sizes", o.sizes, "--iters", std::to_string(o.iters),
                           "--warmup", std::to_string(o.warmup), "--root", std::to_string(o.root),
                           "--time", to_string(o.timing), "--json", json});
  if (o.check) argv.push_back("--check");
  return argv;
}

std::deque<std::string> last_lines(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > n) lines.pop_front();
  }
  return lines;
}

BaselineResult run_one(const CompareOptions& o, const std::string& library, WorkDir& dir) {
  BaselineResult result;
  result.library = library;
  result.log = dir.file(library + ".log");
  const std::string json = dir.file(library + ".json");
  ::unlink(json.c_str());  // a file left by an earlier run must not pass for this one's
  UniqueFd log(::open(result.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!log.valid())
    throw std::runtime_error("cannot create " + result.log + ": " + std::strerror(errno));

  const std::vector<std::string> argv = baseline_argv(o, library, json);
  std::printf("# %s: %s\n", library.c_str(), command_line(argv).c_str());
  const auto t0 = Clock::now();
  const ChildExit exit = ChildProcess::start(argv, log.get()).wait(o.timeout);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string program = argv.front().substr(argv.front().rfind('/') + 1);
  if (!exit.ok()) {
    result.failure =
        program + " " + exit.describe() + (exit.timed_out ? " (--compare-timeout)" : "");
  } else {
    try {
      RowFile file = read_row_json(json);
      result.rows = std::move(file.rows);
      for (auto& r : result.rows) {
        if (r.library.empty()) r.library = library;
      }
      // Times measured another way would make the ratios meaningless.
      if (file.timing != to_string(o.timing)) {
        result.rows.clear();
        result.failure =
            file.timing.empty()
                ? library + ".json has no \"time\" (a baseline built before --time?); --time " +
                      to_string(o.timing) + " was asked for"
                : library + "'s rows were timed by --time " + file.timing + ", not --time " +
                      to_string(o.timing);
      }
    } catch (const std::runtime_error& e) {
      result.failure = program + " exited 0 but its rows cannot be read: " + e.what();
    }
  }
  if (result.ok()) {
    std::printf("# %s: %zu rows in %.1f s\n", library.c_str(), result.rows.size(), seconds);
    std::fflush(stdout);
    return result;
  }
  // One write, so that a launcher relaying stdout and stderr keeps it in one piece.
  char head[64];
  std::snprintf(head, sizeof(head), " failed after %.1f s: ", seconds);
  std::string msg = "rcoll-bench: --compare " + library + head + result.failure +
                    "; its columns show n/a.\n" + "rcoll-bench: " + library + "'s output is in " +
                    result.log + "; its last lines:\n";
  for (const auto& line : last_lines(result.log, kLogTailLines)) msg += "  | " + line + "\n";
  std::fflush(stdout);
  std::fputs(msg.c_str(), stderr);
  std::fflush(stderr);
  return result;
}

const Row* find_row(const std::vector<Row>& rows, const Row& like) {
  for (const auto& r : rows) {
    if (r.op == like.op && r.size == like.size) return &r;
  }
  return nullptr;
}

// A row's steal in whole percent; "-" where it has none.
std::string steal_cell(const Row* row) {
  return row && row->steal_pct >= 0 ? std::to_string(static_cast<int>(row->steal_pct + 0.5)) : "-";
}

}  // namespace

bool baseline_measures(std::string_view op) {
  return op == "allreduce" || op == "allgather" || op == "reduce_scatter" || op == "broadcast";
}

std::vector<std::string> parse_libraries(std::string_view list) {
  std::vector<std::string> libs;
  for (const std::string& name : split_list(list)) {
    if (std::find(std::begin(kLibraries), std::end(kLibraries), name) == std::end(kLibraries)) {
      throw UsageError("--compare: unknown library '" + name +
                       "' (gloo, mpi, nccl, or a comma list of them)");
    }
    if (std::find(libs.begin(), libs.end(), name) != libs.end()) {
      throw UsageError("--compare: '" + name + "' is listed twice");
    }
    libs.push_back(name);
  }
  return libs;
}

BaselinePrograms find_baseline_programs(const std::vector<std::string>& libraries) {
  BaselinePrograms p;
  const std::string here = executable_dir();
  if (here.empty())
    throw UsageError(
        "--compare: cannot tell where rcoll-bench is (/proc/self/exe), so not where its baselines "
        "are");
  auto sibling = [&](const std::string& library, const std::string& program,
                     const std::string& needs) {
    const std::string path = here + "/" + program;
    if (!is_executable(path)) {
      throw UsageError("--compare " + library + ": " + program + " is not built (no " + path +
                       "; it needs " + needs + " when rcoll is configured, then `ninja " + program +
                       "`)");
    }
    return path;
  };
  for (const auto& lib : libraries) {
    if (lib == "gloo") {
      p.gloo_bench = sibling(lib, "rcoll-gloo-bench", "Gloo (Debian package libgloo-dev)");
      p.rcoll_run = first_executable({here + "/rcoll-run", here + "/../tools/rcoll-run"});
      if (p.rcoll_run.empty()) {
        throw UsageError(
            "--compare gloo: rcoll-run, which starts rcoll-gloo-bench's ranks, is neither in " +
            here + " nor in " + here + "/../tools (build it: `ninja rcoll-run`)");
      }
    } else if (lib == "nccl") {
      p.nccl_bench = sibling(lib, "rcoll-nccl-bench", "NCCL and the CUDA toolkit");
      p.rcoll_run = first_executable({here + "/rcoll-run", here + "/../tools/rcoll-run"});
      if (p.rcoll_run.empty()) {
        throw UsageError("--compare nccl: rcoll-run, which starts rcoll-nccl-bench's ranks, is neither in " + here +
                         " nor in " + here + "/../tools (build it: `ninja rcoll-run`)");
      }
    } else if (lib == "mpi") {
      p.mpi_bench = sibling(lib, "rcoll-mpi-bench", "an MPI (Debian package libopenmpi-dev)");
      p.mpirun = find_on_path("mpirun");
      if (p.mpirun.empty())
        throw UsageError("--compare mpi: mpirun is not on PATH (Debian package openmpi-bin)");
    }
  }
  return p;
}

std::vector<BaselineResult> run_baselines(const CompareOptions& options) {
  WorkDir dir(options.dir);
  std::printf("# --compare: the same ops, sizes, iters, warmup and --time %s with",
              to_string(options.timing));
  for (const auto& lib : options.libraries) std::printf(" %s", lib.c_str());
  std::printf(", one after the other; their output (NAME.log) and rows (NAME.json) go to %s%s\n",
              dir.path().c_str(), dir.temporary() ? ", removed at the end unless one fails" : "");
  std::vector<BaselineResult> results;
  for (const auto& lib : options.libraries) {
    results.push_back(run_one(options, lib, dir));
    if (!results.back().ok()) dir.keep();
  }
  return results;
}

void print_comparison(const std::vector<Row>& rcoll_rows,
                      const std::vector<BaselineResult>& baselines, Timing timing) {
  auto cell = [](char* buf, size_t size, const char* fmt, double v) {
    std::snprintf(buf, size, fmt, v);
    return buf;
  };
  std::string who =
      "# rcoll: " + (rcoll_rows.empty() ? std::string("-") : rcoll_rows.front().transport);
  for (const auto& b : baselines) {
    who += "   " + b.library + ": " +
           (!b.ok()          ? "failed"
            : b.rows.empty() ? "-"
                             : b.rows.front().transport);
  }
  std::printf(
      "# comparison: busbw in GB/s; rcoll/LIB = rcoll's busbw / LIB's (> 1: rcoll faster); time in "
      "us (--time %s); steal %% = the host's CPU steal around each library's timing, rcoll's first "
      "(a cell timed through a steal episode is not a verdict)\n",
      to_string(timing));
  std::printf("%s\n", who.c_str());
  std::printf("# %14s %12s %12s", "op", "size (B)", "rcoll GB/s");
  for (const auto& b : baselines) std::printf(" %12s", (b.library + " GB/s").c_str());
  for (const auto& b : baselines) std::printf(" %12s", ("rcoll/" + b.library).c_str());
  std::printf(" %12s", "rcoll us");
  for (const auto& b : baselines) std::printf(" %12s", (b.library + " us").c_str());
  std::printf(" %12s\n", "steal %");

  for (const Row& r : rcoll_rows) {
    if (!baseline_measures(r.op)) continue;
    char buf[32];
    std::printf("  %14s %12llu %12.3f", r.op.c_str(), static_cast<unsigned long long>(r.size),
                r.busbw);
    // n/a: the library failed; "-": it has no row for this op and size.
    std::vector<const Row*> theirs;
    for (const auto& b : baselines) theirs.push_back(b.ok() ? find_row(b.rows, r) : nullptr);
    for (size_t i = 0; i < baselines.size(); ++i) {
      std::printf(" %12s", !baselines[i].ok() ? "n/a"
                           : theirs[i]        ? cell(buf, sizeof(buf), "%.3f", theirs[i]->busbw)
                                              : "-");
    }
    for (size_t i = 0; i < baselines.size(); ++i) {
      const bool have = theirs[i] && theirs[i]->busbw > 0;
      std::printf(" %12s", !baselines[i].ok() ? "n/a"
                           : have ? cell(buf, sizeof(buf), "%.2f", r.busbw / theirs[i]->busbw)
                                  : "-");
    }
    std::printf(" %12.2f", r.time_us);
    for (size_t i = 0; i < baselines.size(); ++i) {
      std::printf(" %12s", !baselines[i].ok() ? "n/a"
                           : theirs[i]        ? cell(buf, sizeof(buf), "%.2f", theirs[i]->time_us)
                                              : "-");
    }
    std::string steals = steal_cell(&r);
    for (size_t i = 0; i < baselines.size(); ++i)
      steals += "/" + (baselines[i].ok() ? steal_cell(theirs[i]) : "n/a");
    std::printf(" %12s\n", steals.c_str());
  }
  for (const auto& b : baselines) {
    if (!b.ok())
      std::printf("# %s: n/a: %s (its output: %s)\n", b.library.c_str(), b.failure.c_str(),
                  b.log.c_str());
  }
  std::printf("#\n");
  std::fflush(stdout);
}

}  // namespace rcoll::bench
