#include "runtime/flight_recorder.h"

#include <algorithm>
#include <cstdio>

namespace rcoll {
namespace {

const char* state_name(OpTrace::State s) {
  switch (s) {
    case OpTrace::State::kQueued: return "queued";
    case OpTrace::State::kRunning: return "running";
    case OpTrace::State::kDone: return "done";
    case OpTrace::State::kFailed: return "failed";
  }
  return "?";
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string line(const OpTrace& t, Clock::time_point now) {
  char buf[160];
  std::string s = std::string(state_name(t.state)) + " " + t.what.describe();
  if (t.state == OpTrace::State::kRunning || t.state == OpTrace::State::kFailed) {
    std::snprintf(buf, sizeof(buf), " slice %zu/%zu epoch %u", t.slices_done, t.slices_total, t.epoch);
    s += buf;
  }
  if (t.state == OpTrace::State::kQueued) {
    std::snprintf(buf, sizeof(buf), " for %.3f s", seconds(now - t.issued));
  } else if (t.state == OpTrace::State::kRunning) {
    std::snprintf(buf, sizeof(buf), " for %.3f s", seconds(now - t.started));
  } else {
    std::snprintf(buf, sizeof(buf), " in %.3f s, %.3f s ago", seconds(t.finished - t.started), seconds(now - t.finished));
  }
  return s + buf;
}

}  // namespace

OpTrace* FlightRecorder::find(uint64_t seq) {
  OpTrace& t = ring_[seq % ring_.size()];
  return t.seq == seq ? &t : nullptr;
}

void FlightRecorder::issued(const Op& op) {
  std::lock_guard<std::mutex> lock(mu_);
  OpTrace& t = ring_[op.seq % ring_.size()];
  t = OpTrace{};
  t.seq = op.seq;
  t.what = op.brief();
  t.bytes = std::max(op.in.bytes(), op.out.bytes());
  t.issued = Clock::now();
}

void FlightRecorder::started(uint64_t seq, uint32_t epoch, size_t slices_total,
                             Clock::time_point at) {
  std::lock_guard<std::mutex> lock(mu_);
  if (OpTrace* t = find(seq)) {
    t->state = OpTrace::State::kRunning;
    t->started = at;
    t->epoch = epoch;
    t->slices_total = slices_total;
  }
}

void FlightRecorder::progressed(uint64_t seq, size_t slices_done, uint32_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (OpTrace* t = find(seq)) {
    t->slices_done = slices_done;
    t->epoch = epoch;
  }
}

void FlightRecorder::finished(uint64_t seq, bool ok, Clock::time_point at) {
  std::lock_guard<std::mutex> lock(mu_);
  if (OpTrace* t = find(seq)) {
    t->state = ok ? OpTrace::State::kDone : OpTrace::State::kFailed;
    t->finished = at;
    if (ok) t->slices_done = t->slices_total;
  }
}

std::vector<OpTrace> FlightRecorder::last(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<OpTrace> all;
  for (const auto& t : ring_)
    if (t.seq != 0) all.push_back(t);
  std::sort(all.begin(), all.end(), [](const OpTrace& a, const OpTrace& b) { return a.seq < b.seq; });
  if (all.size() > n) all.erase(all.begin(), all.end() - static_cast<std::ptrdiff_t>(n));
  return all;
}

std::string FlightRecorder::position() const {
  const auto now = Clock::now();
  auto ops = last(ring_.size());
  // The oldest op not done is where this rank is stuck; else the newest done one.
  for (const auto& t : ops)
    if (t.state != OpTrace::State::kDone) return line(t, now);
  return ops.empty() ? "no ops yet" : line(ops.back(), now);
}

std::string FlightRecorder::dump(size_t n) const {
  const auto now = Clock::now();
  std::string out;
  for (const auto& t : last(n)) out += "  " + line(t, now) + "\n";
  return out;
}

}  // namespace rcoll
