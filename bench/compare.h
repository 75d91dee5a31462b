// rcoll-bench --compare: the same ops, sizes, iterations, warmup and --time measured by
// the baseline benchmarks built next to rcoll-bench (rcoll-gloo-bench: Gloo's
// TCP transport, under rcoll-run; rcoll-mpi-bench: Open MPI with the tcp BTL,
// under mpirun; rcoll-nccl-bench: raw NCCL on device buffers, under rcoll-run,
// for rcoll-bench --memory cuda), one after the other, by rank 0 once rcoll's own measurement is
// over and its communicator closed, so that no rcoll thread competes with them
// for the cores. Their rows are read back from their --json files and shown
// beside rcoll's.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_report.h"

namespace rcoll::bench {

// The ops both baselines measure (float32, sum only).
bool baseline_measures(std::string_view op);

// "gloo,mpi" -> {"gloo", "mpi"}; "nccl" too. Throws UsageError naming an unknown or repeated library.
std::vector<std::string> parse_libraries(std::string_view list);

// Where the programs are; empty for a library not asked for.
struct BaselinePrograms {
  std::string rcoll_run;  // starts rcoll-gloo-bench's ranks
  std::string gloo_bench;
  std::string mpirun;
  std::string mpi_bench;
  std::string nccl_bench;  // started by rcoll_run too
};

// Looks for the baselines next to rcoll-bench, rcoll-run there or in ../tools
// (the build tree's layout), mpirun on $PATH. Throws UsageError naming what is
// missing and how to get it.
BaselinePrograms find_baseline_programs(const std::vector<std::string>& libraries);

struct CompareOptions {
  std::vector<std::string> libraries;
  BaselinePrograms programs;
  int ranks = 0;
  std::string op;     // one op the baselines measure, or "all" (theirs)
  std::string sizes;  // rcoll-bench's --sizes text, which the baselines parse the same way
  int iters = 0;
  int warmup = 0;
  int root = 0;
  Timing timing = Timing::kMedian;
  bool check = false;
  std::string
      dir;  // for each library NAME.log (its output) and NAME.json; "" = a temporary directory
  std::chrono::seconds timeout{3600};  // per library
};

struct BaselineResult {
  std::string library;
  std::string failure;  // empty when it exited 0 and its JSON was read
  std::string log;      // its output
  std::vector<Row> rows;
  bool ok() const { return failure.empty(); }
};

// Runs each library in turn and reads its rows. Says on stdout what it starts
// and how long it took; a failure on stderr with the exit status, the log's
// path and its last lines. A temporary directory is removed when every library
// succeeded, and kept (its logs named) otherwise. Throws std::runtime_error
// when the directory or a log cannot be created.
std::vector<BaselineResult> run_baselines(const CompareOptions& options);

// One line per op the baselines measure and size: busbw of rcoll and each
// library, the ratios of rcoll's busbw to theirs, and each one's time (taken
// as `timing` says, which the heading names).
void print_comparison(const std::vector<Row>& rcoll_rows,
                      const std::vector<BaselineResult>& baselines, Timing timing);

}  // namespace rcoll::bench
