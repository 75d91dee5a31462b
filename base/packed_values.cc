#include "base/packed_values.h"

#include <algorithm>
#include <map>

namespace rcoll {

namespace {

void put_varint(Bytes& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

bool get_varint(const Bytes& in, size_t& at, uint32_t* v) {
  uint64_t out = 0;
  for (int shift = 0; shift < 35; shift += 7) {
    if (at >= in.size()) return false;
    const uint8_t b = in[at++];
    out |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      if (out > UINT32_MAX) return false;
      *v = static_cast<uint32_t>(out);
      return true;
    }
  }
  return false;
}

}  // namespace

Bytes pack_values(const std::vector<Bytes>& values) {
  Bytes out;
  put_varint(out, values.size());
  if (values.empty()) return out;
  const Bytes& first = values.front();
  for (size_t q = 0; q < values.size(); ++q) {
    const Bytes& v = values[q];
    size_t prefix = 0, suffix = 0;
    if (q > 0) {
      const size_t most = std::min(first.size(), v.size());
      while (prefix < most && first[prefix] == v[prefix]) ++prefix;
      while (suffix < most - prefix && first[first.size() - 1 - suffix] == v[v.size() - 1 - suffix])
        ++suffix;
    }
    put_varint(out, prefix);
    put_varint(out, suffix);
    put_varint(out, v.size() - prefix - suffix);
    out.insert(out.end(), v.begin() + static_cast<std::ptrdiff_t>(prefix),
               v.end() - static_cast<std::ptrdiff_t>(suffix));
  }
  return out;
}

PackedValues::PackedValues(const std::vector<std::string>& values) {
  std::vector<Bytes> raw;
  for (const std::string& v : values) raw.emplace_back(v.begin(), v.end());
  const bool ok = decode(pack_values(raw), static_cast<int>(values.size()), this);
  (void)ok;  // what pack_values writes decodes
}

bool PackedValues::decode(Bytes packed, int size, PackedValues* out) {
  PackedValues p;
  size_t at = 0;
  uint32_t count = 0;
  if (!get_varint(packed, at, &count) || static_cast<int64_t>(count) != size) return false;
  p.offsets_.reserve(count);
  for (uint32_t q = 0; q < count; ++q) {
    p.offsets_.push_back(static_cast<uint32_t>(at));
    Entry e;
    if (!get_varint(packed, at, &e.prefix) || !get_varint(packed, at, &e.suffix) ||
        !get_varint(packed, at, &e.length))
      return false;
    if (packed.size() - at < e.length) return false;
    e.at = static_cast<uint32_t>(at);
    at += e.length;
    // What it shares must be in the first value, without overlap.
    const uint64_t shared = static_cast<uint64_t>(e.prefix) + e.suffix;
    if ((q == 0 && shared != 0) || (q > 0 && shared > p.first_.length)) return false;
    if (q == 0) p.first_ = e;
  }
  if (at != packed.size()) return false;
  p.bytes_ = std::move(packed);
  *out = std::move(p);
  return true;
}

PackedValues::Entry PackedValues::entry(int q) const {
  size_t at = offsets_.at(static_cast<size_t>(q));
  Entry e;
  // Checked when decoded.
  (void)get_varint(bytes_, at, &e.prefix);
  (void)get_varint(bytes_, at, &e.suffix);
  (void)get_varint(bytes_, at, &e.length);
  e.at = static_cast<uint32_t>(at);
  return e;
}

std::string PackedValues::at(int q) const {
  const Entry e = entry(q);
  const Entry& first = first_;
  const auto base = bytes_.begin();
  std::string out;
  out.reserve(e.prefix + e.length + e.suffix);
  out.append(base + first.at, base + first.at + e.prefix);
  out.append(base + e.at, base + e.at + e.length);
  out.append(base + first.at + first.length - e.suffix, base + first.at + first.length);
  return out;
}

std::vector<std::string> PackedValues::all() const {
  std::vector<std::string> out;
  out.reserve(offsets_.size());
  for (int q = 0; q < size(); ++q) out.push_back(at(q));
  return out;
}

Bytes pack_distinct(const std::vector<Bytes>& values) {
  std::map<Bytes, uint32_t> seen;
  std::vector<const Bytes*> table;
  std::vector<uint32_t> index;
  index.reserve(values.size());
  for (const Bytes& v : values) {
    auto [it, fresh] = seen.emplace(v, static_cast<uint32_t>(table.size()));
    if (fresh) table.push_back(&it->first);
    index.push_back(it->second);
  }
  Bytes out;
  put_varint(out, values.size());
  put_varint(out, table.size());
  for (const Bytes* v : table) {
    put_varint(out, v->size());
    out.insert(out.end(), v->begin(), v->end());
  }
  // Runs: (value, how many ranks in a row), up to P ranks in all.
  for (size_t q = 0; q < index.size();) {
    size_t end = q + 1;
    while (end < index.size() && index[end] == index[q]) ++end;
    put_varint(out, index[q]);
    put_varint(out, end - q);
    q = end;
  }
  return out;
}

void DistinctValues::append(uint32_t value, uint32_t ranks) {
  if (!run_value_.empty() && run_value_.back() == value) {
    size_ += static_cast<int>(ranks);  // the same value goes on
    return;
  }
  run_start_.push_back(static_cast<uint32_t>(size_));
  run_value_.push_back(value);
  size_ += static_cast<int>(ranks);
}

int DistinctValues::index_of(int q) const {
  if (q < 0 || q >= size_) return -1;
  const auto it = std::upper_bound(run_start_.begin(), run_start_.end(), static_cast<uint32_t>(q));
  return static_cast<int>(run_value_[static_cast<size_t>(it - run_start_.begin()) - 1]);
}

DistinctValues::DistinctValues(const std::vector<std::string>& by_rank) {
  std::map<std::string, uint32_t> seen;
  for (const std::string& v : by_rank) {
    auto [it, fresh] = seen.emplace(v, static_cast<uint32_t>(values_.size()));
    if (fresh) values_.push_back(v);
    append(it->second, 1);
  }
  count_ranks();
}

bool DistinctValues::decode(const Bytes& packed, int size, DistinctValues* out) {
  DistinctValues d;
  size_t at = 0;
  uint32_t count = 0, distinct = 0;
  if (!get_varint(packed, at, &count) || static_cast<int64_t>(count) != size) return false;
  if (!get_varint(packed, at, &distinct) || distinct > count) return false;
  for (uint32_t i = 0; i < distinct; ++i) {
    uint32_t n = 0;
    if (!get_varint(packed, at, &n) || packed.size() - at < n) return false;
    d.values_.emplace_back(packed.begin() + static_cast<std::ptrdiff_t>(at),
                           packed.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  while (static_cast<uint32_t>(d.size_) < count) {
    uint32_t value = 0, ranks = 0;
    if (!get_varint(packed, at, &value) || value >= distinct) return false;
    if (!get_varint(packed, at, &ranks) || ranks == 0 ||
        ranks > count - static_cast<uint32_t>(d.size_))
      return false;
    d.append(value, ranks);
  }
  if (at != packed.size()) return false;
  d.count_ranks();
  // Every distinct value is some rank's: one no rank wrote is not ours.
  if (std::find(d.count_.begin(), d.count_.end(), 0) != d.count_.end()) return false;
  *out = std::move(d);
  return true;
}

void DistinctValues::count_ranks() {
  first_.assign(values_.size(), -1);
  count_.assign(values_.size(), 0);
  for (size_t k = 0; k < run_start_.size(); ++k) {
    const uint32_t end =
        k + 1 < run_start_.size() ? run_start_[k + 1] : static_cast<uint32_t>(size_);
    const uint32_t v = run_value_[k];
    if (first_[v] < 0) first_[v] = static_cast<int>(run_start_[k]);
    count_[v] += static_cast<int>(end - run_start_[k]);
  }
}

}  // namespace rcoll
