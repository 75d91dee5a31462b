// The store keys of finished epochs, erased, so that the store holds those of
// two epochs at most however many recoveries a job goes through (before, every
// epoch left about 4P keys behind for good).
//
// Each rank notes what it writes for an epoch: the exchanges it publishes in
// (its own key there) and single keys. A recovery of epoch e retires what was
// noted before it began (the setup of e and the recovery before it); once
// that recovery holds every rank's ledger, every rank has published one, so
// every rank is past everything retired and will never read it again. Then
// the first rank of every 64 erases their keys of the retired exchanges, and
// each rank the single keys it wrote: ceil(P / 64) requests per recovery as
// a rule (erase_many). An exchange the block's first rank did not take part
// in (an NCCL setup it never reached) leaves its keys behind.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "base/store_exchange.h"
#include "rcoll/store.h"

namespace rcoll {

class KeyJanitor {
 public:
  // This rank published in the exchange under `prefix`.
  void note_exchange(std::string prefix) { noted_.push_back({std::move(prefix), true}); }
  // This rank wrote `key` (and no rank reads it after the epoch is over).
  void note_key(std::string key) { noted_.push_back({std::move(key), false}); }

  // A recovery begins: what was noted so far is retired.
  void retire() {
    retired_.insert(retired_.end(), noted_.begin(), noted_.end());
    noted_.clear();
  }
  // Every rank's ledger of the recovery is in: the retired keys go (best
  // effort: a key left behind costs memory at the store, nothing else).
  // Every rank takes part in the same exchanges, so the first rank of each
  // block of kBlock ranks erases their keys of them; each rank erases the
  // single keys it wrote. One request (erase_many) per block as a rule:
  // ceil(P / 64) per recovery, of at most 64 keys per exchange each (a store
  // without erase_many erases them one by one, in parallel across blocks).
  static constexpr int kBlock = 64;
  void erase_retired(Store& store, int rank, int size) {
    std::vector<std::string> keys;
    for (const Entry& e : retired_) {
      if (!e.exchange) {
        keys.push_back(e.name);
      } else if (rank % kBlock == 0) {
        const StoreExchange x(store, e.name, size);
        for (int q = rank; q < std::min(size, rank + kBlock); ++q) keys.push_back(x.key(q));
        if (rank == 0) {
          keys.push_back(x.count_key());
          keys.push_back(x.combined_key());
          keys.push_back(x.more_key());  // absent where the exchange has no second reduction
        }
      }
    }
    retired_.clear();
    if (!keys.empty()) (void)store.erase_many(keys);
  }
  // A shrink: the old group's keys live under another namespace; left there.
  void forget() {
    noted_.clear();
    retired_.clear();
  }

 private:
  struct Entry {
    std::string name;
    bool exchange;
  };
  std::vector<Entry> noted_;
  std::vector<Entry> retired_;
};

}  // namespace rcoll
