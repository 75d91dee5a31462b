// Relays one rank's stdout or stderr to the launcher's, a whole line at a time, each
// line prefixed with "[RANK] ". Lines of different ranks never interleave because the
// launcher is the only writer and writes complete lines.
#pragma once

#include <string>
#include <string_view>

namespace rcoll::launcher {

// The launcher's own stdout or stderr. Once writing fails (a closed pipe), output is
// dropped instead of stopping the job.
class OutputSink {
 public:
  explicit OutputSink(int fd) : fd_(fd) {}
  void write(std::string_view data);
  bool broken() const { return broken_; }

 private:
  int fd_;
  bool broken_ = false;
};

class LineRelay {
 public:
  // tag=false passes bytes through untouched (no buffering, no prefix).
  LineRelay(OutputSink& sink, int rank, bool tag);
  void feed(std::string_view data);
  // The rank is gone: a partial last line is written with a newline added.
  void finish();

 private:
  // A line longer than this is written in pieces, each prefixed, to bound memory.
  static constexpr size_t kMaxPendingLine = 64 * 1024;

  OutputSink* sink_;
  std::string prefix_;
  bool tag_;
  std::string pending_;  // the start of a line not yet ended by '\n'
};

}  // namespace rcoll::launcher
