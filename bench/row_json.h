// Reads back the JSON file that Report::write_json writes (rcoll-bench's and
// the baselines' --json): {"rows": [{flat row}, ...], "recoveries": N,
// "fallbacks": N, "ranks": N, "time": "median"}. Not a general JSON library: strings and numbers
// inside a row, rows inside "rows", scalars at the top; keys it does not know
// are skipped, so that a newer writer's extra fields do not break an older
// reader. Anything else is an error naming the file, line and column.
#pragma once

#include <string>
#include <vector>

#include "bench/bench_report.h"

namespace rcoll::bench {

struct RowFile {
  std::vector<Row> rows;
  int ranks = 0;
  std::string timing;  // "time": how time_us was measured (to_string(Timing)); "" if absent
};

// Throws std::runtime_error ("gloo.json: line 3, column 12: expected ':'") if
// the file cannot be read, is not that format, or a row lacks op, size,
// time_us or busbw.
RowFile read_row_json(const std::string& path);

}  // namespace rcoll::bench
