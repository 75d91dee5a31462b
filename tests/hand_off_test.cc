// base/hand_off.h: the thread a blocking NCCL communicator enqueues its
// groups on. Jobs are handed over in order with no lost wake-up whether the
// thread spins or sleeps, a withdrawn job never runs, one in flight refuses a
// second, and destruction ends the thread whatever it was doing. (Run under
// ThreadSanitizer in CI.)
#include "base/hand_off.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

namespace rcoll {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// Polls collect() as the runtime does; false if nothing came within `limit`.
template <typename H, typename R>
bool await(H& h, R& result, Clock::duration limit = std::chrono::seconds(10)) {
  const Deadline until = Deadline::after(std::chrono::duration_cast<Millis>(limit));
  while (!h.collect(result)) {
    if (until.expired()) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(HandOff, EveryJobRunsOnceInOrderWhetherTheThreadSpinsOrSleeps) {
  std::atomic<int> started{0};
  std::atomic<int> runs{0};
  HandOff<int, int> h([&] { ++started; },
                      [&](int& job) {
                        ++runs;
                        return job * 2;
                      },
                      microseconds(200));
  std::mt19937 rng(7);
  // Gaps around the idle spin: some jobs find it spinning, some asleep, some
  // falling asleep (where a lost wake-up would show as a job never taken).
  std::uniform_int_distribution<int> gap_us(0, 600);
  for (int i = 0; i < 3000; ++i) {
    const int gap = gap_us(rng);
    if (gap > 0) std::this_thread::sleep_for(microseconds(gap));
    ASSERT_TRUE(h.post(i));
    int result = -1;
    ASSERT_TRUE(await(h, result)) << "job " << i << " never came back (a lost wake-up?)";
    ASSERT_EQ(result, 2 * i);
  }
  EXPECT_EQ(runs.load(), 3000);
  EXPECT_EQ(started.load(), 1);
}

TEST(HandOff, ASecondJobIsRefusedUntilTheFirstIsCollected) {
  std::atomic<bool> release{false};
  HandOff<int, int> h(
      nullptr,
      [&](int& job) {
        while (!release.load()) std::this_thread::sleep_for(microseconds(100));
        return job;
      },
      microseconds(200));
  ASSERT_TRUE(h.post(1));
  EXPECT_FALSE(h.post(2)) << "posted while one is in flight";
  const Deadline until = Deadline::after(Millis(5000));
  while (!h.running() && !until.expired()) std::this_thread::yield();
  EXPECT_TRUE(h.running());
  EXPECT_FALSE(h.withdraw()) << "a job already begun cannot be taken back";
  release = true;
  int result = 0;
  ASSERT_TRUE(await(h, result));
  EXPECT_EQ(result, 1);
  EXPECT_FALSE(h.running());
  EXPECT_TRUE(h.post(2)) << "collected: the next one is taken";
  ASSERT_TRUE(await(h, result));
  EXPECT_EQ(result, 2);
}

TEST(HandOff, AWithdrawnJobNeverRunsAndOneNotWithdrawnAlwaysDoes) {
  std::atomic<int> runs{0};
  HandOff<int, int> h(
      nullptr,
      [&](int& job) {
        ++runs;
        return job;
      },
      microseconds(50));
  int withdrawn = 0;
  for (int i = 0; i < 2000; ++i) {
    if (i % 3 == 0) std::this_thread::sleep_for(microseconds(120));  // asleep, often
    const int before = runs.load();
    ASSERT_TRUE(h.post(i));
    if (h.withdraw()) {
      ++withdrawn;
      std::this_thread::sleep_for(microseconds(i % 7 == 0 ? 300 : 0));
      ASSERT_EQ(runs.load(), before) << "job " << i << " ran after it was withdrawn";
      continue;
    }
    int result = -1;
    ASSERT_TRUE(await(h, result)) << "job " << i << " was not withdrawn and never came back";
    ASSERT_EQ(result, i);
  }
  EXPECT_EQ(runs.load(), 2000 - withdrawn);
}

TEST(HandOff, DestructionEndsTheThreadAsleepSpinningOrJustDone) {
  for (int i = 0; i < 50; ++i) {
    HandOff<int, int> h(
        nullptr, [](int& job) { return job; }, microseconds(i % 2 ? 0 : 200));
    if (i % 3 == 1) {
      ASSERT_TRUE(h.post(i));
      int result = 0;
      ASSERT_TRUE(await(h, result));
    } else if (i % 3 == 2) {
      ASSERT_TRUE(h.post(i));  // destroyed with its job done or about to be, uncollected
    }
    if (i % 5 == 0) std::this_thread::sleep_for(milliseconds(1));  // asleep by then
  }
}

}  // namespace
}  // namespace rcoll
