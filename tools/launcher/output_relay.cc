#include "tools/launcher/output_relay.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace rcoll::launcher {

void OutputSink::write(std::string_view data) {
  while (!broken_ && !data.empty()) {
    ssize_t n = ::write(fd_, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      // An inherited non-blocking stdout: wait until it drains, a second at a time.
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      broken_ = true;  // EPIPE and friends: nobody reads our output any more
    }
  }
}

LineRelay::LineRelay(OutputSink& sink, int rank, bool tag)
    : sink_(&sink), prefix_("[" + std::to_string(rank) + "] "), tag_(tag) {}

void LineRelay::feed(std::string_view data) {
  if (!tag_) {
    sink_->write(data);
    return;
  }
  std::string out;
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(data);
      break;
    }
    out += prefix_;
    out += pending_;
    out.append(data.substr(0, nl + 1));
    pending_.clear();
    data.remove_prefix(nl + 1);
  }
  if (pending_.size() >= kMaxPendingLine) {
    out += prefix_;
    out += pending_;
    out += '\n';
    pending_.clear();
  }
  if (!out.empty()) sink_->write(out);
}

void LineRelay::finish() {
  if (!tag_ || pending_.empty()) return;
  sink_->write(prefix_ + pending_ + "\n");
  pending_.clear();
}

}  // namespace rcoll::launcher
