// What rcoll-bench and the baseline benchmarks (rcoll-gloo-bench, rcoll-mpi-bench)
// share: size lists, argument parsing, timing statistics, nccl-tests bandwidth
// factors, the table and the JSON file. Nothing here talks to a network, so the
// baselines can use it without pulling in rcoll's runtime.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rcoll::bench {

// A bad command line: the message says which flag and why. Programs exit 2 on it.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "8", "4K", "64M", "1G", "4KiB", "4KB" (K/M/G are powers of 1024). nullopt if malformed.
std::optional<uint64_t> parse_bytes(std::string_view text);
// The parts of a comma list, empty ones included ("a,,b": "a", "", "b").
std::vector<std::string> split_list(std::string_view list);
// "MIN:MAX" (doubling from MIN up to MAX) or a comma list "4K,1M". Throws UsageError.
std::vector<uint64_t> parse_sizes(std::string_view text);
// A non-negative integer flag value. Throws UsageError naming the flag.
uint64_t parse_count(std::string_view flag, std::string_view text);

// Walks argv: "--name value" and "--name=value" both work.
class ArgReader {
 public:
  ArgReader(int argc, char** argv) : argc_(argc), argv_(argv) {}
  // Advances to the next argument; false at the end. Throws UsageError on a
  // positional argument.
  bool next();
  const std::string& flag() const { return flag_; }
  // The current flag's value. Throws UsageError if it has none.
  std::string value();
  [[noreturn]] void unknown() const;

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
  std::optional<std::string> inline_value_;
};

// Median of per-iteration times (the input is reordered).
double median(std::vector<double>& v);

// How a rank's time per op is measured (--time). Back-to-back ops let a rank
// that returns before its peers have the data (a broadcast's root, an eager
// send) run ahead of them, and their catch-up then lands in a few long
// iterations that the median does not see; the loop's wall time does.
enum class Timing {
  kMedian,  // ops back to back, each timed; the median
  kMean,    // ops back to back; the loop's wall time over the ops (nccl-tests)
  kSync,    // a barrier, not timed, before each timed op; the median (OSU's latency)
};

// "median", "mean", "sync". Throws UsageError naming --time otherwise.
Timing parse_timing(std::string_view text);
const char* to_string(Timing t);
// For a table's preamble: "median of per-iteration times per rank" and the like.
const char* describe(Timing t);
// The usage line of --time (ends in a newline).
extern const char* const kTimingUsage;

// This rank's time per op in microseconds: `warmup` untimed calls of op(),
// then `iters` (>= 0; none gives 0) timed as `how` says. sync() is a barrier
// across the ranks: it runs before the timed loop (kMean) or before each timed
// op (kSync).
template <typename Op, typename Sync>
double time_per_op(Timing how, int warmup, int iters, Op&& op, Sync&& sync) {
  using Clock = std::chrono::steady_clock;
  const auto us = [](Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
  };
  for (int i = 0; i < warmup; ++i) op();
  if (how == Timing::kMean) {
    sync();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) op();
    return iters > 0 ? us(Clock::now() - t0) / iters : 0;
  }
  std::vector<double> times;
  times.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    if (how == Timing::kSync) sync();
    const auto t0 = Clock::now();
    op();
    times.push_back(us(Clock::now() - t0));
  }
  return median(times);
}

// Steal time: CPU time the hypervisor gave to other guests while this VM's
// CPUs had work (/proc/stat, in ticks of 10 ms summed over the CPUs). On a
// shared VM it comes in episodes of seconds to minutes that slow every
// library, but not alike, and not the ones timed a minute apart alike; so a
// row carries the host's steal around its timing, and a comparison can set
// aside the cells timed through an episode (bench/results_table.py --max-steal).
struct CpuTicks {
  uint64_t total = 0;
  uint64_t steal = 0;
};
// The aggregate line of /proc/stat ("cpu  user nice system idle iowait irq
// softirq steal ..."); nullopt if `line` is not one.
std::optional<CpuTicks> parse_cpu_ticks(std::string_view line);

// This host's ticks now; nullopt where /proc/stat cannot be read.
std::optional<CpuTicks> read_cpu_ticks();

