// Shrink mode: which collective failed, as every survivor must report it.
//
// In shrink mode every collective ends with a confirmation round, so a rank
// completes one only after every rank (the one that then died included) said
// it held the whole result. When a rank dies, a survivor may thus have
// completed collective N while another failed it; but then every survivor
// held N's whole result. So a survivor whose N failed completes it after all
// when every other survivor held N's whole result too, or completed it; else
// N fails on every survivor that had not completed it, and none had.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace rcoll {

// Where a rank's collectives stood when a shrink began.
struct ShrinkStand {
  uint64_t failed = 0;   // match seq of the collective that failed here (0: none)
  bool whole = false;    // this rank held its whole result
  uint64_t through = 0;  // the last collective completed here
};

std::string encode(const ShrinkStand& s);
std::optional<ShrinkStand> decode_shrink_stand(const std::string& text);

// Whether the collective that failed on `mine` completes after all, given
// where every other survivor stood.
bool failed_collective_completes(const ShrinkStand& mine, std::span<const ShrinkStand> others);

}  // namespace rcoll
