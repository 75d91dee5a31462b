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
  // 200 ticks, 50 of them stolen.
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{1200, 150}), 25.0);
  // The next row: 100 ticks, none stolen; the one before it is not counted.
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{1300, 150}), 0.0);
}

// iowait may go down between two readings (proc(5)), and the total with it.
TEST(StealMeter, ATotalThatWentDownIsNotTakenForALongSpan) {
  StealMeter m(CpuTicks{0, 0});
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{100, 10}), 10.0);
  // One tick less than the reading before: reaches back to 0, not to 100.
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{99, 10}), 10.0 / 99 * 100);
}

TEST(StealMeter, AShortRowReachesBackUntilItSpansTheMinimum) {
  StealMeter m(CpuTicks{0, 0});
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{100, 40}), 40.0);
  // Rows of under 20 ticks with no steal: each spans back to the latest
  // reading at least 20 ticks before its end.
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{105, 40}), 40.0 / 105 * 100);  // back to 0: 5 < 20
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{110, 40}),
                   40.0 / 110 * 100);                              // 10 < 20: back to 0
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{120, 40}), 0.0);  // 20 ticks since 100
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{121, 41}),
                   1.0 / 21 * 100);  // 21 since 100, not 16 since 105
}

TEST(StealMeter, NoFigureForARowWhoseSpanMissesAReading) {
  StealMeter first_missing(std::nullopt);
  EXPECT_EQ(first_missing.percent_at_row_end(CpuTicks{100, 10}), -1);
  EXPECT_DOUBLE_EQ(first_missing.percent_at_row_end(CpuTicks{200, 30}),
                   20.0);  // from the reading at 100
  StealMeter m(CpuTicks{0, 0});
  EXPECT_EQ(m.percent_at_row_end(std::nullopt), -1);
  EXPECT_EQ(m.percent_at_row_end(CpuTicks{100, 10}), -1);  // that row's start is unknown
  EXPECT_DOUBLE_EQ(m.percent_at_row_end(CpuTicks{150, 10}), 0.0);
  // No time passed: nothing to divide by.
  StealMeter still(CpuTicks{50, 5});
  EXPECT_EQ(still.percent_at_row_end(CpuTicks{50, 5}), -1);
}

TEST(Report, TheJsonCarriesTheStealWhereItWasMeasured) {
  TempFile tmp;
  ASSERT_TRUE(tmp.made()) << tmp.path() << ": " << std::strerror(errno);
  Report report(false, false, Timing::kMedian);
  for (double steal : {-1.0, 0.0, 37.5}) {
    Row row;
    row.op = "allreduce";
    row.size = 4096;
    row.time_us = 10;
    row.steal_pct = steal;
    set_bandwidth(row, 2);
    report.keep(row);
  }
  report.write_json(tmp.path(), 0, 0, 2);
  const RowFile file = read_row_json(tmp.path());
  ASSERT_EQ(file.rows.size(), 3u);
  EXPECT_EQ(file.rows[0].steal_pct, -1);  // not written, read back as not measured
  EXPECT_DOUBLE_EQ(file.rows[1].steal_pct, 0.0);
  EXPECT_DOUBLE_EQ(file.rows[2].steal_pct, 37.5);
}

}  // namespace
}  // namespace rcoll::bench
