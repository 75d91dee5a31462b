#include "base/address_book.h"

#include <algorithm>

namespace rcoll {

AddressBook::AddressBook(int size, std::vector<std::pair<int, std::string>> known,
                         FetchAll fetch_all, FetchOne fetch_one)
    : size_(size),
      known_(std::move(known)),
      fetch_all_(std::move(fetch_all)),
      fetch_one_(std::move(fetch_one)) {
  std::sort(known_.begin(), known_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
}

std::string AddressBook::peek(int q) const {
  if (q < 0 || q >= size_) return "";
  if (!all_.empty()) return all_.at(q);
  const auto it = std::lower_bound(known_.begin(), known_.end(), q,
                                   [](const auto& a, int rank) { return a.first < rank; });
  return it != known_.end() && it->first == q ? it->second : "";
}

Result<std::string> AddressBook::at(int q) {
  if (q < 0 || q >= size_) {
    return Status(ErrorCode::kInvalidArgument, "no rank " + std::to_string(q) + " among " +
                                                   std::to_string(size_) + " ranks' addresses");
  }
  if (!all_.empty()) return all_.at(q);
  const auto it = std::lower_bound(known_.begin(), known_.end(), q,
                                   [](const auto& a, int rank) { return a.first < rank; });
  if (it != known_.end() && it->first == q) return it->second;
  if (fetch_one_ && (fetched_one_ < kOneByOne || !fetch_all_)) {
    auto one = fetch_one_(q);
    if (!one.ok()) return one.status();
    ++fetched_one_;
    return known_.insert(it, {q, std::move(one).value()})->second;
  }
  if (!fetch_all_) {
    return Status(ErrorCode::kInternal,
                  "rank " + std::to_string(q) + "'s address was not read and cannot be");
  }
  auto all = fetch_all_();
  if (!all.ok()) return all.status();
  if (all.value().size() != size_) {
    return Status(ErrorCode::kStore, "the store gave " + std::to_string(all.value().size()) +
                                         " addresses for " + std::to_string(size_) + " ranks");
  }
  all_ = std::move(all).value();
  known_.clear();  // all_ has them
  known_.shrink_to_fit();
  return all_.at(q);
}

}  // namespace rcoll
