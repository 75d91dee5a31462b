#include "runtime/store/exchange.h"

#include <algorithm>

namespace rcoll {

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int q : ranks) out += (out.empty() ? "" : ", ") + std::to_string(q);
  return out;
}

Result<std::vector<Bytes>> StoreExchange::gather(Deadline deadline, const Judge& judge, Millis poll) const {
  std::vector<int> waiting(static_cast<size_t>(size_));
  for (int q = 0; q < size_; ++q) waiting[static_cast<size_t>(q)] = q;
  for (;;) {
    std::vector<std::string> keys;
    for (int q : waiting) keys.push_back(key(q));
    const Millis slice = deadline.is_never() ? poll : std::clamp<Millis>(deadline.remaining_ms(), Millis(1), poll);
    Status s = store_.wait(keys, slice);
    if (s.ok()) break;
    if (s.code() != ErrorCode::kTimeout) return s;
    if (!judge && !deadline.expired()) continue;  // nobody asks who is missing yet: no per-key reads
    // Who is still missing (only those: the next wait asks the store for fewer keys).
    std::vector<int> missing;
    Status store_status;
    bool answered = false;  // the store answered at least one check
    for (int q : waiting) {
      auto has = store_.check(key(q));
      if (!has.ok()) store_status = has.status();
      answered = answered || has.ok();
      if (!has.ok() || !has.value()) missing.push_back(q);
    }
    if (missing.empty()) break;
    waiting = missing;
    if (judge) {
      if (Status verdict = judge(missing); !verdict.ok()) return verdict;
    }
    if (deadline.expired()) {
      if (!answered) return store_status;
      return Status(ErrorCode::kTimeout, ErrorContext{-1, missing.front(), 0, -1, ""},
                    "rank(s) " + rank_list(missing) + " did not publish " + prefix_ + "<rank> within the deadline: " +
                        s.message());
    }
  }
  std::vector<Bytes> values;
  for (int q = 0; q < size_; ++q) {
    // Every key is there: a read is quick (the store's own bound if it is not).
    auto v = store_.get(key(q), std::max<Millis>(Millis(1000), deadline.is_never() ? Millis(1000) : deadline.remaining_ms()));
    if (!v.ok()) return Status(v.status().code(), ErrorContext{-1, q, 0, -1, ""}, "reading " + key(q) + ": " + v.status().message());
    values.push_back(std::move(v).value());
  }
  return values;
}

}  // namespace rcoll
