// A thread that runs one job at a time for another thread, handed over in a
// few atomics: post() gives it a job, collect() takes the result, and the
// poster stays free meanwhile (to judge a job that takes too long, and stop
// whatever it waits on). After a job the thread yields for `idle_spin` before
// it sleeps on a condition variable, and post() wakes it only if it sleeps,
// so jobs that come back to back cost no system call. The NCCL transport's
// blocking communicators enqueue their groups on one (nccl_comm.cc).
//
// One poster at a time. States: idle -> posted (post) -> running (the thread
// takes it) -> done (it returns) -> idle (collect); withdraw() takes a posted
// job back before the thread begins it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "base/deadline.h"

namespace rcoll {

template <typename Job, typename Result>
class HandOff {
 public:
  // `start` runs first on the thread (a name, a current device); `run` runs each job.
  HandOff(std::function<void()> start, std::function<Result(Job&)> run, Clock::duration idle_spin)
      : start_(std::move(start)),
        run_(std::move(run)),
        idle_spin_(idle_spin),
        thread_([this] { loop(); }) {}
  // Waits for a job in progress to return (the owner makes it return first).
  ~HandOff() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  HandOff(const HandOff&) = delete;
  HandOff& operator=(const HandOff&) = delete;

  // Hands a job over; false (and nothing done) while the last one is not collected.
  bool post(Job job) {
    if (state_.load() != kIdle) return false;
    job_ = std::move(job);
    state_.store(kPosted);
    // The sleep: post() stores kPosted then reads asleep_, the thread stores
    // asleep_ then reads state_ (all sequentially consistent), so one of
    // them sees the other. Under the lock, it is in wait() or not yet there.
    if (asleep_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_one();
    }
    return true;
  }
  // Whether the job posted is done: its result into `result`, and the hand-off idle again.
  bool collect(Result& result) {
    if (state_.load(std::memory_order_acquire) != kDone) return false;
    result = std::move(result_);
    state_.store(kIdle, std::memory_order_relaxed);
    return true;
  }
  // Takes back a job the thread has not begun: true if it will never run.
  bool withdraw() {
    State posted = kPosted;
    return state_.compare_exchange_strong(posted, kIdle);
  }
  // Whether a job is running now.
  bool running() const { return state_.load() == kRunning; }

 private:
  enum State { kIdle, kPosted, kRunning, kDone };

  void loop() {
    if (start_) start_();
    while (next()) {
      result_ = run_(job_);
      state_.store(kDone, std::memory_order_release);
    }
  }
  // Begins the next job posted (true), or sees the end (false).
  bool next() {
    const Clock::time_point idle = Clock::now();
    for (;;) {
      if (quit_.load()) return false;
      State posted = kPosted;
      if (state_.load(std::memory_order_relaxed) == kPosted &&
          state_.compare_exchange_strong(posted, kRunning, std::memory_order_acquire)) {
        return true;
      }
      if (Clock::now() - idle < idle_spin_) {
        std::this_thread::yield();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      asleep_.store(true);
      cv_.wait(lock, [this] { return quit_.load() || state_.load() == kPosted; });
      asleep_.store(false);
    }
  }

  std::function<void()> start_;
  std::function<Result(Job&)> run_;
  const Clock::duration idle_spin_;
  Job job_{};        // written by post() in kIdle only, read by the thread in kRunning
  Result result_{};  // written by the thread in kRunning, read by collect() in kDone
  std::atomic<State> state_{kIdle};
  std::atomic<bool> asleep_{false};
  std::atomic<bool> quit_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;  // last: started once the rest is
};

}  // namespace rcoll
