// Watches the store for "epoch e failed" announcements on a thread of its own,
// so the progress thread never waits on the store to find out. The liveness
// channel carries the same news within milliseconds; this is the fallback for
// ranks whose liveness notice was lost. Once the epoch failed, it watches for
// the epoch's fatal notice (a failure no recovery fixes), which every wait of
// the recovery asks about.
//
// It waits on the key (Store::watch): with the built-in TCP store that is one
// request parked at the server, answered the moment a peer writes the key, and
// renewed every `renew` (10 s) while nothing happens. It used to check the key
// every 20 ms: 50 requests a second per rank, most of what the store served in
// steady state at 64 ranks and more. (Before that the progress thread checked
// it itself, and a stalled store host froze every rank's data plane.)
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
  // Each wait on the store lasts at most `renew`; after a store error the
  // next one starts `retry_after` later.
  explicit EpochWatch(std::chrono::milliseconds renew, std::chrono::milliseconds retry_after);
  ~EpochWatch();
  EpochWatch(const EpochWatch&) = delete;
  EpochWatch& operator=(const EpochWatch&) = delete;

  // From now on, watch `failed_key` in `store` (for the data-plane epoch
  // `epoch`), and once it is there `fatal_key`: a wait on the previous keys
  // ends at once. Starts the thread on first use.
  void watch(std::shared_ptr<Store> store, uint32_t epoch, std::string failed_key,
             std::string fatal_key);
  // Has the failed key been seen for `epoch`? The fatal key? Never block.
  bool failed(uint32_t epoch) const;
  bool fatal(uint32_t epoch) const;
  // Stops and joins the thread: a wait in progress ends within 20 ms with the
  // TCP store (other stores: when their call returns).
  void stop();

 private:
  void run();

  const std::chrono::milliseconds renew_;
  const std::chrono::milliseconds retry_after_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Store> store_;
  uint32_t epoch_ = 0;
  std::string failed_key_;
  std::string fatal_key_;
  // Bumped by watch(): a wait for an older target ends, its result dropped.
  // Atomic (and `stopping_`) so the wait's cancel test reads them unlocked.
  std::atomic<uint64_t> generation_{0};
  bool failed_ = false;
  bool fatal_ = false;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace rcoll
