// The command line the baseline benchmarks (rcoll-gloo-bench, rcoll-mpi-bench)
// share with rcoll-bench, so that rcoll-bench --compare can pass them its own
// flags. The baselines measure float32 sum only.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_report.h"

namespace rcoll::bench {

struct BaselineConfig {
  std::vector<std::string> ops;  // in the order the program runs them
  std::vector<uint64_t> sizes;
  std::string sizes_text = "8:64M";
  int iters = 20;
  int warmup = 5;
  bool check = false;
  std::string json;
  int root = 0;
  Timing timing = Timing::kMedian;
  bool help = false;
};

// Parses --op (one of `ops`, or all), --sizes, --dtype float32, --redop sum,
// --iters, --warmup, --time, --check, --json, --root, --help. Any other flag goes to
// `extra`, which returns false if it does not know it. Throws UsageError.
BaselineConfig parse_baseline_args(int argc, char** argv, const std::vector<std::string>& ops,
                                   const std::function<bool(ArgReader&)>& extra);

// parse_baseline_args for `program` (its `usage` text): on a bad argument the
// complaint and the usage go to stderr, from the `first` rank only, and the
// result is exit code 2; --help prints the usage (first rank) and gives 0;
// otherwise fills *cfg and gives nullopt: go on.
std::optional<int> parse_baseline_or_exit(int argc, char** argv, const std::vector<std::string>& ops,
                                          const std::function<bool(ArgReader&)>& extra, const char* program,
                                          const std::string& usage, bool first, BaselineConfig* cfg);

// cfg.ops joined by commas, for a preamble.
std::string op_list(const BaselineConfig& cfg);

// A baseline's preamble: `title`, `ranks` (ranks, transport, ops), then the
// lines every baseline prints alike: sizes, dtype, redop and root; warmup,
// iters and check, then `setup_note`; the --time statistic, then `time_note`.
std::vector<std::string> baseline_preamble(const BaselineConfig& cfg, std::string title,
                                           std::string ranks, const std::string& setup_note,
                                           const std::string& time_note);

// The usage lines of those flags.
std::string baseline_usage(const std::vector<std::string>& ops);

// A row of a baseline's table (float32; allreduce and reduce_scatter sum):
// `elements` in the op's main buffer, `count` per rank as nccl-tests prints
// it, bandwidths filled from the time.
Row baseline_row(const std::string& op, uint64_t elements, uint64_t count, int root, double time_us, uint64_t wrong,
                 const std::string& transport, const std::string& library, int nranks);

// An unwritable --json file is a bad argument, to be found before measuring:
// true when `path` is empty or opens for appending; otherwise says why on
// stderr, naming `program`, and returns false.
bool json_file_writable(const std::string& path, const char* program);

}  // namespace rcoll::bench
