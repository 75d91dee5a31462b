#include "runtime/shrink_rule.h"

#include <cstdio>

namespace rcoll {

std::string encode(const ShrinkStand& s) {
  return std::to_string(s.failed) + " " + (s.whole ? "1" : "0") + " " + std::to_string(s.through);
}

std::optional<ShrinkStand> decode_shrink_stand(const std::string& text) {
  unsigned long long failed = 0, through = 0;
  int whole = 0, used = 0;
  if (std::sscanf(text.c_str(), "%llu %d %llu%n", &failed, &whole, &through, &used) != 3 ||
      static_cast<size_t>(used) != text.size() || (whole != 0 && whole != 1)) {
    return std::nullopt;
  }
  return ShrinkStand{failed, whole == 1, through};
}

bool failed_collective_completes(const ShrinkStand& mine, std::span<const ShrinkStand> others) {
  if (mine.failed == 0 || !mine.whole) return false;
  for (const ShrinkStand& q : others) {
    const bool holds = (q.failed == mine.failed && q.whole) || q.through >= mine.failed;
    if (!holds) return false;
  }
  return true;
}

}  // namespace rcoll
