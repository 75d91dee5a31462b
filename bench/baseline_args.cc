#include "bench/baseline_args.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace rcoll::bench {

namespace {

int int_flag(const std::string& flag, const std::string& text, int lo) {
  const uint64_t v = parse_count(flag, text);
  if (v < static_cast<uint64_t>(lo) || v > (1u << 30)) {
    throw UsageError(flag + " " + text + " is out of range [" + std::to_string(lo) + ", 2^30]");
  }
  return static_cast<int>(v);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "|") + x;
  return s;
}

}  // namespace

BaselineConfig parse_baseline_args(int argc, char** argv, const std::vector<std::string>& ops,
                                   const std::function<bool(ArgReader&)>& extra) {
  BaselineConfig c;
  c.ops = {ops.front()};
  c.sizes = parse_sizes(c.sizes_text);
  ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& f = args.flag();
    if (f == "--help") {
      c.help = true;
    } else if (f == "--op") {
      const std::string v = args.value();
      if (v == "all") {
        c.ops = ops;
      } else if (std::find(ops.begin(), ops.end(), v) != ops.end()) {
        c.ops = {v};
      } else {
        throw UsageError("--op: '" + v + "' is not measured by this baseline (" + join(ops) + "|all)");
      }
    } else if (f == "--sizes") {
      c.sizes_text = args.value();
      c.sizes = parse_sizes(c.sizes_text);
    } else if (f == "--dtype") {
      const std::string v = args.value();
      if (v != "float32" && v != "float" && v != "f32" && v != "fp32") {
        throw UsageError("--dtype: this baseline measures float32 only, not '" + v + "'");
      }
    } else if (f == "--redop") {
      const std::string v = args.value();
      if (v != "sum") throw UsageError("--redop: this baseline measures sum only, not '" + v + "'");
    } else if (f == "--iters") {
      c.iters = int_flag(f, args.value(), 1);
    } else if (f == "--warmup") {
      c.warmup = int_flag(f, args.value(), 0);
    } else if (f == "--time") {
      c.timing = parse_timing(args.value());
    } else if (f == "--check") {
      c.check = true;
    } else if (f == "--json") {
      c.json = args.value();
      if (c.json.empty()) throw UsageError("--json needs a file name");
    } else if (f == "--root") {
      c.root = int_flag(f, args.value(), 0);
    } else if (!extra(args)) {
      args.unknown();
    }
  }
  return c;
}

std::optional<int> parse_baseline_or_exit(int argc, char** argv, const std::vector<std::string>& ops,
                                          const std::function<bool(ArgReader&)>& extra, const char* program,
                                          const std::string& usage, bool first, BaselineConfig* cfg) {
  try {
    *cfg = parse_baseline_args(argc, argv, ops, extra);
  } catch (const UsageError& e) {
    if (first) std::fprintf(stderr, "%s: %s\n%s", program, e.what(), usage.c_str());
    return 2;
  }
  if (cfg->help) {
    if (first) std::fputs(usage.c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

std::string op_list(const BaselineConfig& cfg) {
  std::string list;
  for (const auto& op : cfg.ops) list += (list.empty() ? "" : ",") + op;
  return list;
}

std::vector<std::string> baseline_preamble(const BaselineConfig& cfg, std::string title,
                                           std::string ranks, const std::string& setup_note,
                                           const std::string& time_note) {
  return {std::move(title), std::move(ranks),
          "sizes: " + cfg.sizes_text +
              "  dtype: float32  redop: sum  root: " + std::to_string(cfg.root),
          "warmup: " + std::to_string(cfg.warmup) + "  iters: " + std::to_string(cfg.iters) +
              "  check: " + (cfg.check ? "on" : "off") + "  " + setup_note,
          std::string("time: ") + describe(cfg.timing) + ", " + time_note};
}

std::string baseline_usage(const std::vector<std::string>& ops) {
  return "  --op OP        " + join(ops) + "|all  [" + ops.front() + "]\n" +
         "  --sizes LIST   MIN:MAX (doubling) or a comma list; suffixes K, M, G (x1024)  [8:64M]\n"
         "                 size = bytes per rank of the op's main buffer, as in nccl-tests\n"
         "  --dtype T      float32 only;  --redop R: sum only\n"
         "  --iters N      timed iterations per size  [20]\n"
         "  --warmup N     untimed iterations before them  [5]\n" +
         std::string(kTimingUsage) +
         "  --check        after the timed iterations run one more op and verify every element\n"
         "  --json FILE    rank 0 writes the rows as JSON (rcoll-bench's format)\n"
         "  --root R       broadcast root  [0]\n"
         "  --help         this text\n";
}

Row baseline_row(const std::string& op, uint64_t elements, uint64_t count, int root, double time_us, uint64_t wrong,
                 const std::string& transport, const std::string& library, int nranks) {
  Row row;
  row.op = op;
  row.size = elements * sizeof(float);
  row.count = count;
  row.dtype = "float32";
  row.redop = op == "allreduce" || op == "reduce_scatter" ? "sum" : "none";
  row.root = op == "broadcast" ? root : -1;
  row.time_us = time_us;
  row.wrong = wrong;
  row.transport = transport;
  row.library = library;
  set_bandwidth(row, nranks);
  return row;
}

bool json_file_writable(const std::string& path, const char* program) {
  if (path.empty()) return true;
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    std::fprintf(stderr, "%s: cannot write --json file '%s': %s\n", program, path.c_str(), std::strerror(errno));
    return false;
  }
  std::fclose(f);
  return true;
}

}  // namespace rcoll::bench
