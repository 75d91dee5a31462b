// Where each rank of a mesh listens, as its connections need it: the few
// partners a rank connects at once are known up front (read with the
// exchange's combined value, a few dozen addresses at any P), every other
// rank's only once the rank first dials it: one by one for the first
// kOneByOne (a store request each, a few dozen bytes), then everyone's at
// once (one request: the exchange's packed addresses, StoreExchange's
// read_more), for a rank that dials many (an all-to-all). At 16,384 ranks
// that is 27 addresses read per rank and exchange instead of 16,384 (about
// 115 KB each, gigabytes out of the store).
//
// The fetches block the thread that dials, each within its own bound (the
// callers': the liveness channel's within a heartbeat interval). Not
// thread-safe: one thread dials (the transport's, the liveness channel's),
// after the build that made the book handed it over.
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
  // One rank's address.
  using FetchOne = std::function<Result<std::string>(int rank)>;
  static constexpr int kOneByOne = 16;

  AddressBook() = default;
  // Every rank's, known now (tests, a full mesh).
  explicit AddressBook(PackedValues all) : size_(all.size()), all_(std::move(all)) {}
  // `known` (rank, address) now, the rest from `fetch_one` (the first
  // kOneByOne, where given) and then `fetch_all` on first need.
  AddressBook(int size, std::vector<std::pair<int, std::string>> known, FetchAll fetch_all,
              FetchOne fetch_one = nullptr);

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Rank q's address if at hand, else "" (for messages: never asks).
  std::string peek(int q) const;
  // Rank q's address: known, or fetched alone (the first kOneByOne), or
  // with everyone's (once). A failed fetch is asked again next time.
  // kInvalidArgument for a rank outside the mesh, the fetch's error where it
  // failed.
  Result<std::string> at(int q);

 private:
  int size_ = 0;
  std::vector<std::pair<int, std::string>> known_;  // sorted by rank
  FetchAll fetch_all_;
  FetchOne fetch_one_;
  int fetched_one_ = 0;  // ranks read alone so far
  PackedValues all_;     // every rank's, once fetched (or given)
};

}  // namespace rcoll
