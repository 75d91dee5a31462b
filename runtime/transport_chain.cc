#include "runtime/transport_chain.h"

#include <algorithm>

#include "transports/factory.h"

namespace rcoll {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

}  // namespace

Result<TransportChain> TransportChain::make(const Options& options, std::vector<std::string>* notes) {
  TransportChain c;
  c.failures_to_drop_ = std::max(1, options.transport_failures_to_drop);
  c.failure_window_ = options.transport_failure_window;
  c.probe_after_ = options.transport_probe_after;
  const bool pinned = options.transport != "auto";
  std::vector<std::string> wanted =
      pinned ? std::vector<std::string>{options.transport} : options.transports;
  if (wanted.empty()) {
    for (const auto& t : known_transports()) wanted.emplace_back(t.name);
  }
  for (const auto& name : wanted) {
    const TransportInfo* info = find_transport(name);
    if (info == nullptr) {
      return Status(ErrorCode::kInvalidArgument,
                    "transport '" + name + "' is not " + transport_names_or());
    }
    if (std::find(c.order_.begin(), c.order_.end(), name) != c.order_.end()) continue;
    if (!transport_built(name)) {
      if (pinned) {
        return Status(ErrorCode::kUnsupported, ErrorContext{-1, -1, 0, -1, name},
                      "transport '" + name + "' is not available in this build (available: " + join(built_transports()) + ")");
      }
      notes->push_back(name + ": not built in, skipped");
      continue;
    }
    if (!info->host_memory) {
      // NCCL moves device memory only: it serves collectives on device
      // buffers, and host buffers take the rest of the chain.
      c.nccl_ = true;
      notes->push_back(
          name +
          ": for collectives on device buffers only; host buffers use the rest of the chain");
      continue;
    }
    c.order_.push_back(name);
  }
  if (c.order_.empty() && c.nccl_) {
    return Status(ErrorCode::kUnsupported, ErrorContext{-1, -1, 0, -1, "nccl"},
                  "transport 'nccl' moves device buffers only, and a communicator also needs a host transport: "
                  "list one after it (RCOLL_TRANSPORTS=nccl,tcp) instead of pinning nccl");
  }
  if (c.order_.empty()) {
    return Status(ErrorCode::kUnsupported, "no usable transport in '" + join(wanted) + "' (built in: " + join(built_transports()) + ")");
  }
  c.dropped_at_.assign(c.order_.size(), Clock::time_point{});
  return c;
}

std::string TransportChain::describe() const {
  std::string s;
  for (size_t i = 0; i < order_.size(); ++i) {
    s += (i ? " -> " : "") + order_[i];
    if (i == index_) s += " (current)";
  }
  return s;
}

bool TransportChain::drop_current(Clock::time_point now) {
  if (!has_next()) return false;
  dropped_at_[index_] = now;
  ++index_;
  ++fallbacks_;
  failures_.clear();
  return true;
}

size_t TransportChain::vote_after_failure(Clock::time_point now) {
  failures_.push_back(now);
  while (!failures_.empty() && now - failures_.front() > failure_window_) failures_.pop_front();
  if (static_cast<int>(failures_.size()) >= failures_to_drop_ && has_next()) return index_ + 1;
  // Probe back up: the most preferred transport dropped long enough ago.
  for (size_t i = 0; i < index_; ++i) {
    if (now - dropped_at_[i] >= probe_after_) return i;
  }
  return index_;
}

bool TransportChain::adopt(size_t index, Clock::time_point now) {
  index = std::min(index, order_.size() - 1);
  if (index == index_) return false;
  if (index > index_) {
    for (size_t i = index_; i < index; ++i) dropped_at_[i] = now;
    ++fallbacks_;
  } else {
    ++probes_;
  }
  index_ = index;
  failures_.clear();
  return true;
}

}  // namespace rcoll
