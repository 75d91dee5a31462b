// The Store calls that have a single-call form: what a caller's store gets
// unless it does them in one request.
#include <thread>

#include "base/deadline.h"
#include "rcoll/store.h"

namespace rcoll {

Result<int64_t> Store::set_and_add(const std::string& key, const Bytes& value,
                                   const std::string& counter, int64_t delta) {
  if (Status s = set(key, value); !s.ok()) return s;
  return add(counter, delta);
}

Result<std::vector<Bytes>> Store::multi_get(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  if (Status s = wait(keys, timeout); !s.ok()) return s;
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    auto v = get(key, std::max(deadline.remaining_ms(), std::chrono::milliseconds(1)));
    if (!v.ok()) return v.status();
    values.push_back(std::move(v).value());
  }
  return values;
}

Status Store::erase_many(const std::vector<std::string>& keys) {
  Status first;
  for (const std::string& key : keys) {
    if (Status s = erase(key); !s.ok() && first.ok()) first = s;
  }
  return first;
}

Result<bool> Store::watch(const std::string& key, std::chrono::milliseconds timeout,
                          const std::function<bool()>& cancelled) {
  const Deadline deadline = Deadline::after(timeout);
  for (;;) {
    auto there = check(key);
    if (!there.ok() || there.value()) return there;
    if (cancelled() || deadline.expired()) return false;
    std::this_thread::sleep_for(std::min(deadline.remaining(), Clock::duration(Millis(20))));
  }
}

}  // namespace rcoll
