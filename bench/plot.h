// rcoll-bench --plot: a PNG of busbw against size (log2 axis), one panel per
// op, one line per library and transport, drawn by gnuplot.
#pragma once

#include <string>
#include <vector>

#include "bench/bench_report.h"

namespace rcoll::bench {

struct PlotOptions {
  std::string path;     // the PNG to write
  std::string gnuplot;  // the program (found on PATH)
  int ranks = 0;
  std::string dtype;
};

// Rows with a bandwidth (not barrier) and a size above 0 are drawn; a line is
// named "rcoll TRANSPORT" for rcoll's rows, the row's transport for the
// others ("gloo/tcp", "mpi/tcp,self"). gnuplot reads a script with the data
// inline (a temporary file) and says what it dislikes on stderr. Throws
// std::runtime_error if there is nothing to draw or gnuplot fails; the script
// is kept then and named in the message.
void write_plot(const PlotOptions& options, const std::vector<Row>& rows);

}  // namespace rcoll::bench
