#include "runtime/store/exchange.h"

#include <algorithm>

namespace rcoll {

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int q : ranks) out += (out.empty() ? "" : ", ") + std::to_string(q);
  return out;
}

StoreExchange::Gathered StoreExchange::gather(Deadline deadline, const Judge& judge, Millis poll) const {
  using Ended = Gathered::Ended;
  constexpr Clock::duration kLookEvery = std::chrono::seconds(1);
  Gathered out;
  std::vector<int> waiting(static_cast<size_t>(size_));
  for (int q = 0; q < size_; ++q) waiting[static_cast<size_t>(q)] = q;
  Clock::time_point looked{};  // the last look key by key (never yet)
  bool answered = true;        // the store answered a question of the last look
  Status store_status;
  for (;;) {
    std::vector<std::string> keys;
    for (int q : waiting) keys.push_back(key(q));
    const Millis slice = deadline.is_never() ? poll : std::clamp<Millis>(deadline.remaining_ms(), Millis(1), poll);
    Status s = store_.wait(keys, slice);
    if (s.ok()) break;
    if (s.code() != ErrorCode::kTimeout) {
      out.ended = Ended::kStoreFailed;  // who is missing is not known
      out.status = s;
      return out;
    }
    const bool expired = deadline.expired();
    if (!judge && !expired) continue;  // nobody asks who is missing yet
    if (expired || Clock::now() - looked >= kLookEvery) {
      // Only those still missing: the next wait asks the store for fewer keys.
      looked = Clock::now();
      std::vector<int> missing;
      answered = false;
      for (int q : waiting) {
        auto has = store_.check(key(q));
        if (!has.ok()) store_status = has.status();
        answered = answered || has.ok();
        if (!has.ok() || !has.value()) missing.push_back(q);
      }
      if (missing.empty()) break;
      waiting = missing;
    }
    if (judge) {
      if (Status verdict = judge(waiting); !verdict.ok()) {
        out.ended = Ended::kJudged;
        out.status = verdict;
        out.missing = waiting;
        return out;
      }
    }
    if (expired) {
      out.missing = waiting;
      if (!answered) {
        out.ended = Ended::kStoreFailed;
        out.status = store_status;
        return out;
      }
      out.ended = Ended::kTimedOut;
      out.status = Status(ErrorCode::kTimeout, ErrorContext{-1, waiting.front(), 0, -1, ""},
                          "rank(s) " + rank_list(waiting) + " did not publish " + prefix_ + "<rank> in time (" + s.message() + ")");
      return out;
    }
  }
  for (int q = 0; q < size_; ++q) {
    // Every key is there: a read is quick (the store's own bound if it is not).
    auto v = store_.get(key(q), std::max<Millis>(Millis(1000), deadline.is_never() ? Millis(1000) : deadline.remaining_ms()));
    if (!v.ok()) {
      out.ended = Ended::kStoreFailed;
      out.status = Status(v.status().code(), ErrorContext{-1, q, 0, -1, ""}, "reading " + key(q) + ": " + v.status().message());
      out.values.clear();  // q did publish: nobody is missing
      return out;
    }
    out.values.push_back(std::move(v).value());
  }
  return out;
}

}  // namespace rcoll
