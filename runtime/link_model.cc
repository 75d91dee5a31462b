#include "runtime/link_model.h"

#include <sched.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/store_exchange.h"

namespace rcoll {

namespace {

constexpr int kLatencyRounds = 9;
constexpr size_t kBurstFrames = 16;
constexpr size_t kBurstFrameBytes = 128 * 1024;  // 2 MiB in all: ~1 ms on loopback
// The median of three bursts counts. 6 MiB over each link in all: a link
// slower than about 0.8 MB/s does not finish within the default 8 s connect
// timeout (the probe's deadline), and the epoch fails its timing.
constexpr int kBurstRounds = 3;
constexpr uint16_t kLatencyStep = 0xFFF0;
constexpr uint16_t kBurstStep = 0xFFF1;
constexpr uint16_t kDoneStep = 0xFFF2;

// Bounds of the adaptive choice.
constexpr size_t kMaxPiece = 1u << 20;   // larger frames gained nothing on any link measured
constexpr size_t kMinPiece = 16u << 10;  // below this, per-frame costs dominate
constexpr int kMaxWindow = 32;
constexpr double kFrameTime = 0.005;     // one frame holds a link at most 5 ms...
constexpr double kDeadlineShare = 1.0 / 16;  // ...and at most 1/16 of the op deadline

constexpr size_t kMaxHostBytes = 64;                 // a boot id is 36
constexpr size_t kMaxCpuMaskDigits = CPU_SETSIZE / 4;

// Waits for every request. On a failure, the deadline or `cancelled` it
// aborts the transport before returning, so no request it still holds
// outlives this call. `cancelled` (may be empty) is asked every 20 ms at most.
Status wait_all(Transport& t, Request* reqs, size_t n, int prev, int next, Deadline deadline,
                const std::function<bool()>& cancelled) {
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < n; ++i) {
      if (reqs[i].failed()) {
        Status s = reqs[i].status;
        t.abort(s);
        return s;
      }
      if (!reqs[i].finished()) all = false;
    }
    if (all) return Status();
    if (deadline.expired()) {
      Status s(ErrorCode::kTimeout, ErrorContext{t.rank(), prev, 0, t.epoch(), t.name()},
               "timing the links of epoch " + std::to_string(t.epoch()) + " (to rank " + std::to_string(next) +
                   ", from rank " + std::to_string(prev) + ") did not finish before the connect deadline");
      t.abort(s);
      return s;
    }
    if (cancelled && cancelled()) {
      Status s(ErrorCode::kAborted, ErrorContext{t.rank(), prev, 0, t.epoch(), t.name()},
               "timing the links of epoch " + std::to_string(t.epoch()) +
                   " cancelled: a rank did not connect, or the runtime gave up on the epoch");
      t.abort(s);
      return s;
    }
    t.progress(cancelled ? deadline.earlier(Deadline::after(std::chrono::milliseconds(20)))
                         : deadline);
  }
}

std::string human_bytes(double b) {
  char s[32];
  if (b >= (1 << 20) && std::fmod(b, 1 << 20) == 0) {
    std::snprintf(s, sizeof(s), "%.0f MiB", b / (1 << 20));
  } else {
    std::snprintf(s, sizeof(s), "%.0f KiB", b / 1024);
  }
  return s;
}

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

}  // namespace

namespace {

// A token of the sample's text: no spaces, nothing unprintable, not empty.
bool plain_token(const std::string& t, size_t max_size) {
  if (t.empty() || t.size() > max_size) return false;
  return std::all_of(t.begin(), t.end(), [](char c) { return c > ' ' && c < 127; });
}

}  // namespace

std::string encode_sample(const LinkSample& s) {
  if (!s.valid) return "none";
  char text[96];
  std::snprintf(text, sizeof(text), "%.9g %.9g %lld", s.latency_s, s.bandwidth, static_cast<long long>(s.deadline_ms));
  std::string out = text;
  if (plain_token(s.host, kMaxHostBytes) && plain_token(s.cpus, kMaxCpuMaskDigits)) out += " " + s.host + " " + s.cpus;
  return out;
}

void describe_this_host(LinkSample* s) {
  s->host.clear();
  s->cpus.clear();
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(boot >> id) || !plain_token(id, kMaxHostBytes)) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return;
  // Hex digits from the highest CPU's down, as the kernel prints masks.
  int highest = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) highest = c;
  if (highest < 0) return;
  std::string mask;
  for (int digit = highest / 4; digit >= 0; --digit) {
    int v = 0;
    for (int b = 0; b < 4; ++b)
      if (CPU_ISSET(digit * 4 + b, &set)) v |= 1 << b;
    mask += "0123456789abcdef"[v];
  }
  s->host = id;
  s->cpus = mask;
}

