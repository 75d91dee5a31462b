#include "bench/bench_report.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

namespace rcoll::bench {

std::optional<uint64_t> parse_bytes(std::string_view text) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
  uint64_t v = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  std::string_view unit = text.substr(i);
  int shift = 0;
  if (!unit.empty()) {
    switch (unit.front()) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 'b': case 'B': shift = 0; break;
      default: return std::nullopt;
    }
    if (shift > 0) unit.remove_prefix(1);
    if (unit == "iB" || unit == "ib") unit = "";  // KiB, MiB, GiB
    if (unit == "B" || unit == "b") unit = "";   // KB, MB, GB, plain B
    if (!unit.empty()) return std::nullopt;
  }
  if (shift > 0 && v > (UINT64_MAX >> shift)) return std::nullopt;
  return v << shift;
}

std::vector<uint64_t> parse_sizes(std::string_view text) {
  auto bytes = [&](std::string_view part) {
    auto v = parse_bytes(part);
    if (!v) {
      throw UsageError("--sizes: '" + std::string(part) + "' is not a size (examples: 8, 4K, 64M, 1G)");
    }
    return *v;
  };
  std::vector<uint64_t> sizes;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    uint64_t lo = bytes(text.substr(0, colon)), hi = bytes(text.substr(colon + 1));
    if (lo > hi) throw UsageError("--sizes " + std::string(text) + ": the minimum is above the maximum");
    if (lo == 0) {
      sizes.push_back(0);
      lo = 1;
    }
    for (uint64_t s = lo; s <= hi; s *= 2) {
      sizes.push_back(s);
      if (s > UINT64_MAX / 2) break;
    }
    return sizes;
  }
  for (const std::string& part : split_list(text)) sizes.push_back(bytes(part));
  return sizes;
}

std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    parts.emplace_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

uint64_t parse_count(std::string_view flag, std::string_view text) {
  std::string s(text);
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s.front() == '-' || errno != 0 || *end != '\0') {
    throw UsageError(std::string(flag) + ": '" + s + "' is not a non-negative integer");
  }
  return v;
}

bool ArgReader::next() {
  if (++i_ >= argc_) return false;
  std::string arg = argv_[i_];
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
    if (arg == "-h") {
      flag_ = "--help";
      inline_value_.reset();
      return true;
    }
    throw UsageError("unexpected argument '" + arg + "' (flags start with --)");
  }
  if (auto eq = arg.find('='); eq != std::string::npos) {
    flag_ = arg.substr(0, eq);
    inline_value_ = arg.substr(eq + 1);
  } else {
    flag_ = arg;
    inline_value_.reset();
  }
  return true;
}

std::string ArgReader::value() {
  if (inline_value_) {
    std::string v = std::move(*inline_value_);
    inline_value_.reset();
    return v;
  }
  if (i_ + 1 >= argc_) throw UsageError(flag_ + " needs a value");
  return argv_[++i_];
}

void ArgReader::unknown() const { throw UsageError("unknown flag " + flag_); }

double median(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  }
  return m;
}

Timing parse_timing(std::string_view text) {
  if (text == "median") return Timing::kMedian;
  if (text == "mean") return Timing::kMean;
  if (text == "sync") return Timing::kSync;
  throw UsageError("--time: '" + std::string(text) + "' is not median, mean or sync");
}

const char* to_string(Timing t) {
  switch (t) {
    case Timing::kMedian: return "median";
    case Timing::kMean: return "mean";
    case Timing::kSync: return "sync";
  }
  return "?";
}

const char* describe(Timing t) {
  switch (t) {
    case Timing::kMedian: return "median of per-iteration times per rank (ops back to back)";
    case Timing::kMean: return "loop wall time over iters per rank (ops back to back)";
    case Timing::kSync: return "median of per-iteration times per rank, a barrier before each op";
  }
  return "?";
}

