// rcoll::Store on top of the c10d::Store that PyTorch hands a backend (a
// PrefixStore over the job's TCPStore or FileStore), so rcoll's rendezvous,
// ledgers and abort notices live where PyTorch's do.
//
// c10d's TCPStore client runs one request at a time per connection, and
// rcoll blocks in waits on several threads (progress, recovery, liveness), so
// each calling thread gets its own clone of the store (a connection of its own)
// when the store can be cloned. Waits poll, so none holds a connection long.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "rcoll/store.h"

namespace rcoll::torch_backend {

class C10dStore : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  Status set(const std::string& key, const Bytes& value) override;
  Result<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<bool> check(const std::string& key) override;
  Status erase(const std::string& key) override;

 private:
  // Waits for every key by polling check(); kTimeout naming them when time runs out.
  Status poll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // This thread's connection: a clone of the store, or the shared one.
  c10::intrusive_ptr<c10d::Store> mine();

  c10::intrusive_ptr<c10d::Store> store_;
  std::mutex mu_;
  bool clone_failed_ = false;
  std::map<std::thread::id, c10::intrusive_ptr<c10d::Store>> per_thread_;
};

}  // namespace rcoll::torch_backend
