#include "bench/plot.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>

#include "base/unique_fd.h"
#include "bench/child_process.h"

namespace rcoll::bench {
namespace {

constexpr std::chrono::seconds kGnuplotDeadline{60};
constexpr size_t kMaxSizeLabels = 12;  // more would overlap on the x axis
constexpr int kPanelWidth = 640, kPanelHeight = 420;

struct Series {
  std::string label;
  std::vector<std::pair<uint64_t, double>> points;  // size, busbw
};

struct Panel {
  std::string op;
  std::vector<Series> series;
};

std::string series_label(const Row& r) {
  if (r.library.empty() || r.library == "rcoll") return "rcoll " + r.transport;
  return r.transport.empty() ? r.library : r.transport;
}

// Rows grouped by op, then by line, both in the order they first appear.
std::vector<Panel> panels_of(const std::vector<Row>& rows) {
  std::vector<Panel> panels;
  for (const Row& r : rows) {
    if (bus_factor(r.op, 2) == 0 || r.size == 0) continue;
    auto p =
        std::find_if(panels.begin(), panels.end(), [&](const Panel& x) { return x.op == r.op; });
    if (p == panels.end()) p = panels.insert(panels.end(), Panel{r.op, {}});
    const std::string label = series_label(r);
    auto s = std::find_if(p->series.begin(), p->series.end(),
                          [&](const Series& x) { return x.label == label; });
    if (s == p->series.end()) s = p->series.insert(p->series.end(), Series{label, {}});
    s->points.emplace_back(r.size, r.busbw);
  }
  return panels;
}

// 4096 -> "4K", 1048576 -> "1M"; sizes that are no whole multiple stay in bytes.
std::string size_label(uint64_t s) {
  for (auto [shift, unit] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}}) {
    const uint64_t u = uint64_t{1} << shift;
    if (s >= u && s % u == 0) return std::to_string(s / u) + unit;
  }
  return std::to_string(s);
}

// A gnuplot double-quoted string.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string script(const PlotOptions& o, const std::vector<Panel>& panels) {
  std::set<uint64_t> sizes;
  for (const auto& p : panels)
    for (const auto& s : p.series)
      for (const auto& pt : s.points) sizes.insert(pt.first);
  const int cols = panels.size() > 1 ? 2 : 1;
  const int rows =
      static_cast<int>((panels.size() + static_cast<size_t>(cols) - 1) / static_cast<size_t>(cols));

  std::string g;
  auto line = [&](const std::string& l) { g += l + "\n"; };
  // noenhanced: "reduce_scatter" must not turn into a subscript.
  line("set terminal png noenhanced size " + std::to_string(cols * kPanelWidth) + "," +
       std::to_string(rows * kPanelHeight + 30));
  line("set output " + quoted(o.path));
  for (size_t p = 0; p < panels.size(); ++p) {
    for (size_t s = 0; s < panels[p].series.size(); ++s) {
      line("$p" + std::to_string(p) + "s" + std::to_string(s) + " << EOD");
      for (const auto& [size, busbw] : panels[p].series[s].points) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%llu %.6g", static_cast<unsigned long long>(size), busbw);
        line(buf);
      }
      line("EOD");
    }
  }
  std::string tics;
  const size_t step = (sizes.size() + kMaxSizeLabels - 1) / kMaxSizeLabels;
  size_t i = 0;
  for (uint64_t s : sizes) {
    if (i++ % step != 0) continue;
    tics += (tics.empty() ? "" : ", ") + quoted(size_label(s)) + " " + std::to_string(s);
  }
  char range[96];
  std::snprintf(range, sizeof(range), "set xrange [%.6g:%.6g]",
                static_cast<double>(*sizes.begin()) / 1.5,
                static_cast<double>(*sizes.rbegin()) * 1.5);
  line(range);
  line("set logscale x 2");
  line("set xtics (" + tics + ")");
  line("set yrange [0:*]");
  line("set grid");
  line("set key top left");
  line("set xlabel \"size (bytes)\"");
  line("set ylabel \"busbw (GB/s)\"");
  line("set multiplot layout " + std::to_string(rows) + "," + std::to_string(cols) +
       " title \"rcoll-bench: bus bandwidth against size\"");
  for (size_t p = 0; p < panels.size(); ++p) {
    std::set<std::string> seen;
    std::string transports;
    for (const auto& s : panels[p].series) {
      if (seen.insert(s.label).second) transports += (transports.empty() ? "" : " | ") + s.label;
    }
    line("set title " + quoted(panels[p].op + ", " + std::to_string(o.ranks) + " ranks, " +
                               o.dtype + " - " + transports));
    std::string plot = "plot ";
    for (size_t s = 0; s < panels[p].series.size(); ++s) {
      plot += (s ? ", " : "") + std::string("$p") + std::to_string(p) + "s" + std::to_string(s) +
              " using 1:2 with linespoints linewidth 2 title " + quoted(panels[p].series[s].label);
    }
    line(plot);
  }
  line("unset multiplot");
  line("set output");
  return g;
}

}  // namespace

void write_plot(const PlotOptions& o, const std::vector<Row>& rows) {
  const std::vector<Panel> panels = panels_of(rows);
  if (panels.empty())
    throw std::runtime_error("--plot " + o.path + ": no row with a bandwidth to draw");

  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/rcoll-bench-plot-XXXXXX.gp";
  UniqueFd fd(::mkstemps(path.data(), 3));
  if (!fd.valid())
    throw std::runtime_error("--plot: cannot create a script file " + path + ": " +
                             std::strerror(errno));
  const std::string text = script(o, panels);
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error("--plot: cannot write " + path + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  fd.reset();

  ::unlink(o.path.c_str());  // so that a PNG from an earlier run cannot pass for this one
  const ChildExit exit =
      ChildProcess::start({o.gnuplot, path}, STDERR_FILENO).wait(kGnuplotDeadline);
  struct stat st {};
  if (!exit.ok() || ::stat(o.path.c_str(), &st) != 0 || st.st_size == 0) {
    throw std::runtime_error("--plot " + o.path + ": gnuplot " +
                             (exit.ok() ? "wrote no image" : exit.describe()) +
                             " (its messages are above; the script is kept in " + path + ")");
  }
  ::unlink(path.c_str());
}

}  // namespace rcoll::bench
