// Every rank's value of an exchange, packed: each value after the first is
// written as what it shares with the first (a prefix and a suffix, as
// lengths) and the bytes in between. The ranks' addresses ("127.0.0.1 40123
// lo") differ in a few digits, so each takes about 7 bytes (three lengths and
// the digits that differ), not 20: what every rank reads once per address
// exchange.
//
// A reader decodes one value when it needs it (`at`): reading the pack
// indexes it (a few integers per rank), and a rank that dials 13 partners
// builds 13 strings, not P.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rcoll/store.h"

namespace rcoll {

Bytes pack_values(const std::vector<Bytes>& values);

class PackedValues {
 public:
  PackedValues() = default;
  // Every value as it is (tests, a transport given its addresses).
  explicit PackedValues(const std::vector<std::string>& values);
  // Refuses (false) anything pack_values did not write for exactly `size` values.
  static bool decode(Bytes packed, int size, PackedValues* out);

  int size() const { return static_cast<int>(offsets_.size()); }
  bool empty() const { return offsets_.empty(); }
  std::string at(int q) const;
  // Every value (a consumer that needs them all: O(P)).
  std::vector<std::string> all() const;

 private:
  // A value as packed: what it shares with the first value (a prefix and a
  // suffix, as lengths) and the middle, bytes_[at, at + length).
  struct Entry {
    uint32_t prefix = 0;
    uint32_t suffix = 0;
    uint32_t at = 0;
    uint32_t length = 0;
  };
  Entry entry(int q) const;  // decoded from bytes_ at offsets_[q]
  Bytes bytes_;
  std::vector<uint32_t> offsets_;  // where each value's lengths start: 4 bytes a rank
  Entry first_;
};

// Every rank's value, each distinct one once, and which ranks wrote which as
// runs of ranks (a value's index and how many ranks in a row wrote it): the
// ledgers of a recovery, which most ranks write alike (a job of collectives:
// a handful of distinct ledgers among thousands of ranks, a few runs). A
// consumer works through the distinct values, not through P copies of them,
// and every rank reads a few hundred bytes, not one index entry per rank
// (16 KB at 16,384 ranks, every rank at once: 268 MB out of the store).
Bytes pack_distinct(const std::vector<Bytes>& values);

class DistinctValues {
 public:
  DistinctValues() = default;
  // Every rank's value as it is (tests): duplicates are found here.
  explicit DistinctValues(const std::vector<std::string>& by_rank);
  // Refuses (false) anything pack_distinct did not write for exactly `size` values.
  static bool decode(const Bytes& packed, int size, DistinctValues* out);

  int size() const { return size_; }  // ranks
  int distinct() const { return static_cast<int>(values_.size()); }
  const std::string& value(int d) const { return values_.at(static_cast<size_t>(d)); }
  // Which distinct value rank q published, and that value.
  int index_of(int q) const;
  const std::string& of_rank(int q) const { return value(index_of(q)); }
  // The lowest rank that published distinct value d, and how many did.
  int first_rank(int d) const { return first_.at(static_cast<size_t>(d)); }
  int ranks_with(int d) const { return count_.at(static_cast<size_t>(d)); }
  // The same ranks' values, each distinct one made into `f` of it (in
  // place).
  template <typename F>
  DistinctValues transformed(F f) && {
    for (std::string& v : values_) v = f(v);
    return std::move(*this);
  }

 private:
  void count_ranks();
  void append(uint32_t value, uint32_t ranks);  // the next `ranks` ranks wrote `value`
  int size_ = 0;
  std::vector<std::string> values_;
  // Runs of ranks that wrote one value: run k starts at rank run_start_[k].
  std::vector<uint32_t> run_start_;
  std::vector<uint32_t> run_value_;
  std::vector<int> first_;  // by distinct value
  std::vector<int> count_;
};

}  // namespace rcoll
