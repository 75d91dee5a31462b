// rcoll-mpi-bench: rcoll-bench's table and JSON for MPI's collectives
// (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast), float32
// sum, measured the same way: warmup, then iterations timed as --time says
// (bench_report.h: Timing), max over ranks. With Open MPI on one host, force
// the TCP path so the comparison with rcoll's TCP transport is fair:
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl tcp,self
//          rcoll-mpi-bench --op all --sizes 4K:64M --json mpi.json
#include <mpi.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/baseline_args.h"
#include "bench/bench_pattern.h"
#include "bench/bench_report.h"

namespace {

using rcoll::bench::BaselineConfig;
using rcoll::bench::Row;
using rcoll::bench::UsageError;

const std::vector<std::string> kOps = {"allreduce", "allgather", "reduce_scatter", "broadcast"};

std::string usage() {
  return "usage: mpirun [--allow-run-as-root] -np N [--mca btl tcp,self] rcoll-mpi-bench [options]\n" +
         rcoll::bench::baseline_usage(kOps) +
         "Ops: MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast (out of place but Bcast).\n"
         "Exit: 0 ok, 1 wrong results (--check), 2 bad arguments, 3 MPI error.\n";
}

// An MPI call failed (the communicator returns errors instead of aborting).
class MpiError : public std::runtime_error {
 public:
  MpiError(const char* what, int rc) : std::runtime_error(message(what, rc)) {}

 private:
  static std::string message(const char* what, int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return std::string(what) + " failed: " + std::string(text, static_cast<size_t>(len));
  }
};

void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw MpiError(what, rc);
}

class MpiBench {
 public:
  MpiBench(const BaselineConfig& cfg, int rank, int size) : cfg_(cfg), rank_(rank), n_(size) {}
  Row run(const std::string& op, uint64_t size, const std::string& transport);

 private:
  void run_once(const std::string& op);
  uint64_t check(const std::string& op);
  float pattern(int salt, int r, uint64_t i) const {
    return static_cast<float>(rcoll::bench::pattern_value(r, i, salt, rcoll::bench::Reduction::kSum, false));
  }
  float reduced(int salt, uint64_t i) const {
    return static_cast<float>(rcoll::bench::reduce_pattern(n_, i, salt, rcoll::bench::Reduction::kSum, false));
  }
  template <typename F>
  uint64_t verify(const std::string& op, size_t count, F want_of) const {
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      if (out_[i] != want_of(i) && ++wrong <= 5) {
        std::fprintf(stderr, "rcoll-mpi-bench: rank %d: %s: element %zu is %g, expected %g\n", rank_, op.c_str(), i,
                     static_cast<double>(out_[i]), static_cast<double>(want_of(i)));
      }
    }
    return wrong;
  }

  const BaselineConfig& cfg_;
  const int rank_, n_;
  size_t count_ = 0;  // per rank for allgather / reduce_scatter, else buffer elements
  std::vector<float> in_, out_;
};

int salt_of(const std::string& op) {
  return op == "allreduce" ? 1 : op == "allgather" ? 2 : op == "reduce_scatter" ? 3 : 4;
}

