// Where each rank of a mesh listens, as its connections need it: the few
// partners a rank connects at once are known up front (read with the
// exchange's combined value, a few dozen addresses at any P), every other
// rank's only once the rank first dials one of them, and then all at once
// (one store request: the exchange's packed addresses, StoreExchange's
// read_more). At 16,384 ranks that is 27 addresses read per rank and
// exchange instead of 16,384 (about 115 KB each, gigabytes out of the store).
//
// Not thread-safe: one thread dials (the transport's, the liveness
// channel's), after the build that made the book handed it over.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/packed_values.h"
#include "rcoll/status.h"

namespace rcoll {

class AddressBook {
 public:
  // Every rank's address (packed), when asked for at last.
  using FetchAll = std::function<Result<PackedValues>()>;

  AddressBook() = default;
  // Every rank's, known now (tests, a full mesh).
  explicit AddressBook(PackedValues all) : size_(all.size()), all_(std::move(all)) {}
  // `known` (rank, address) now, the rest from `fetch_all` on first need.
  AddressBook(int size, std::vector<std::pair<int, std::string>> known, FetchAll fetch_all);

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Whether rank q's address is at hand without asking the store.
  bool knows(int q) const;
  // Rank q's address if at hand, else "" (for messages: never asks).
  std::string peek(int q) const;
  // Rank q's address: known, or fetched with everyone's (once; a failed
  // fetch is asked again next time). kInvalidArgument for a rank outside
  // the mesh, the fetch's error where it failed.
  Result<std::string> at(int q);

 private:
  int size_ = 0;
  std::vector<std::pair<int, std::string>> known_;  // sorted by rank
  FetchAll fetch_all_;
  PackedValues all_;  // every rank's, once fetched (or given)
};

}  // namespace rcoll