const char* const kTimingUsage =
    "  --time T       median|mean|sync: a rank's time per op is the median of ops timed back to\n"
    "                 back, the loop's wall time over them (nccl-tests; counts a peer's catch-up\n"
    "                 that the median misses), or the median with a barrier before each op\n"
    "                 (OSU's latency)  [median]\n";

double bus_factor(std::string_view op, int nranks) {
  const double n = nranks;
  if (op == "allreduce") return nranks > 0 ? 2 * (n - 1) / n : 0;
  if (op == "allgather" || op == "reduce_scatter") return nranks > 0 ? (n - 1) / n : 0;
  if (op == "broadcast" || op == "sendrecv") return 1;
  return 0;
}

std::optional<CpuTicks> parse_cpu_ticks(std::string_view line) {
  if (line.substr(0, 4) != "cpu ") return std::nullopt;
  line.remove_prefix(4);
  CpuTicks t;
  int fields = 0;
  for (;;) {
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty()) break;
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
    if (ec != std::errc() || (end != line.data() + line.size() && *end != ' ')) return std::nullopt;
    line.remove_prefix(static_cast<size_t>(end - line.data()));
    ++fields;
    // user nice system idle iowait irq softirq steal; guest and guest_nice
    // (fields 9 and 10) are already counted in user and nice.
    if (fields <= 8) t.total += v;
    if (fields == 8) t.steal = v;
  }
  if (fields < 8) return std::nullopt;
  return t;
}

std::optional<CpuTicks> read_cpu_ticks() {
  std::ifstream f("/proc/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return std::nullopt;
  return parse_cpu_ticks(line);
}

double StealMeter::percent(size_t row) const {
  if (row + 1 >= readings_.size()) return -1;
  size_t a = row, b = row + 1;
  auto span = [&] {
    return readings_[a] && readings_[b]
               ? readings_[b]->total - std::min(readings_[a]->total, readings_[b]->total)
               : 0;
  };
  // Forward first: a short row at the start of a size sweep belongs with the
  // ones after it. (iowait may go down between readings: no negative spans.)
  while (span() < kMinTicks && (b + 1 < readings_.size() || a > 0)) {
    if (b + 1 < readings_.size()) {
      ++b;
    } else {
      --a;
    }
  }
  for (size_t k = a; k <= b; ++k)
    if (!readings_[k]) return -1;
  const CpuTicks& start = *readings_[a];
  const CpuTicks& end = *readings_[b];
  if (end.total < start.total + kMinTicks || end.steal < start.steal) return -1;
  const auto stolen = static_cast<double>(end.steal - start.steal);
  return 100.0 * stolen / static_cast<double>(end.total - start.total);
}

void set_bandwidth(Row& row, int nranks) {
  const double factor = bus_factor(row.op, nranks);
  row.algbw = factor > 0 && row.time_us > 0 ? static_cast<double>(row.size) / (row.time_us * 1e-6) / 1e9 : 0;
  row.busbw = row.algbw * factor;
}

namespace {

bool has_bandwidth(const Row& row) { return bus_factor(row.op, 2) > 0; }

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// JSON has no inf or nan.
double finite(double v) { return std::isfinite(v) ? v : 0; }

}  // namespace

void Report::print_header(const std::vector<std::string>& preamble) const {
  for (const auto& line : preamble) std::printf("# %s\n", line.c_str());
  std::printf("#\n");
  std::printf("# %14s %12s %12s %9s %6s %5s %12s %12s %12s %7s  %s\n", "op", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong", algo_column_ ? "transport   algo" : "transport");
  std::printf("# %14s %12s %12s %9s %6s %5s %12s %12s %12s\n", "", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)");
  std::fflush(stdout);
}

void Report::add_at(Row row, std::optional<CpuTicks> now) {
  steal_.row_end(now);
  measured_.push_back(rows_.size());
  // A later row can widen an earlier one's span: refresh them all (a few dozen).
  for (size_t k = 0; k < measured_.size(); ++k) {
    const double pct = steal_.percent(k);
    if (k + 1 < measured_.size())
      rows_[measured_[k]].steal_pct = pct;
    else
      row.steal_pct = pct;
  }
  print(row);
  rows_.push_back(std::move(row));
}

void Report::print(const Row& row) const {
  char algbw[32] = "-", busbw[32] = "-", wrong[32] = "N/A";
  if (has_bandwidth(row)) {
    std::snprintf(algbw, sizeof(algbw), "%.3f", row.algbw);
    std::snprintf(busbw, sizeof(busbw), "%.3f", row.busbw);
  }
  if (checked_) std::snprintf(wrong, sizeof(wrong), "%llu", static_cast<unsigned long long>(row.wrong));
  std::string transport = row.transport;
  if (algo_column_) {
    transport.resize(std::max<size_t>(transport.size(), 10), ' ');
    transport += "  " + row.algo;
  }
  std::printf("  %14s %12llu %12llu %9s %6s %5d %12.2f %12s %12s %7s  %s\n", row.op.c_str(),
              static_cast<unsigned long long>(row.size), static_cast<unsigned long long>(row.count), row.dtype.c_str(),
              row.redop.c_str(), row.root, row.time_us, algbw, busbw, wrong,
              transport.c_str());
  std::fflush(stdout);
}

void Report::print_footer(uint64_t recoveries, uint64_t fallbacks, int ranks, const std::string& transport) const {
  double sum = 0;
  int n = 0;
  uint64_t wrong = 0;
  for (const auto& r : rows_) {
    wrong += r.wrong;
    if (!has_bandwidth(r)) continue;
    sum += r.busbw;
    ++n;
  }
  if (checked_) std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong), wrong ? "FAILED" : "OK");
  std::printf("# recoveries: %llu  fallbacks: %llu  ranks: %d  transport: %s\n",
              static_cast<unsigned long long>(recoveries), static_cast<unsigned long long>(fallbacks), ranks,
              transport.c_str());
  std::printf("# Avg bus bandwidth    : %.3f\n", n > 0 ? sum / n : 0.0);
  std::printf("#\n");
  std::fflush(stdout);
}