int shared_cpus(const std::vector<LinkSample>& samples) {
  std::string mask;  // the union, lowest digit first
  const std::string* host = nullptr;
  for (const auto& s : samples) {
    if (!s.valid || s.host.empty() || s.cpus.empty()) return 0;
    if (host != nullptr && *host != s.host) return 0;
    host = &s.host;
    if (mask.size() < s.cpus.size()) mask.resize(s.cpus.size(), 0);
    for (size_t i = 0; i < s.cpus.size(); ++i) {
      const char c = s.cpus[s.cpus.size() - 1 - i];
      const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) return 0;
      mask[i] = static_cast<char>(mask[i] | v);
    }
  }
  int n = 0;
  for (char v : mask) n += std::popcount(static_cast<unsigned>(v));
  return n;
}

LinkSample decode_sample(const std::string& text) {
  LinkSample s;
  std::istringstream in(text);
  long long deadline = 0;
  if (!(in >> s.latency_s >> s.bandwidth >> deadline)) return LinkSample{};
  if (!(s.latency_s >= 0 && s.latency_s < 60) || !(s.bandwidth > 0 && std::isfinite(s.bandwidth)) || deadline < 0) {
    return LinkSample{};
  }
  s.deadline_ms = deadline;
  // Host and CPUs are optional (a sample without them never picks a
  // host-bound algorithm); when present, both or neither.
  std::string host, cpus;
  if (in >> host) {
    if (!(in >> cpus) || !plain_token(host, kMaxHostBytes) || !plain_token(cpus, kMaxCpuMaskDigits) ||
        cpus.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return LinkSample{};
    }
    s.host = host;
    s.cpus = cpus;
  }
  s.valid = true;
  return s;
}

LinkSummary summarize_links(const std::vector<LinkSample>& samples, bool moved) {
  LinkSummary out;
  out.worst = worst_link(samples);
  out.shared_cpus = shared_cpus(samples);
  out.moved = moved;
  for (size_t q = 0; q < samples.size(); ++q)
    if (!samples[q].valid) out.unmeasured.push_back(static_cast<int>(q));
  return out;
}

Bytes encode_link_value(const LinkSample& mine, bool moved, bool connected) {
  const std::string text = connected ? encode_sample(mine) : std::string();
  return encode_values({Bytes(text.begin(), text.end()), Bytes{static_cast<uint8_t>(moved ? 1 : 0)},
                        Bytes{static_cast<uint8_t>(connected ? 1 : 0)}});
}

namespace {

std::string rank_words(const std::vector<int>& ranks) {
  std::string out;
  for (int q : ranks) out += (out.empty() ? "" : " ") + std::to_string(q);
  return out;
}

bool read_ranks(const Bytes& words, std::vector<int>* out) {
  std::istringstream in(std::string(words.begin(), words.end()));
  for (int q; in >> q;) out->push_back(q);
  return in.eof();
}

}  // namespace

Bytes reduce_link_values(const std::vector<Bytes>& values) {
  std::vector<LinkSample> samples;
  samples.reserve(values.size());
  bool moved = false;
  std::vector<int> not_connected;
  for (const Bytes& v : values) {
    std::vector<Bytes> parts;
    if (!decode_values(v, 3, &parts) || parts[1].size() != 1 || parts[2].size() != 1) {
      samples.emplace_back();
      continue;
    }
    if (parts[2][0] != 1) not_connected.push_back(static_cast<int>(samples.size()));
    samples.push_back(decode_sample(std::string(parts[0].begin(), parts[0].end())));
    moved = moved || parts[1][0] == 1;
  }
  const LinkSummary s = summarize_links(samples, moved);
  const std::string worst = encode_sample(s.worst);
  const std::string unmeasured = rank_words(s.unmeasured);
  const std::string absent = rank_words(not_connected);
  const std::string cpus = std::to_string(s.shared_cpus);
  return encode_values({Bytes(worst.begin(), worst.end()), Bytes(cpus.begin(), cpus.end()),
                        Bytes{static_cast<uint8_t>(s.moved ? 1 : 0)},
                        Bytes(unmeasured.begin(), unmeasured.end()),
                        Bytes(absent.begin(), absent.end())});
}

bool decode_link_summary(const Bytes& reduced, LinkSummary* out) {
  std::vector<Bytes> parts;
  if (!decode_values(reduced, 5, &parts) || parts[2].size() != 1) return false;
  LinkSummary s;
  s.worst = decode_sample(std::string(parts[0].begin(), parts[0].end()));
  std::istringstream cpus(std::string(parts[1].begin(), parts[1].end()));
  if (!(cpus >> s.shared_cpus) || s.shared_cpus < 0) return false;
  s.moved = parts[2][0] == 1;
  if (!read_ranks(parts[3], &s.unmeasured) || !read_ranks(parts[4], &s.not_connected)) return false;
  *out = std::move(s);
  return true;
}

