// A pipeline as NCCL users write it, one process per stage (started by
// rcoll-run): every iteration each stage sends to the next stage and
// receives from the previous one, in one group (ncclGroupStart/End's
// equivalent, Communicator::group_async), messages of 1.4-7.2 MB whose size
// depends on the sending stage and the iteration. Every received buffer is
// checked element by element against what its sender must have sent.
//
//   --topology ring|chain   ring: stage s -> s+1 mod P; chain: 0 -> 1 -> ... -> P-1
//   --iters N               iterations (30)
//   --min-bytes / --max-bytes  the range of message sizes (1.4M / 7.2M)
//   --mode grouped|ungrouped   ungrouped: each stage posts its receive, then its
//                           send, one by one (around a ring: a cycle of waits)
//   --straggler R --straggler-iter I --straggler-ms MS
//                           stage R computes MS ms before iteration I
//   --skip-send R --skip-iter I   stage R skips its send in iteration I
//   --expect ok|desync      ok: every iteration correct; desync: the run must
//                           fail with kDesync (any other outcome fails)
//   --max-recoveries N      at most N recoveries on this stage
//   --min-recoveries N      at least N (the faults injected did fire)
//   --late R --late-ms MS   stage R creates its communicator MS ms after the others
//
// Exit code 0 = as expected; 1 = not (printed).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "rcoll/rcoll.h"

using namespace rcoll;

namespace {

size_t parse_bytes(const std::string& s) {
  double v = std::stod(s);
  if (s.back() == 'K') v *= 1e3;
  if (s.back() == 'M') v *= 1e6;
  return static_cast<size_t>(v);
}

// The message stage `s` sends in iteration `i`: a size in [min, max] that
// varies with both (so a skipped send shows as a size mismatch), and values
// no other stage or iteration sends at the same place.
size_t message_floats(int s, int i, size_t min_bytes, size_t max_bytes) {
  const size_t span = max_bytes - min_bytes;
  const size_t step = static_cast<size_t>((s * 7 + i * 13) % 17);
  return (min_bytes + span * step / 16) / sizeof(float);
}
float value(int s, int i, size_t k) {
  return static_cast<float>((static_cast<size_t>(s) * 131 + static_cast<size_t>(i) * 17 + k) %
                            65521);
}

}  // namespace