// The steal around each row, in percent of the host's CPU time. Readings are
// taken at the start (construction) and at the end of every row; row k spans
// readings k to k + 1. A 10-iteration 4 KiB loop lasts well under a tick, so
// a row's span grows over the rows after it (then, at the end of a run, over
// the ones before) until it covers kMinTicks summed over the CPUs (100 ms on
// 2 CPUs, 12.5 ms on 16): the steal of the phase the row was timed in. -1
// where the run never covered that much, or a reading was missing.
class StealMeter {
 public:
  static constexpr uint64_t kMinTicks = 20;
  explicit StealMeter(std::optional<CpuTicks> first) { readings_.push_back(first); }
  // `now`: read_cpu_ticks() at the end of the next row.
  void row_end(std::optional<CpuTicks> now) { readings_.push_back(now); }
  // Row k's steal over the readings so far (it may change as rows are added).
  double percent(size_t row) const;

 private:
  std::vector<std::optional<CpuTicks>> readings_;
};

// nccl-tests' bus bandwidth factor for an op at `nranks` ranks: allreduce
// 2(n-1)/n, allgather and reduce_scatter (n-1)/n, broadcast and sendrecv 1;
// 0 for ops without a bandwidth (barrier).
double bus_factor(std::string_view op, int nranks);

struct Row {
  std::string op;
  uint64_t size = 0;   // bytes, as nccl-tests defines them for the op
  uint64_t count = 0;  // elements, as nccl-tests prints them
  std::string dtype;
  std::string redop;   // "none" for ops that do not reduce
  int root = -1;
  double time_us = 0;  // max over ranks of each rank's time per op (Timing)
  double algbw = 0;    // GB/s = 1e9 B/s
  double busbw = 0;
  uint64_t wrong = 0;
  std::string transport;
  std::string algo;    // shown only by programs that choose among algorithms; written when set
  std::string library; // who measured it: "rcoll", "gloo", "mpi" (the JSON's "library"; omitted if empty)
  double steal_pct = -1;  // the host's CPU steal around its timing (StealMeter); -1: not measured
};

// Fills algbw and busbw from size, time_us and the op's factor.
void set_bandwidth(Row& row, int nranks);

// The nccl-tests-style table on stdout (rank 0 only), a row as soon as it is
// measured, and the JSON file at the end.
class Report {
 public:
  // `algo_column`: add an "algo" column to the table and an "algo" key to the JSON rows.
  // `checked`: #wrong holds a count (otherwise the table shows N/A).
  // `timing`: how time_us was measured (the JSON's "time").
  Report(bool algo_column, bool checked, Timing timing)
      : algo_column_(algo_column), checked_(checked), timing_(timing) {}
  // For tests: `first` instead of read_cpu_ticks(), and add_at() for add().
  Report(bool algo_column, bool checked, Timing timing, std::optional<CpuTicks> first)
      : algo_column_(algo_column), checked_(checked), timing_(timing), steal_(first) {}

  // Comment lines ("# ...") that describe the run, then the column headings.
  void print_header(const std::vector<std::string>& preamble) const;
  // Prints a row just measured and keeps it; its steal_pct (and that of the
  // rows added before it) comes from the host's steal around it (StealMeter).
  void add(Row row) { add_at(std::move(row), read_cpu_ticks()); }
  void add_at(Row row, std::optional<CpuTicks> now);
  // Keeps a row measured elsewhere (a baseline's), without printing it; its steal_pct is its own.
  void keep(Row row) { rows_.push_back(std::move(row)); }
  void print_footer(uint64_t recoveries, uint64_t fallbacks, int ranks, const std::string& transport) const;
  // Throws std::runtime_error naming the file if it cannot be written.
  void write_json(const std::string& path, uint64_t recoveries, uint64_t fallbacks, int ranks) const;
  const std::vector<Row>& rows() const { return rows_; }

 private:
  void print(const Row& row) const;
  bool algo_column_;
  bool checked_;
  Timing timing_;
  std::vector<Row> rows_;
  StealMeter steal_{read_cpu_ticks()};
  std::vector<size_t> measured_;  // rows_ index of each add()ed row, in the meter's order
};

}  // namespace rcoll::bench
