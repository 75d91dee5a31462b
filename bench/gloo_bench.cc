// rcoll-gloo-bench: rcoll-bench's table and JSON for Gloo (the system's
// libgloo) over Gloo's TCP transport on 127.0.0.1, float32 sum, so rcoll can be
// compared with the library PyTorch uses on CPUs. One process per rank, started
// by rcoll-run like rcoll-bench:
//
//   rcoll-run -n 4 -- rcoll-gloo-bench --op all --sizes 4K:64M --json gloo.json
//
// Gloo has several algorithms per op and no automatic choice between them; at
// every size each one is measured the same way as rcoll-bench measures an op
// (warmup, then iterations timed as --time says, max over ranks)
// and the row reports the fastest, named in the "algo" column. Each algorithm
// runs on a context (a full mesh of TCP pairs) of its own: with one shared
// context, Gloo's new-style ring allreduce ran ~100x slower at every size after
// AllreduceRingChunked had used the same pairs.
//
// Rendezvous: rcoll's TCP store (RCOLL_STORE_ADDR, as rcoll-run sets it)
// wrapped as a gloo::rendezvous::Store, or a Gloo FileStore in --store-dir DIR
// (or RCOLL_STORE_FILE) shared by all ranks.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/common/error.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench/baseline_args.h"
#include "bench/bench_pattern.h"
#include "bench/bench_report.h"
#include "rcoll/store.h"

namespace {

using rcoll::bench::BaselineConfig;
using rcoll::bench::Row;
using rcoll::bench::UsageError;

const std::vector<std::string> kOps = {"allreduce", "allgather", "reduce_scatter", "broadcast"};
// Every algorithm this program knows, per op; --algo picks a subset.
const std::vector<std::string> kAlgos = {"ring", "bcube", "ring_chunked", "halving_doubling",  // allreduce
                                         "allgather", "allgather_ring",                     // allgather
                                         "reduce_scatter_hd",                               // reduce_scatter
                                         "broadcast", "one_to_all"};                        // broadcast

std::string op_of(const std::string& algo) {
  if (algo == "allgather" || algo == "allgather_ring") return "allgather";
  if (algo == "reduce_scatter_hd") return "reduce_scatter";
  if (algo == "broadcast" || algo == "one_to_all") return "broadcast";
  return "allreduce";
}

std::string usage() {
  return "usage: rcoll-gloo-bench [options]   (one process per rank: rcoll-run -n N -- rcoll-gloo-bench ...)\n" +
         rcoll::bench::baseline_usage(kOps) +
         "  --algo LIST    Gloo algorithms to try, comma separated  [all]:\n"
         "                 allreduce: ring, bcube (gloo::allreduce), ring_chunked, halving_doubling;\n"
         "                 allgather: allgather (gloo::allgather), allgather_ring;\n"
         "                 reduce_scatter: reduce_scatter_hd (ReduceScatterHalvingDoubling);\n"
         "                 broadcast: broadcast (gloo::broadcast), one_to_all (BroadcastOneToAll)\n"
         "  --store-dir D  rendezvous in a Gloo FileStore in directory D shared by all ranks\n"
         "                 [default: rcoll's store at RCOLL_STORE_ADDR, else RCOLL_STORE_FILE]\n"
         "Each row reports the fastest algorithm of the op at that size.\n"
         "Exit: 0 ok, 1 wrong results (--check), 2 bad arguments, 3 Gloo or rendezvous error.\n";
}

// ------------------------------------------------------------ rendezvous

// rcoll's store seen through Gloo's store interface. Gloo expects get() to wait
// for the key.
class RcollStoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit RcollStoreAdapter(std::shared_ptr<rcoll::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    rcoll::throw_if_error(store_->set(key, rcoll::Bytes(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    rcoll::Bytes v = store_->get(key, kTimeout).take();
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kTimeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    rcoll::throw_if_error(store_->wait(keys, timeout));
  }

 private:
  static constexpr std::chrono::milliseconds kTimeout{60000};
  std::shared_ptr<rcoll::Store> store_;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 20)) throw UsageError(std::string(name) + "='" + v + "' is not a rank number");
  return static_cast<int>(x);
}

std::unique_ptr<gloo::rendezvous::Store> open_store(const std::string& store_dir, int size, std::string* what) {
  const char* addr = std::getenv("RCOLL_STORE_ADDR");
  const char* file = std::getenv("RCOLL_STORE_FILE");
  if (!store_dir.empty() || (addr == nullptr && file != nullptr)) {
    const std::string dir = store_dir.empty() ? file : store_dir;
    *what = "Gloo FileStore " + dir;
    return std::make_unique<gloo::rendezvous::FileStore>(dir);
  }
  if (addr != nullptr && *addr != '\0') {
    std::string a = addr;
    auto colon = a.rfind(':');
    if (colon == std::string::npos) throw UsageError("RCOLL_STORE_ADDR='" + a + "' is not HOST:PORT");
    rcoll::TcpStoreOptions o;
    o.host = a.substr(0, colon);
    o.port = static_cast<uint16_t>(std::atoi(a.c_str() + colon + 1));
    if (const char* token = std::getenv("RCOLL_JOB_TOKEN")) o.token = token;
    auto store = rcoll::connect_tcp_store(o).take();
    *what = "rcoll store " + a;
    return std::make_unique<RcollStoreAdapter>(rcoll::make_prefix_store(std::move(store), "rcoll-gloo-bench"));
  }
  if (size == 1) {
    *what = "private (1 rank)";
    return std::make_unique<gloo::rendezvous::HashStore>();
  }
  throw UsageError("no rendezvous: run under rcoll-run (RCOLL_STORE_ADDR) or pass --store-dir DIR");
}

// ------------------------------------------------------------ the benchmark

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// One way of running the op on the buffers of the current size.
struct Candidate {
  std::string name;
  bool in_place;               // reads its input from, and writes the result to, the output buffer
  std::function<void()> run;
};

// Connects a new context (a full mesh of pairs) under a name all ranks agree on.
using Connect = std::function<std::shared_ptr<gloo::Context>(const std::string& name)>;

class GlooBench {
 public:
  GlooBench(Connect connect, const BaselineConfig& cfg, std::vector<std::string> algos)
      : connect_(std::move(connect)), ctx_(connect_("control")), cfg_(cfg), algos_(std::move(algos)),
        rank_(ctx_->rank), n_(ctx_->size) {}

