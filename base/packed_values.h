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

  int size() const { return static_cast<int>(entries_.size()); }
  bool empty() const { return entries_.empty(); }
  std::string at(int q) const;
  // Every value (a consumer that needs them all: O(P)).
  std::vector<std::string> all() const;

 private:
  struct Entry {
    uint32_t prefix = 0;  // bytes shared with the first value, from its start
    uint32_t suffix = 0;  // and from its end
    uint32_t at = 0;      // the middle's offset in bytes_
    uint32_t length = 0;  // and length
  };
  Bytes bytes_;
  std::vector<Entry> entries_;
};

}  // namespace rcoll