void Report::write_json(const std::string& path, uint64_t recoveries, uint64_t fallbacks, int ranks) const {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) throw std::runtime_error("cannot write --json file '" + path + "': " + std::strerror(errno));
  std::fprintf(f.get(), "{\"rows\": [");
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    std::fprintf(f.get(),
                 "%s\n  {\"op\": %s, \"size\": %llu, \"count\": %llu, \"dtype\": %s, \"redop\": %s, "
                 "\"time_us\": %.3f, \"algbw\": %.6g, \"busbw\": %.6g, \"wrong\": %llu, \"transport\": %s",
                 i ? "," : "", json_string(r.op).c_str(), static_cast<unsigned long long>(r.size),
                 static_cast<unsigned long long>(r.count), json_string(r.dtype).c_str(), json_string(r.redop).c_str(),
                 finite(r.time_us), finite(r.algbw), finite(r.busbw), static_cast<unsigned long long>(r.wrong),
                 json_string(r.transport).c_str());
    if (algo_column_ || !r.algo.empty()) std::fprintf(f.get(), ", \"algo\": %s", json_string(r.algo).c_str());
    if (!r.library.empty()) std::fprintf(f.get(), ", \"library\": %s", json_string(r.library).c_str());
    if (r.steal_pct >= 0) std::fprintf(f.get(), ", \"steal_pct\": %.1f", r.steal_pct);
    std::fprintf(f.get(), "}");
  }
  std::fprintf(f.get(), "\n], \"recoveries\": %llu, \"fallbacks\": %llu, \"ranks\": %d, \"time\": \"%s\"}\n",
               static_cast<unsigned long long>(recoveries), static_cast<unsigned long long>(fallbacks), ranks,
               to_string(timing_));
  if (std::fflush(f.get()) != 0 || std::ferror(f.get())) {
    throw std::runtime_error("cannot write --json file '" + path + "': " + std::strerror(errno));
  }
}

}  // namespace rcoll::bench
