// What rcoll-bench and its baselines share (bench/bench_report.h): how a
// rank's time per op is taken (--time) and the JSON that carries it to
// rcoll-bench --compare.
#include "bench/bench_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "bench/row_json.h"

namespace rcoll::bench {
namespace {

TEST(Timing, ParsesEachStatisticAndNamesTheFlagOtherwise) {
  EXPECT_EQ(parse_timing("median"), Timing::kMedian);
  EXPECT_EQ(parse_timing("mean"), Timing::kMean);
  EXPECT_EQ(parse_timing("sync"), Timing::kSync);
  for (Timing t : {Timing::kMedian, Timing::kMean, Timing::kSync})
    EXPECT_EQ(parse_timing(to_string(t)), t);
  try {
    parse_timing("Mean");
    FAIL() << "parse_timing(\"Mean\") returned";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--time: 'Mean'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_timing(""), UsageError);
}

// The order of calls: 'w' a warmup op, 'o' a timed op, 's' a barrier.
std::string calls(Timing how, int warmup, int iters) {
  std::string seen;
  int n = 0;
  time_per_op(
      how, warmup, iters, [&] { seen += n++ < warmup ? 'w' : 'o'; }, [&] { seen += 's'; });
  return seen;
}

TEST(TimePerOp, BarriersWhereEachStatisticSaysAndNowhereElse) {
  EXPECT_EQ(calls(Timing::kMedian, 2, 3), "wwooo");
  EXPECT_EQ(calls(Timing::kMean, 2, 3), "wwsooo");
  EXPECT_EQ(calls(Timing::kSync, 2, 3), "wwsososo");
  // No timed ops: the warmup and the mean's barrier still run, and the time is 0.
  EXPECT_EQ(calls(Timing::kMean, 2, 0), "wws");
  EXPECT_EQ(calls(Timing::kSync, 1, 0), "w");
  EXPECT_EQ(time_per_op(
                Timing::kMean, 0, 0, [] {}, [] {}),
            0.0);
  EXPECT_EQ(time_per_op(
                Timing::kMedian, 0, 0, [] {}, [] {}),
            0.0);
}

// One slow iteration of five (a peer's catch-up, say): the loop's time per op
// includes it, the median leaves it out.
TEST(TimePerOp, TheMeanCountsASlowIterationThatTheMedianLeavesOut) {
  auto slow_third = [] {
    int i = 0;
    return [i]() mutable {
      if (i++ == 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    };
  };
  const double mean = time_per_op(Timing::kMean, 0, 5, slow_third(), [] {});
  const double median = time_per_op(Timing::kMedian, 0, 5, slow_third(), [] {});
  EXPECT_GE(mean, 50'000.0 / 5);  // the sleep alone, spread over 5 ops
  EXPECT_LT(median, 10'000.0);    // four ops that do nothing
}

// A file under the test's temporary directory, removed when it goes.
class TempFile {
 public:
  TempFile() : path_(::testing::TempDir() + "rcoll_bench_report_test.XXXXXX") {
    const int fd = ::mkstemp(path_.data());
    if (fd >= 0) ::close(fd);
    made_ = fd >= 0;
  }
  ~TempFile() {
    if (made_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  bool made() const { return made_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool made_ = false;
};

TEST(Report, TheJsonSaysHowTimeWasMeasured) {
  TempFile tmp;
  ASSERT_TRUE(tmp.made()) << tmp.path() << ": " << std::strerror(errno);
  const std::string& path = tmp.path();
  for (Timing t : {Timing::kMedian, Timing::kMean, Timing::kSync}) {
    Report report(false, false, t);
    Row row;
    row.op = "broadcast";
    row.size = 4096;
    row.time_us = 12.5;
    set_bandwidth(row, 2);
    report.keep(row);
    report.write_json(path, 0, 0, 2);
    const RowFile file = read_row_json(path);
    EXPECT_EQ(file.timing, to_string(t));
    ASSERT_EQ(file.rows.size(), 1u);
    EXPECT_DOUBLE_EQ(file.rows[0].time_us, 12.5);
  }
}

// /proc/stat's first line on a VM with guest time: steal is the 8th number,
// and the total leaves out guest and guest_nice (already in user and nice).
TEST(CpuTicks, StealIsTheEighthFieldAndGuestTimeIsNotCountedTwice) {
  const auto t = parse_cpu_ticks("cpu  100 5 50 800 10 1 4 30 70 2");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->steal, 30u);
  EXPECT_EQ(t->total, 1000u);
  // Older kernels stop at steal.
  const auto old = parse_cpu_ticks("cpu 1 2 3 4 5 6 7 8");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->steal, 8u);
  EXPECT_EQ(old->total, 36u);
}

TEST(CpuTicks, RejectsWhatIsNotTheAggregateLine) {
  EXPECT_FALSE(parse_cpu_ticks("cpu0 100 5 50 800 10 1 4 30 0 0").has_value());  // one CPU
  EXPECT_FALSE(parse_cpu_ticks("intr 12345 0 0").has_value());
  EXPECT_FALSE(parse_cpu_ticks("cpu  100 5 50 800").has_value());  // no steal field
  EXPECT_FALSE(parse_cpu_ticks("cpu  100 5 50 800 x 1 4 30").has_value());
  EXPECT_FALSE(parse_cpu_ticks("").has_value());
  EXPECT_FALSE(parse_cpu_ticks("cpu  100 5 50 800 10 1 4 99999999999999999999999")
                   .has_value());  // beyond 64 bits
}

TEST(CpuTicks, ThisHostsReadingParsesWhereThereIsAProcStat) {
  if (access("/proc/stat", R_OK) != 0) GTEST_SKIP() << "no /proc/stat on this host";
  const auto t = read_cpu_ticks();
  ASSERT_TRUE(t.has_value());
  EXPECT_GT(t->total, 0u);
  EXPECT_LE(t->steal, t->total);
}

TEST(StealMeter, ALongRowIsMeasuredOverItselfAlone) {
  StealMeter m(CpuTicks{1000, 100});
  m.row_end(CpuTicks{1200, 150});  // 200 ticks, 50 of them stolen
  m.row_end(CpuTicks{1300, 150});  // 100 ticks, none
  EXPECT_DOUBLE_EQ(m.percent(0), 25.0);
  EXPECT_DOUBLE_EQ(m.percent(1), 0.0);
  EXPECT_EQ(m.percent(2), -1) << "no such row";
}

// Short rows take in the rows after them until they span 20 ticks; the last
// ones, with nothing after them, the rows before.
TEST(StealMeter, AShortRowSpansTheRowsAfterItThenBeforeIt) {
  StealMeter m(CpuTicks{0, 0});
  m.row_end(CpuTicks{5, 5});                       // row 0: 5 ticks, all stolen
  m.row_end(CpuTicks{10, 5});                      // row 1
  m.row_end(CpuTicks{30, 5});                      // row 2: 20 ticks, none stolen
  m.row_end(CpuTicks{31, 6});                      // row 3: 1 tick, stolen
  EXPECT_DOUBLE_EQ(m.percent(0), 5.0 / 30 * 100);  // readings 0..3
  EXPECT_DOUBLE_EQ(m.percent(1), 0.0);             // readings 1..3: 25 ticks
  EXPECT_DOUBLE_EQ(m.percent(2), 0.0);
  EXPECT_DOUBLE_EQ(m.percent(3), 1.0 / 21 * 100);  // readings 2..4, back over row 2
  m.row_end(CpuTicks{60, 6});                      // a later row widens row 3 forward instead
  EXPECT_DOUBLE_EQ(m.percent(3), 1.0 / 30 * 100);
}

TEST(StealMeter, NoFigureWhereTheRunIsTooShortOrAReadingIsMissing) {
  StealMeter short_run(CpuTicks{0, 0});
  short_run.row_end(CpuTicks{19, 10});
  EXPECT_EQ(short_run.percent(0), -1) << "19 ticks in all";
  StealMeter gap(CpuTicks{0, 0});
  gap.row_end(CpuTicks{100, 10});
  gap.row_end(std::nullopt);
  gap.row_end(CpuTicks{300, 10});
  EXPECT_DOUBLE_EQ(gap.percent(0), 10.0);
  EXPECT_EQ(gap.percent(1), -1);
  EXPECT_EQ(gap.percent(2), -1);
}

// iowait may go down between two readings (proc(5)), and the total with it.
TEST(StealMeter, ATotalThatWentDownIsNotTakenForALongSpan) {
  StealMeter m(CpuTicks{100, 10});
  m.row_end(CpuTicks{99, 10});
  m.row_end(CpuTicks{130, 13});
  EXPECT_DOUBLE_EQ(m.percent(0), 10.0);  // readings 0..2: 30 ticks, 3 stolen
}

TEST(Report, RowsCarryTheStealAroundThemIntoTheJson) {
  TempFile tmp;
  ASSERT_TRUE(tmp.made()) << tmp.path() << ": " << std::strerror(errno);
  Report report(false, false, Timing::kMedian, CpuTicks{0, 0});
  auto row_of = [](uint64_t size) {
    Row row;
    row.op = "allreduce";
    row.size = size;
    row.time_us = 10;
    set_bandwidth(row, 2);
    return row;
  };
  testing::internal::CaptureStdout();           // add() prints the table line
  report.add_at(row_of(4096), CpuTicks{2, 0});  // short: spans the next one too
  report.add_at(row_of(65536), CpuTicks{40, 19});
  report.add_at(row_of(1 << 20), CpuTicks{140, 19});
  Row baseline = row_of(4096);
  baseline.library = "mpi";
  baseline.steal_pct = 3.5;
  report.keep(baseline);
  Row unmeasured = row_of(8);
  unmeasured.library = "gloo";
  report.keep(unmeasured);
  testing::internal::GetCapturedStdout();
  report.write_json(tmp.path(), 0, 0, 2);
  const RowFile file = read_row_json(tmp.path());
  ASSERT_EQ(file.rows.size(), 5u);
  EXPECT_DOUBLE_EQ(file.rows[0].steal_pct, 19.0 / 40 * 100);
  EXPECT_DOUBLE_EQ(file.rows[1].steal_pct, 19.0 / 38 * 100);
  EXPECT_DOUBLE_EQ(file.rows[2].steal_pct, 0.0);
  EXPECT_DOUBLE_EQ(file.rows[3].steal_pct, 3.5) << "a kept row keeps its own";
  EXPECT_EQ(file.rows[4].steal_pct, -1) << "not written, read back as not measured";
}

}  // namespace
}  // namespace rcoll::bench