  // nullopt when the size holds no element (Gloo's algorithms need at least one).
  std::optional<Row> run(const std::string& op, uint64_t size);
  void barrier() {
    gloo::BarrierOptions o(ctx_);
    o.setTag(next_tag());
    gloo::barrier(o);
  }
  double reduce_scalar(double v, bool max) {
    gloo::AllreduceOptions o(ctx_);
    o.setOutput(&v, 1);
    o.setReduceFunction(max ? static_cast<ReduceFn>(&gloo::max<double>) : static_cast<ReduceFn>(&gloo::sum<double>));
    o.setTag(next_tag());
    gloo::allreduce(o);
    return v;
  }

 private:
  bool wanted(const std::string& algo) const {
    return std::find(algos_.begin(), algos_.end(), algo) != algos_.end();
  }
  uint32_t next_tag() { return tag_++; }
  // The algorithm's own context, connected on first use (in the same order on every rank).
  std::shared_ptr<gloo::Context> context_for(const std::string& algo) {
    auto& c = contexts_[algo];
    if (!c) c = connect_(algo);
    return c;
  }
  std::vector<Candidate> candidates(const std::string& op);
  uint64_t check(const std::string& op, const Candidate& c);

  float pattern(int salt, int r, uint64_t i) const {
    return static_cast<float>(rcoll::bench::pattern_value(r, i, salt, rcoll::bench::Reduction::kSum, false));
  }
  float reduced(int salt, uint64_t i) const {
    return static_cast<float>(rcoll::bench::reduce_pattern(n_, i, salt, rcoll::bench::Reduction::kSum, false));
  }
  template <typename F>
  static void fill(std::vector<float>& v, size_t count, F value_of) {
    for (size_t i = 0; i < count; ++i) v[i] = value_of(i);
  }
  template <typename F>
  uint64_t verify(const std::string& op, const float* p, size_t count, F want_of) const {
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      if (p[i] != want_of(i) && ++wrong <= 5) {
        std::fprintf(stderr, "rcoll-gloo-bench: rank %d: %s of %zu elements: element %zu is %g, expected %g\n", rank_,
                     op.c_str(), count_, i, static_cast<double>(p[i]), static_cast<double>(want_of(i)));
      }
    }
    return wrong;
  }