LinkSample worst_link(const std::vector<LinkSample>& samples) {
  LinkSample w;
  for (const auto& s : samples) {
    if (!s.valid) continue;
    if (!w.valid) {
      w = s;
      continue;
    }
    w.latency_s = std::max(w.latency_s, s.latency_s);
    w.bandwidth = std::min(w.bandwidth, s.bandwidth);
    if (s.deadline_ms > 0) w.deadline_ms = w.deadline_ms > 0 ? std::min(w.deadline_ms, s.deadline_ms) : s.deadline_ms;
  }
  return w;
}

namespace {

// The ring probe's steps. Each advances `t0`, the clock reading at the last
// boundary between rounds (bursts too), so that a stall between two rounds is
// charged to one of them rather than to none.
struct RingProbe {
  RingProbe(Transport& transport, Deadline d, const FrameHeader& header,
            std::function<bool()> cancel, bool bursts)
      : t(transport),
        deadline(d),
        cancelled(std::move(cancel)),
        prev((transport.rank() - 1 + transport.size()) % transport.size()),
        next((transport.rank() + 1) % transport.size()),
        h(header),
        // The bursts' buffers first: no allocation inside a timed round; none
        // at all where only the latency is timed (a recovery's: 2.1 MiB a
        // rank, allocated and zeroed for nothing).
        src(bursts ? kBurstFrameBytes : 0, 1),
        dst(bursts ? kBurstFrameBytes * kBurstFrames : 0),
        burst(bursts ? 2 * kBurstFrames : 0),
        t0(Clock::now()) {}

  Transport& t;
  Deadline deadline;
  std::function<bool()> cancelled;
  int prev, next;
  FrameHeader h;
  std::vector<char> src;
  std::vector<char> dst;
  std::vector<Request> burst;
  Clock::time_point t0;

  // An empty frame to the next rank while one arrives from the previous.
  Status empty_round(uint32_t chunk, uint16_t step) {
    Request reqs[2];
    h.chunk = chunk;
    h.step = step;
    h.payload_bytes = 0;
    t.post_recv(prev, h, nullptr, &reqs[0]);
    t.post_send(next, h, nullptr, &reqs[1]);
    return wait_all(t, reqs, 2, prev, next, deadline, cancelled);
  }

  // Latency: every rank sends an empty frame to the next and waits for the
  // one from the previous; a round takes one hop once the ranks are in step.
  // The fastest round after the first (which absorbs the ranks' skew): delays
  // from scheduling or queueing only add, so the minimum is the link's own
  // latency, and one descheduled round cannot inflate the tuning.
  Result<double> latency() {
    std::vector<double> rounds;
    for (int i = 0; i < kLatencyRounds; ++i) {
      if (Status s = empty_round(static_cast<uint32_t>(i), kLatencyStep); !s.ok()) return s;
      const auto t1 = Clock::now();
      rounds.push_back(std::chrono::duration<double>(t1 - t0).count());
      t0 = t1;
    }
    return *std::min_element(rounds.begin() + 1, rounds.end());
  }

  // Bandwidth: a burst to the next rank while one arrives from the previous,
  // kBurstRounds times, and the median burst counts. A stall (the rank
  // descheduled, a host's steal) slows one burst down; one taken while the
  // previous rank's next burst already waits in the socket speeds one up: the
  // median is neither. One burst alone measured 0.05-0.77 GB/s on one link
  // within an hour (3 ranks, 3 ms injected latency, a VM with steal), and the
  // epoch kept whichever it got: from 160 KiB x 4 to 1 MiB x 10 in flight.
  Result<double> bandwidth(double latency_s) {
    h.step = kBurstStep;
    h.payload_bytes = kBurstFrameBytes;
    std::vector<double> rates;
    for (int round = 0; round < kBurstRounds; ++round) {
      const size_t first_chunk = static_cast<size_t>(round) * kBurstFrames;
      for (size_t i = 0; i < kBurstFrames; ++i) {
        h.chunk = static_cast<uint32_t>(first_chunk + i);
        t.post_recv(prev, h, dst.data() + i * kBurstFrameBytes, &burst[i]);
      }
      for (size_t i = 0; i < kBurstFrames; ++i) {
        h.chunk = static_cast<uint32_t>(first_chunk + i);
        t.post_send(next, h, src.data(), &burst[kBurstFrames + i]);
      }
      if (Status s = wait_all(t, burst.data(), burst.size(), prev, next, deadline, cancelled);
          !s.ok())
        return s;
      const auto t1 = Clock::now();
      const double took = std::chrono::duration<double>(t1 - t0).count();
      t0 = t1;
      // The burst's time less the one hop its first frame took (never below half).
      const double moving = std::max(took - latency_s, took / 2);
      rates.push_back(static_cast<double>(kBurstFrameBytes * kBurstFrames) /
                      std::max(moving, 1e-9));
    }
    std::nth_element(rates.begin(), rates.begin() + kBurstRounds / 2, rates.end());
    return rates[kBurstRounds / 2];
  }
};

}  // namespace

