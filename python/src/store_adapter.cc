#include "store_adapter.h"

#include <c10/util/Exception.h>

namespace rcoll::torch_backend {
namespace {

// c10d reports a wait that ran out as a DistStoreError whose text says so;
// anything else is a store failure.
Status from_exception(const std::exception& e, const std::string& what, bool may_be_timeout) {
  const std::string msg = e.what();
  const bool timed_out = may_be_timeout && (msg.find("imeout") != std::string::npos || msg.find("imed out") != std::string::npos);
  return Status(timed_out ? ErrorCode::kTimeout : ErrorCode::kStore, "PyTorch store: " + what + ": " + msg.substr(0, 400));
}

std::string join(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace

c10::intrusive_ptr<c10d::Store> C10dStore::mine() {
  std::lock_guard<std::mutex> lock(mu_);
  if (clone_failed_) return store_;
  auto it = per_thread_.find(std::this_thread::get_id());
  if (it != per_thread_.end()) return it->second;
  try {
    auto clone = store_->clone();
    per_thread_.emplace(std::this_thread::get_id(), clone);
    return clone;
  } catch (const std::exception&) {
    clone_failed_ = true;  // e.g. a HashStore: one shared connection it is
    return store_;
  }
}

Status C10dStore::set(const std::string& key, const Bytes& value) {
  try {
    mine()->set(key, value);
    return Status();
  } catch (const std::exception& e) {
    return from_exception(e, "set '" + key + "'", false);
  }
}

// Waits poll check() instead of calling c10d's wait(): rcoll waits in short
// slices (recovery looks around every 200 ms), and a c10d wait that runs out
// logs a socket warning each time; polling is silent and never ties up the
// connection past one round trip.
Status C10dStore::poll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  auto s = mine();
  for (;;) {
    if (s->check(keys)) return Status();
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return Status(ErrorCode::kTimeout, "PyTorch store: " + join(keys) + " not set within " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

Result<Bytes> C10dStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  try {
    if (Status st = poll({key}, timeout); !st.ok()) return st;
    return mine()->get(key);
  } catch (const std::exception& e) {
    return from_exception(e, "get '" + key + "' within " + std::to_string(timeout.count()) + " ms", true);
  }
}

Result<int64_t> C10dStore::add(const std::string& key, int64_t delta) {
  try {
    return mine()->add(key, delta);
  } catch (const std::exception& e) {
    return from_exception(e, "add to '" + key + "'", false);
  }
}

Status C10dStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    return poll(keys, timeout);
  } catch (const std::exception& e) {
    return from_exception(e, "wait for " + join(keys) + " within " + std::to_string(timeout.count()) + " ms", true);
  }
}

Result<bool> C10dStore::check(const std::string& key) {
  try {
    return mine()->check({key});
  } catch (const std::exception& e) {
    return from_exception(e, "check '" + key + "'", false);
  }
}

Status C10dStore::erase(const std::string& key) {
  try {
    mine()->deleteKey(key);
    return Status();
  } catch (const std::exception& e) {
    return from_exception(e, "erase '" + key + "'", false);
  }
}

}  // namespace rcoll::torch_backend