void MpiBench::run_once(const std::string& op) {
  const int c = static_cast<int>(count_);
  if (op == "allreduce") {
    mpi_check(MPI_Allreduce(in_.data(), out_.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  } else if (op == "allgather") {
    mpi_check(MPI_Allgather(in_.data(), c, MPI_FLOAT, out_.data(), c, MPI_FLOAT, MPI_COMM_WORLD), "MPI_Allgather");
  } else if (op == "reduce_scatter") {
    mpi_check(MPI_Reduce_scatter_block(in_.data(), out_.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
              "MPI_Reduce_scatter_block");
  } else {
    mpi_check(MPI_Bcast(out_.data(), c, MPI_FLOAT, cfg_.root, MPI_COMM_WORLD), "MPI_Bcast");
  }
}

// Fresh inputs, outputs poisoned with (expected + 1), one more op, compare.
uint64_t MpiBench::check(const std::string& op) {
  const int salt = salt_of(op);
  const size_t n = static_cast<size_t>(n_), cnt = count_;
  auto fill = [](std::vector<float>& v, size_t count, auto value_of) {
    for (size_t i = 0; i < count; ++i) v[i] = value_of(i);
  };
  if (op == "allreduce") {
    auto want = [&](size_t i) { return reduced(salt, i); };
    fill(out_, cnt, [&](size_t i) { return want(i) + 1; });
    run_once(op);
    return verify(op, cnt, want);
  }
  if (op == "allgather") {
    auto want = [&](size_t j) { return pattern(salt, static_cast<int>(j / cnt), j % cnt); };
    fill(out_, cnt * n, [&](size_t j) { return want(j) + 1; });
    run_once(op);
    return verify(op, cnt * n, want);
  }
  if (op == "reduce_scatter") {
    auto want = [&](size_t i) { return reduced(salt, static_cast<uint64_t>(rank_) * cnt + i); };
    fill(out_, cnt, [&](size_t i) { return want(i) + 1; });
    run_once(op);
    return verify(op, cnt, want);
  }
  auto want = [&](size_t i) { return pattern(salt, cfg_.root, i); };
  fill(out_, cnt, [&](size_t i) { return rank_ == cfg_.root ? want(i) : want(i) + 1; });
  run_once(op);
  return verify(op, cnt, want);
}

Row MpiBench::run(const std::string& op, uint64_t size, const std::string& transport) {
  const size_t n = static_cast<size_t>(n_);
  const bool per_rank = op == "allgather" || op == "reduce_scatter";
  count_ = per_rank ? size / sizeof(float) / n : size / sizeof(float);
  if (count_ > static_cast<size_t>(INT32_MAX)) throw UsageError("size " + std::to_string(size) + " is beyond MPI's int count");
  const size_t total = per_rank ? count_ * n : count_;
  const int salt = salt_of(op);
  in_.assign(op == "allreduce" ? count_ : op == "allgather" ? count_ : op == "reduce_scatter" ? total : 0, 0.0f);
  for (size_t i = 0; i < in_.size(); ++i) in_[i] = pattern(salt, rank_, i);
  out_.assign(op == "reduce_scatter" ? count_ : total, 0.0f);
  if (op == "broadcast") {
    for (size_t i = 0; i < out_.size(); ++i) out_[i] = pattern(salt, rank_, i);
  }

  mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  double mine = rcoll::bench::time_per_op(
      cfg_.timing, cfg_.warmup, cfg_.iters, [&] { run_once(op); },
      [] { mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); });
  double time_us = 0;
  mpi_check(MPI_Allreduce(&mine, &time_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  unsigned long long wrong = 0;
  if (cfg_.check) {
    unsigned long long local = check(op);
    mpi_check(MPI_Allreduce(&local, &wrong, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  }

  return rcoll::bench::baseline_row(op, total, count_, cfg_.root, time_us, wrong, transport, "mpi", n_);
}

int run_bench(const BaselineConfig& cfg) {
  int rank = 0, size = 1;
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  if (cfg.root >= size) throw UsageError("--root " + std::to_string(cfg.root) + " is not a rank");
  const bool leader = rank == 0;
  // Open MPI passes --mca btl X to the ranks as OMPI_MCA_btl.
  const char* btl = std::getenv("OMPI_MCA_btl");
  const std::string transport = std::string("mpi") + (btl ? std::string("/") + btl : "");

  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string lib(version, static_cast<size_t>(len));
  lib = lib.substr(0, lib.find_first_of(",\n"));

  rcoll::bench::Report report(false, cfg.check, cfg.timing);
  if (leader) {
    report.print_header(rcoll::bench::baseline_preamble(
        cfg, "rcoll-mpi-bench  " + lib,
        "ranks: " + std::to_string(size) + "  transport: " + transport +
            "  ops: " + rcoll::bench::op_list(cfg),
        "out-of-place", "max over ranks; busbw as in nccl-tests"));
  }
  // An unwritable --json file is a bad argument: find out before measuring, on every rank.
  int json_bad = leader && !rcoll::bench::json_file_writable(cfg.json, "rcoll-mpi-bench") ? 1 : 0, any_bad = 0;
  mpi_check(MPI_Allreduce(&json_bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  if (any_bad) return 2;

  MpiBench bench(cfg, rank, size);
  uint64_t wrong = 0;
  for (const auto& op : cfg.ops) {
    for (uint64_t s : cfg.sizes) {
      Row row = bench.run(op, s, transport);
      wrong += row.wrong;
      if (leader) report.add(std::move(row));
    }
  }
  if (leader) {
    report.print_footer(0, 0, size, transport);
    if (!cfg.json.empty()) report.write_json(cfg.json, 0, 0, size);
  }
  mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");  // rank 0's files are written
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Arguments first, so that a bad one never starts MPI; every rank sees the
  // same ones, and only the first prints the complaint.
  const char* world_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const bool first = world_rank == nullptr || std::string(world_rank) == "0";
  BaselineConfig cfg;
  const auto no_extra = [](rcoll::bench::ArgReader&) { return false; };
  if (auto code = rcoll::bench::parse_baseline_or_exit(argc, argv, kOps, no_extra, "rcoll-mpi-bench", usage(), first, &cfg))
    return *code;
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rc = 0;
  try {
    rc = run_bench(cfg);
  } catch (const UsageError& e) {
    if (first) std::fprintf(stderr, "rcoll-mpi-bench: %s\n", e.what());
    rc = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rcoll-mpi-bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
  MPI_Finalize();
  return rc;
}