Result<LinkSample> probe_ring(Transport& t, Deadline deadline, bool bandwidth_too,
                              const std::function<bool()>& cancelled) {
  FrameHeader h;
  h.type = FrameType::kData;
  h.op_kind = OpKind::kNone;
  h.epoch = t.epoch();
  h.root = -1;
  RingProbe probe(t, deadline, h, cancelled, bandwidth_too);
  LinkSample out;
  auto latency = probe.latency();
  if (!latency.ok()) return latency.status();
  out.latency_s = latency.value();
  if (!bandwidth_too) {
    out.valid = true;
    return out;
  }
  auto bandwidth = probe.bandwidth(out.latency_s);
  if (!bandwidth.ok()) return bandwidth.status();
  // One more empty round, sent only once the burst is complete here. A large
  // send completes only when its receiver has answered (UCX rendezvous), and a
  // rank that stopped driving its transport after its own burst could leave
  // that answer unsent: waiting for the previous rank's "done" keeps every
  // rank driving its transport until its neighbours' bursts are complete too.
  if (Status s = probe.empty_round(0, kDoneStep); !s.ok()) return s;
  out.bandwidth = bandwidth.value();
  out.valid = true;
  return out;
}

Tuning tune_for_link(const LinkSample& link, const Tuning& base, TuningPins pins) {
  Tuning t = base;
  if (!link.valid || (pins.piece && pins.window)) return t;
  // Bytes in flight per link that keep it busy while the oldest frame's
  // answer travels back: twice the bandwidth-delay product.
  const double need = 2.0 * link.bandwidth * (2.0 * link.latency_s);
  const int base_window = std::max(1, base.window);
  if (!pins.piece) {
    size_t piece = base.piece_bytes;
    if (need > static_cast<double>(piece) * base_window) {
      piece = std::min(round_up(static_cast<size_t>(need / base_window), 4096), kMaxPiece);
    }
    double cap = link.bandwidth * kFrameTime;
    if (link.deadline_ms > 0) cap = std::min(cap, link.bandwidth * (static_cast<double>(link.deadline_ms) / 1000.0) * kDeadlineShare);
    const size_t cap_bytes = cap >= static_cast<double>(kMaxPiece) ? kMaxPiece : static_cast<size_t>(cap) / 4096 * 4096;
    t.piece_bytes = std::max(kMinPiece, std::min(piece, cap_bytes));  // whole pages: every dtype divides it
    t.stream_piece_bytes = std::max(t.piece_bytes, cap_bytes);
  }
  if (!pins.window) {
    const double frames = std::ceil(need / static_cast<double>(t.piece_bytes));
    t.window = static_cast<int>(std::clamp(frames, static_cast<double>(base_window), static_cast<double>(kMaxWindow)));
  }
  return t;
}

std::string describe_tuning(const Tuning& t) {
  return human_bytes(static_cast<double>(t.piece_bytes)) + " frames x " + std::to_string(t.window) + " in flight";
}

std::string describe_link(const LinkSample& s) {
  if (!s.valid) return "not measured";
  char text[96];
  std::snprintf(text, sizeof(text), "latency %.1f us, %.2f GB/s", s.latency_s * 1e6, s.bandwidth / 1e9);
  return text;
}

void TuningSchedule::adopt(uint64_t from, const Tuning& t) {
  // A later adopt never starts before an earlier one (seqs only grow), but a
  // second recovery before any new op may restate the same point.
  while (!steps_.empty() && steps_.back().first >= from && steps_.size() > 1) steps_.pop_back();
  steps_.emplace_back(from, t);
}

const Tuning& TuningSchedule::for_collective(uint64_t seq) const {
  for (size_t i = steps_.size(); i-- > 0;) {
    if (steps_[i].first <= seq) return steps_[i].second;
  }
  return steps_.front().second;
}

void TuningSchedule::prune_before(uint64_t seq) {
  size_t keep = 0;
  for (size_t i = 0; i < steps_.size(); ++i)
    if (steps_[i].first <= seq) keep = i;
  if (keep > 0) steps_.erase(steps_.begin(), steps_.begin() + static_cast<std::ptrdiff_t>(keep));
}

}  // namespace rcoll
