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

Result<Store::Published> Store::publish_and_wait(const std::string& key, const Bytes& value,
                                                 const std::string& counter, int64_t until,
                                                 const std::vector<std::string>& wait_keys,
                                                 std::chrono::milliseconds timeout) {
  Published p;
  auto count = set_and_add(key, value, counter, 1);
  if (!count.ok()) return count.status();
  p.count = count.value();
  if (p.count >= until) {
    p.completed = true;
    return p;
  }
  auto values = multi_get(wait_keys, timeout);
  if (values.ok()) {
    p.values = std::move(values).value();
  } else if (values.status().code() == ErrorCode::kTimeout) {
    p.timed_out = true;
  } else {
    return values.status();
  }
  return p;
}

Status Store::erase_many(const std::vector<std::string>& keys) {
  Status first;
  for (const std::string& key : keys) {
    if (Status s = erase(key); !s.ok() && first.ok()) first = s;
  }
  return first;
}

// Looks every 100 ms (a fallback: the liveness channel brings the news
// first), and at `cancelled` every 20 ms.
Result<bool> Store::watch(const std::string& key, std::chrono::milliseconds timeout,
                          const std::function<bool()>& cancelled) {
  constexpr Clock::duration kLookEvery = std::chrono::milliseconds(100);
  constexpr Clock::duration kCancelEvery = std::chrono::milliseconds(20);
  const Deadline deadline = Deadline::after(timeout);
  for (;;) {
    auto there = check(key);
    if (!there.ok() || there.value()) return there;
    const Deadline next = Deadline::after(kLookEvery).earlier(deadline);
    while (!next.expired()) {
      if (cancelled()) return false;
      std::this_thread::sleep_for(std::min(next.remaining(), kCancelEvery));
    }
    if (deadline.expired()) return false;
  }
}

Result<std::vector<std::string>> Store::absent(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  Status last;
  bool answered = keys.empty();
  for (const std::string& key : keys) {
    auto has = check(key);
    answered = answered || has.ok();
    if (!has.ok()) last = has.status();
    if (!has.ok() || !has.value()) out.push_back(key);
  }
  if (!answered) return last;
  return out;
}

}  // namespace rcoll
