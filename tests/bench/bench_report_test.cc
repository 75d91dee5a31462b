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

}  // namespace
}  // namespace rcoll::bench