  Connect connect_;
  std::shared_ptr<gloo::Context> ctx_;  // barriers and the max / sum of results
  std::map<std::string, std::shared_ptr<gloo::Context>> contexts_;
  const BaselineConfig& cfg_;
  std::vector<std::string> algos_;
  const int rank_, n_;
  uint32_t tag_ = 1;

  // The current size's buffers and Gloo's old-style algorithm objects built on them.
  size_t count_ = 0;  // per-rank elements for allgather / reduce_scatter, else buffer elements
  std::vector<float> in_, out_;
  std::vector<std::unique_ptr<gloo::Algorithm>> algorithms_;
};

constexpr int salt_of(std::string_view op) {
  return op == "allreduce" ? 1 : op == "allgather" ? 2 : op == "reduce_scatter" ? 3 : 4;
}

std::vector<Candidate> GlooBench::candidates(const std::string& op) {
  std::vector<Candidate> c;
  const size_t n = static_cast<size_t>(n_);
  const int count = static_cast<int>(count_);
  float* in = in_.data();
  float* out = out_.data();
  auto keep = [&](std::unique_ptr<gloo::Algorithm> a) {
    gloo::Algorithm* raw = a.get();
    algorithms_.push_back(std::move(a));
    return [raw] { raw->run(); };
  };
  if (op == "allreduce") {
    for (auto [name, algo] : {std::pair{"ring", gloo::AllreduceOptions::Algorithm::RING},
                              std::pair{"bcube", gloo::AllreduceOptions::Algorithm::BCUBE}}) {
      if (!wanted(name)) continue;
      c.push_back({name, false, [this, cx = context_for(name), algo, in, out] {
                     gloo::AllreduceOptions o(cx);
                     o.setAlgorithm(algo);
                     o.setInput(in, count_);
                     o.setOutput(out, count_);
                     o.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
                     o.setTag(next_tag());
                     gloo::allreduce(o);
                   }});
    }
    if (wanted("ring_chunked")) {
      c.push_back({"ring_chunked", true, keep(std::make_unique<gloo::AllreduceRingChunked<float>>(context_for("ring_chunked"), std::vector<float*>{out}, count))});
    }
    if (wanted("halving_doubling")) {
      c.push_back({"halving_doubling", true,
                   keep(std::make_unique<gloo::AllreduceHalvingDoubling<float>>(context_for("halving_doubling"), std::vector<float*>{out}, count))});
    }
  } else if (op == "allgather") {
    if (wanted("allgather")) {
      c.push_back({"allgather", false, [this, cx = context_for("allgather"), in, out, n] {
                     gloo::AllgatherOptions o(cx);
                     o.setInput(in, count_);
                     o.setOutput(out, count_ * n);
                     o.setTag(next_tag());
                     gloo::allgather(o);
                   }});
    }
    if (wanted("allgather_ring")) {
      c.push_back({"allgather_ring", false,
                   keep(std::make_unique<gloo::AllgatherRing<float>>(context_for("allgather_ring"), std::vector<const float*>{in}, out, count))});
    }
  } else if (op == "reduce_scatter") {
    // Gloo's only reduce-scatter works in place: the input is in out_ and rank
    // r's block of the result lands at its front.
    if (wanted("reduce_scatter_hd")) {
      c.push_back({"reduce_scatter_hd", true,
                   keep(std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
                       context_for("reduce_scatter_hd"), std::vector<float*>{out}, static_cast<int>(count_ * n), std::vector<int>(n, count)))});
    }
  } else if (op == "broadcast") {
    if (wanted("broadcast")) {
      c.push_back({"broadcast", true, [this, cx = context_for("broadcast"), out] {
                     gloo::BroadcastOptions o(cx);
                     o.setOutput(out, count_);
                     o.setRoot(cfg_.root);
                     o.setTag(next_tag());
                     gloo::broadcast(o);
                   }});
    }
    if (wanted("one_to_all")) {
      c.push_back({"one_to_all", true,
                   keep(std::make_unique<gloo::BroadcastOneToAll<float>>(context_for("one_to_all"), std::vector<float*>{out}, count_, cfg_.root))});
    }
  }
  return c;
}

