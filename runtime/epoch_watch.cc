#include "runtime/epoch_watch.h"

#include <utility>

namespace rcoll {

EpochWatch::EpochWatch(std::chrono::milliseconds interval) : interval_(interval) {}

EpochWatch::~EpochWatch() { stop(); }

void EpochWatch::watch(std::shared_ptr<Store> store, uint32_t epoch, std::string key) {
  std::lock_guard<std::mutex> lock(mu_);
  store_ = std::move(store);
  epoch_ = epoch;
  key_ = std::move(key);
  ++generation_;
  failed_ = false;
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { run(); });
  cv_.notify_all();
}

bool EpochWatch::failed(uint32_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_ && epoch_ == epoch;
}

void EpochWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EpochWatch::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (store_ && !failed_) {
      auto store = store_;
      const std::string key = key_;
      const uint64_t generation = generation_;
      lock.unlock();
      // May block for as long as the store takes to answer: only this thread waits.
      auto seen = store->check(key);
      lock.lock();
      if (generation == generation_ && seen.ok() && seen.value()) failed_ = true;
    }
    cv_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

}  // namespace rcoll
