// Watches the store for "epoch e failed" announcements on a thread of its own,
// so the progress thread never waits on the store to find out. (It used to
// check the key itself every 20 ms; a stalled store host then froze every
// rank's data plane for as long as the store request timeout, 30 s, per check.)
// The liveness channel carries the same news within milliseconds; this is the
// fallback for ranks whose liveness notice was lost.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rcoll/store.h"

namespace rcoll {

class EpochWatch {
 public:
  // Checks the watched key every `interval`.
  explicit EpochWatch(std::chrono::milliseconds interval);
  ~EpochWatch();
  EpochWatch(const EpochWatch&) = delete;
  EpochWatch& operator=(const EpochWatch&) = delete;

  // From now on, watch `key` in `store` (for the data-plane epoch `epoch`).
  // Starts the thread on first use.
  void watch(std::shared_ptr<Store> store, uint32_t epoch, std::string key);
  // Has the watched key been seen for `epoch`? Never blocks.
  bool failed(uint32_t epoch) const;
  // Stops and joins the thread (waits for a store call in progress to return).
  void stop();

 private:
  void run();

  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Store> store_;
  uint32_t epoch_ = 0;
  std::string key_;
  uint64_t generation_ = 0;  // bumped by watch(): a result for an older target is dropped
  bool failed_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rcoll