// Fresh inputs, outputs poisoned with (expected + 1), one more op, compare.
uint64_t GlooBench::check(const std::string& op, const Candidate& c) {
  const int salt = salt_of(op);
  const size_t n = static_cast<size_t>(n_), cnt = count_;
  if (op == "allreduce") {
    auto want = [&](size_t i) { return reduced(salt, i); };
    if (c.in_place) {
      fill(out_, cnt, [&](size_t i) { return pattern(salt, rank_, i); });
    } else {
      fill(in_, cnt, [&](size_t i) { return pattern(salt, rank_, i); });
      fill(out_, cnt, [&](size_t i) { return want(i) + 1; });
    }
    barrier();
    c.run();
    return verify(op, out_.data(), cnt, want);
  }
  if (op == "allgather") {
    auto want = [&](size_t j) { return pattern(salt, static_cast<int>(j / cnt), j % cnt); };
    fill(in_, cnt, [&](size_t i) { return pattern(salt, rank_, i); });
    fill(out_, cnt * n, [&](size_t j) { return want(j) + 1; });
    barrier();
    c.run();
    return verify(op, out_.data(), cnt * n, want);
  }
  if (op == "reduce_scatter") {
    auto want = [&](size_t i) { return reduced(salt, static_cast<uint64_t>(rank_) * cnt + i); };
    fill(out_, cnt * n, [&](size_t i) { return pattern(salt, rank_, i); });
    barrier();
    c.run();
    return verify(op, out_.data(), cnt, want);
  }
  // broadcast
  auto want = [&](size_t i) { return pattern(salt, cfg_.root, i); };
  fill(out_, cnt, [&](size_t i) { return rank_ == cfg_.root ? want(i) : want(i) + 1; });
  barrier();
  c.run();
  return verify(op, out_.data(), cnt, want);
}

std::optional<Row> GlooBench::run(const std::string& op, uint64_t size) {
  const size_t n = static_cast<size_t>(n_);
  const bool per_rank = op == "allgather" || op == "reduce_scatter";
  count_ = per_rank ? size / sizeof(float) / n : size / sizeof(float);
  if (count_ == 0) return std::nullopt;
  const size_t total = per_rank ? count_ * n : count_;
  // Inputs hold the check pattern so the timed ops see ordinary values.
  const int salt = salt_of(op);
  in_.assign(op == "allreduce" || op == "allgather" ? count_ : 0, 0.0f);
  fill(in_, in_.size(), [&](size_t i) { return pattern(salt, rank_, i); });
  out_.assign(total, 0.0f);
  fill(out_, total, [&](size_t i) { return pattern(salt, rank_, i); });
  algorithms_.clear();
  std::vector<Candidate> cands = candidates(op);
  if (cands.empty()) throw UsageError("--algo selects no algorithm for " + op);

  double best_us = 0;
  size_t best = 0;
  for (size_t k = 0; k < cands.size(); ++k) {
    barrier();
    const double mine = rcoll::bench::time_per_op(cfg_.timing, cfg_.warmup, cfg_.iters,
                                                  cands[k].run, [this] { barrier(); });
    const double t = reduce_scalar(mine, true);
    if (k == 0 || t < best_us) {
      best_us = t;
      best = k;
    }
  }
  uint64_t wrong = 0;
  if (cfg_.check) wrong = static_cast<uint64_t>(reduce_scalar(static_cast<double>(check(op, cands[best])), false));
  algorithms_.clear();

  Row row = rcoll::bench::baseline_row(op, total, count_, cfg_.root, best_us, wrong, "gloo/tcp", "gloo", n_);
  row.algo = cands[best].name;
  return row;
}

