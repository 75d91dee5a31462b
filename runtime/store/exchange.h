// The exchange that setup and recovery repeat: every rank publishes a value
// under a key prefix and reads every rank's (an all-gather through the
// store): the settings every rank must share, link timings, ledgers and
// ballots, NCCL init outcomes, where ranks were when an epoch failed.
//
// Bounded by a deadline. Between polls a judge, given the ranks not heard
// from yet, may end the wait at once with its own diagnosis (a rank seen
// dead, one that said goodbye, a failure notice no recovery fixes); its
// callers name the missing ranks in their errors. One place to make the
// exchange hierarchical later (O(P) at the store instead of P reads of P
// keys) without touching them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "rcoll/store.h"
#include "runtime/deadline.h"

namespace rcoll {

class StoreExchange {
 public:
  // Keys are `prefix` + rank (runtime/store/keys.h).
  StoreExchange(Store& store, std::string prefix, int size) : store_(store), prefix_(std::move(prefix)), size_(size) {}

  std::string key(int rank) const { return prefix_ + std::to_string(rank); }
  Status publish(int rank, const Bytes& mine) const { return store_.set(key(rank), mine); }

  // Called between polls with the ranks not heard from yet (never empty); a
  // non-OK status ends the gather with it.
  using Judge = std::function<Status(const std::vector<int>& missing)>;

  // Every rank's value, in rank order. Fails with the judge's status; or with
  // kTimeout once `deadline` passed, context.peer the first missing rank and
  // the message naming them all ("rank(s) 1, 3 ..."; a rank the store could
  // not be asked about counts as missing); or, once `deadline` passed, with
  // the store's own error if it answered none of the last checks (its host
  // stalled, say). Callers that bound store calls by the same deadline give
  // them a little more, so that the store can still be asked who is missing.
  Result<std::vector<Bytes>> gather(Deadline deadline, const Judge& judge = {},
                                    Millis poll = Millis(100)) const;

 private:
  Store& store_;
  std::string prefix_;
  int size_;
};

// "1, 3, 7": ranks for a message.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace rcoll
