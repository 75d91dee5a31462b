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
#include "base/deadline.h"

namespace rcoll {

class StoreExchange {
 public:
  // Keys are `prefix` + rank (runtime/store/keys.h).
  StoreExchange(Store& store, std::string prefix, int size) : store_(store), prefix_(std::move(prefix)), size_(size) {}

  std::string key(int rank) const { return prefix_ + std::to_string(rank); }
  Status publish(int rank, const Bytes& mine) const { return store_.set(key(rank), mine); }

  // Called between polls with the ranks not heard from yet (never empty; as
  // of the last look, at most a second old); a non-OK status ends the gather.
  using Judge = std::function<Status(const std::vector<int>& missing)>;

  // How a gather ended: every rank's value (in rank order), or why not.
  struct Gathered {
    enum class Ended : uint8_t { kAll, kJudged, kTimedOut, kStoreFailed };
    Ended ended = Ended::kAll;
    std::vector<Bytes> values;
    // kJudged: the judge's verdict, as it gave it. kTimedOut: kTimeout,
    // context.peer the first missing rank, the message naming them all.
    // kStoreFailed: the store's own error (it did not answer, or a read failed).
    Status status;
    // Who was not heard from: kTimedOut, kJudged; kStoreFailed when the
    // store failed while asked who is missing, else empty.
    std::vector<int> missing;
    bool ok() const { return ended == Ended::kAll; }
  };

  // Waits on the store for the keys still missing, in slices of `poll`. Who
  // is missing is looked up key by key only when someone asks (a judge, or
  // the deadline passing), and then at most once a second: a wait on the
  // store costs O(P), a look at every key O(P) calls. kTimedOut once
  // `deadline` passed; a rank the store could not be asked about counts as
  // missing, unless the store answered none of the last look's questions
  // (kStoreFailed: its host stalled, say). Callers that bound store calls by
  // the same deadline give them a little more, so the store can still be
  // asked who is missing.
  Gathered gather(Deadline deadline, const Judge& judge = {}, Millis poll = Millis(100)) const;

 private:
  Store& store_;
  std::string prefix_;
  int size_;
};

// "1, 3, 7": ranks for a message.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace rcoll