int run_bench(const BaselineConfig& cfg, const std::vector<std::string>& algos, const std::string& store_dir) {
  const int size = env_int("RCOLL_WORLD_SIZE", 1);
  const int rank = env_int("RCOLL_RANK", 0);
  if (rank >= size) throw UsageError("RCOLL_RANK must be below RCOLL_WORLD_SIZE");
  if (cfg.root >= size) throw UsageError("--root " + std::to_string(cfg.root) + " is not a rank");

  std::string store_what;
  auto store = open_store(store_dir, size, &store_what);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  Connect connect = [&](const std::string& name) {
    gloo::rendezvous::PrefixStore prefixed(name, *store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(std::chrono::seconds(300));
    ctx->connectFullMesh(prefixed, device);
    return std::shared_ptr<gloo::Context>(std::move(ctx));
  };

  const bool leader = rank == 0;
  GlooBench bench(connect, cfg, algos);
  // An unwritable --json file is a bad argument: find out before measuring, on every rank.
  const double json_bad = leader && !rcoll::bench::json_file_writable(cfg.json, "rcoll-gloo-bench") ? 1 : 0;
  if (bench.reduce_scalar(json_bad, true) > 0) return 2;

  rcoll::bench::Report report(true, cfg.check, cfg.timing);
  if (leader) {
    std::string algo_list;
    for (const auto& a : algos) {
      if (std::find(cfg.ops.begin(), cfg.ops.end(), op_of(a)) != cfg.ops.end()) algo_list += (algo_list.empty() ? "" : ",") + a;
    }
    report.print_header(rcoll::bench::baseline_preamble(
        cfg,
        "rcoll-gloo-bench  Gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." +
            std::to_string(GLOO_VERSION_MINOR) + "." + std::to_string(GLOO_VERSION_PATCH) +
            " (system libgloo), TCP transport on 127.0.0.1",
        "ranks: " + std::to_string(size) + "  transport: gloo/tcp  ops: " +
            rcoll::bench::op_list(cfg) + "  rendezvous: " + store_what,
        "algorithms tried: " + algo_list,
        "max over ranks, fastest algorithm; busbw as in nccl-tests"));
  }
  uint64_t wrong = 0;
  for (const auto& op : cfg.ops) {
    for (uint64_t s : cfg.sizes) {
      auto row = bench.run(op, s);
      if (!row) {
        if (leader) std::printf("# %s of %llu bytes: no whole element per rank, skipped\n", op.c_str(), static_cast<unsigned long long>(s));
        continue;
      }
      wrong += row->wrong;
      if (leader) report.add(std::move(*row));
    }
  }
  if (leader) {
    report.print_footer(0, 0, size, "gloo/tcp");
    if (!cfg.json.empty()) report.write_json(cfg.json, 0, 0, size);
  }
  // The others wait for rank 0's files: a launcher stops every rank once one exits non-zero.
  bench.barrier();
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Every rank finds the same fault in its arguments; one says so.
  const char* rank = std::getenv("RCOLL_RANK");
  const bool first = rank == nullptr || std::string(rank) == "0";
  BaselineConfig cfg;
  std::vector<std::string> algos = kAlgos;
  std::string store_dir;
  const auto gloo_flags = [&](rcoll::bench::ArgReader& a) {
    if (a.flag() == "--store-dir") {
      store_dir = a.value();
      return true;
    }
    if (a.flag() == "--algo") {
      std::string v = a.value();
      if (v == "all") return true;
      algos.clear();
      for (const std::string& name : rcoll::bench::split_list(v)) {
        if (std::find(kAlgos.begin(), kAlgos.end(), name) == kAlgos.end()) {
          throw UsageError("--algo: unknown Gloo algorithm '" + name + "'");
        }
        algos.push_back(name);
      }
      return true;
    }
    return false;
  };
  if (auto code = rcoll::bench::parse_baseline_or_exit(argc, argv, kOps, gloo_flags, "rcoll-gloo-bench", usage(), first, &cfg))
    return *code;
  try {
    return run_bench(cfg, algos, store_dir);
  } catch (const UsageError& e) {
    if (first) std::fprintf(stderr, "rcoll-gloo-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // gloo::Exception, rcoll::Error from the store, an unwritable --json file.
    std::fprintf(stderr, "rcoll-gloo-bench: %s\n", e.what());
    return 3;
  }
}
