#include "runtime/epoch_watch.h"

#include <utility>

namespace rcoll {

EpochWatch::EpochWatch(std::chrono::milliseconds renew, std::chrono::milliseconds retry_after)
    : renew_(renew), retry_after_(retry_after) {}

EpochWatch::~EpochWatch() { stop(); }

void EpochWatch::watch(std::shared_ptr<Store> store, uint32_t epoch, std::string failed_key,
                       std::string fatal_key) {
  std::lock_guard<std::mutex> lock(mu_);
  store_ = std::move(store);
  epoch_ = epoch;
  failed_key_ = std::move(failed_key);
  fatal_key_ = std::move(fatal_key);
  ++generation_;
  failed_ = false;
  fatal_ = false;
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { run(); });
  cv_.notify_all();
}

bool EpochWatch::failed(uint32_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_ && epoch_ == epoch;
}

bool EpochWatch::fatal(uint32_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_ && epoch_ == epoch;
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
    if (!store_ || fatal_) {
      // Nothing to wait for until the next watch().
      const uint64_t seen = generation_;
      cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      continue;
    }
    auto store = store_;
    const bool for_fatal = failed_;
    const std::string key = for_fatal ? fatal_key_ : failed_key_;
    const uint64_t generation = generation_;
    lock.unlock();
    // Only this thread waits, for as long as the store takes to answer.
    auto seen = store->watch(key, renew_, [this, generation] {
      return stopping_.load() || generation_.load() != generation;
    });
    lock.lock();
    if (generation != generation_) continue;
    if (seen.ok()) {
      (for_fatal ? fatal_ : failed_) = seen.value();
    } else {
      cv_.wait_for(lock, retry_after_, [&] { return stopping_ || generation_ != generation; });
    }
  }
}

}  // namespace rcoll