int main(int argc, char** argv) {
  std::string topology = "ring", mode = "grouped", expect = "ok";
  int iters = 30, late = -1, straggler = -1, straggler_iter = -1, skip_send = -1, skip_iter = -1;
  long late_ms = 0, straggler_ms = 0, max_recoveries = -1, min_recoveries = 0;
  size_t min_bytes = 1400000, max_bytes = 7200000;
  const std::map<std::string, std::function<void(const std::string&)>> flags = {
      {"--topology", [&](const std::string& v) { topology = v; }},
      {"--iters", [&](const std::string& v) { iters = std::stoi(v); }},
      {"--min-bytes", [&](const std::string& v) { min_bytes = parse_bytes(v); }},
      {"--max-bytes", [&](const std::string& v) { max_bytes = parse_bytes(v); }},
      {"--mode", [&](const std::string& v) { mode = v; }},
      {"--straggler", [&](const std::string& v) { straggler = std::stoi(v); }},
      {"--straggler-iter", [&](const std::string& v) { straggler_iter = std::stoi(v); }},
      {"--straggler-ms", [&](const std::string& v) { straggler_ms = std::stol(v); }},
      {"--skip-send", [&](const std::string& v) { skip_send = std::stoi(v); }},
      {"--skip-iter", [&](const std::string& v) { skip_iter = std::stoi(v); }},
      {"--expect", [&](const std::string& v) { expect = v; }},
      {"--max-recoveries", [&](const std::string& v) { max_recoveries = std::stol(v); }},
      {"--min-recoveries", [&](const std::string& v) { min_recoveries = std::stol(v); }},
      {"--late", [&](const std::string& v) { late = std::stoi(v); }},
      {"--late-ms", [&](const std::string& v) { late_ms = std::stol(v); }},
  };
  for (int a = 1; a + 1 < argc; a += 2) {
    auto flag = flags.find(argv[a]);
    if (flag == flags.end()) {
      std::fprintf(stderr, "pipeline_worker: unknown option %s\n", argv[a]);
      return 2;
    }
    flag->second(argv[a + 1]);
  }
  if (const char* r = std::getenv("RCOLL_RANK"); r != nullptr && std::atoi(r) == late) {
    std::printf("stage %d: starting %ld ms late\n", late, late_ms);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
  }
  Communicator comm = Communicator::create();
  const int s = comm.rank(), p = comm.size();
  const bool ring = topology == "ring";
  const int next = ring || s + 1 < p ? (s + 1) % p : -1;
  const int prev = ring || s > 0 ? (s - 1 + p) % p : -1;
  const auto t0 = std::chrono::steady_clock::now();
  long checked = 0;
  for (int i = 0; i < iters; ++i) {
    if (s == straggler && i == straggler_iter) {
      std::printf("stage %d: computing for %ld ms before iteration %d\n", s, straggler_ms, i);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(straggler_ms));
    }
    std::vector<float> out, in;
    std::vector<PeerOp> group;
    if (next >= 0 && !(s == skip_send && i == skip_iter)) {
      out.resize(message_floats(s, i, min_bytes, max_bytes));
      for (size_t k = 0; k < out.size(); ++k) out[k] = value(s, i, k);
      group.push_back(PeerOp::send(Buffer::of(out), next));
    }
    if (prev >= 0) {
      in.assign(message_floats(prev, i, min_bytes, max_bytes), -1.0f);
      group.push_back(PeerOp::recv(Buffer::of(in), prev));
    }
    Status st;
    if (mode == "grouped") {
      st = comm.group_async(group).wait();
    } else {
      // Receive first, then send: around a ring every stage waits on the one before.
      std::vector<Work> works;
      for (auto it = group.rbegin(); it != group.rend(); ++it)
        works.push_back(it->is_send ? comm.send_async(it->data, it->peer)
                                    : comm.recv_async(it->data, it->peer));
      for (auto& w : works) {
        Status one = w.wait();
        if (st.ok()) st = one;
      }
    }
    if (!st.ok()) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("stage %d: iteration %d failed after %.1f s: %s\n", s, i, secs,
                  st.to_string().c_str());
      if (expect == "desync" && st.code() == ErrorCode::kDesync) {
        std::printf("stage %d: failed with kDesync as expected\n", s);
        return 0;
      }
      return 1;
    }
    for (size_t k = 0; k < in.size(); ++k) {
      if (in[k] != value(prev, i, k)) {
        std::printf("stage %d: iteration %d: element %zu from stage %d is %g, want %g\n", s, i, k,
                    prev, static_cast<double>(in[k]), static_cast<double>(value(prev, i, k)));
        return 1;
      }
    }
    checked += static_cast<long>(in.size());
  }
  const Counters c = comm.counters();
  std::printf(
      "stage %d: %d iterations, %ld floats checked, %llu recoveries, transport %s, %.2f s\n", s,
      iters, checked, static_cast<unsigned long long>(c.recoveries), c.transport.c_str(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (expect != "ok") {
    std::printf("stage %d: completed, but expected %s\n", s, expect.c_str());
    return 1;
  }
  if (max_recoveries >= 0 && static_cast<long>(c.recoveries) > max_recoveries) {
    std::printf("stage %d: %llu recoveries, at most %ld allowed\n", s,
                static_cast<unsigned long long>(c.recoveries), max_recoveries);
    return 1;
  }
  if (static_cast<long>(c.recoveries) < min_recoveries) {
    std::printf("stage %d: %llu recoveries, at least %ld expected\n", s,
                static_cast<unsigned long long>(c.recoveries), min_recoveries);
    return 1;
  }
  return 0;
}
