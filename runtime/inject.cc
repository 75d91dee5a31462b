#include "runtime/inject.h"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <new>
#include <set>
#include <stdexcept>
#include <string>

#include "base/log.h"
#include "transports/factory.h"

namespace rcoll {

const char* to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::kCloseLink: return "close-link";
    case FaultKind::kStall: return "stall";
    case FaultKind::kKill: return "kill";
    case FaultKind::kDelayChunk: return "delay-chunk";
    case FaultKind::kDropChunk: return "drop-chunk";
    case FaultKind::kFailConnect: return "fail-connect";
    case FaultKind::kRandom: return "random";
    case FaultKind::kLinkLatency: return "link-latency";
    case FaultKind::kBadAlloc: return "bad-alloc";
    case FaultKind::kThrow: return "throw";
    case FaultKind::kHang:
      return "hang";
  }
  return "?";
}

namespace {

struct KindInfo {
  FaultKind kind;
  std::set<std::string> required;
  std::set<std::string> optional;
};

const std::map<std::string, KindInfo>& kinds() {
  static const std::map<std::string, KindInfo> k = {
      {"close-link", {FaultKind::kCloseLink, {"rank", "op"}, {"peer", "at"}}},
      {"stall", {FaultKind::kStall, {"rank", "op", "ms"}, {}}},
      {"kill", {FaultKind::kKill, {"rank", "op"}, {"at"}}},
      {"delay-chunk", {FaultKind::kDelayChunk, {"rank", "op", "ms"}, {}}},
      {"drop-chunk", {FaultKind::kDropChunk, {"rank", "op"}, {}}},
      {"fail-connect", {FaultKind::kFailConnect, {"transport", "count"}, {"rank", "epoch"}}},
      {"random", {FaultKind::kRandom, {"rate", "seed"}, {"kinds"}}},
      {"link-latency", {FaultKind::kLinkLatency, {"us"}, {"rank", "epoch"}}},
      {"bad-alloc", {FaultKind::kBadAlloc, {"rank", "op"}, {}}},
      {"throw", {FaultKind::kThrow, {"rank", "op"}, {}}},
      {"hang", {FaultKind::kHang, {"rank", "op"}, {}}},
  };
  return k;
}

Status bad(const std::string& fault, const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, "RCOLL_INJECT: fault '" + fault + "': " + why);
}

Result<int64_t> parse_int(const std::string& fault, const std::string& key, const std::string& v, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || errno != 0 || *end != '\0' || x < lo || x > hi) {
    return bad(fault, key + "='" + v + "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int64_t>(x);
}

}  // namespace

void throw_injected(FaultKind kind, int rank, uint64_t op_seq, const std::string& op) {
  if (kind == FaultKind::kBadAlloc) {
    RCOLL_LOG(kWarn, "fault injection: %s throws std::bad_alloc, as a failed allocation would",
              op.c_str());
    throw std::bad_alloc();
  }
  RCOLL_LOG(kWarn, "fault injection: %s throws std::runtime_error, as a defect would", op.c_str());
  throw std::runtime_error("injected by RCOLL_INJECT throw:rank=" + std::to_string(rank) +
                           ",op=" + std::to_string(op_seq));
}

Result<std::vector<Fault>> parse_fault_spec(const std::string& spec) {
  std::vector<Fault> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t semi = spec.find(';', start);
    if (semi == std::string::npos) semi = spec.size();
    std::string item = spec.substr(start, semi - start);
    start = semi + 1;
    // Trim spaces.
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) continue;
    size_t colon = item.find(':');
    std::string name = item.substr(0, colon);
    auto it = kinds().find(name);
    if (it == kinds().end()) {
      return bad(item, "unknown kind '" + name +
                           "' (kinds: close-link, stall, kill, delay-chunk, drop-chunk, hang, "
                           "fail-connect, random, link-latency, bad-alloc, throw)");
    }
    const KindInfo& info = it->second;
    Fault f;
    f.kind = info.kind;
    std::set<std::string> seen;
    std::string body = colon == std::string::npos ? "" : item.substr(colon + 1);
    size_t p = 0;
    while (p <= body.size() && !body.empty()) {
      size_t comma = body.find(',', p);
      if (comma == std::string::npos) comma = body.size();
      std::string kv = body.substr(p, comma - p);
      p = comma + 1;
      size_t eq = kv.find('=');
      if (eq == std::string::npos) return bad(item, "'" + kv + "' is not key=value");
      std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
      if (!info.required.count(key) && !info.optional.count(key)) return bad(item, "unknown key '" + key + "' for " + name);
      if (!seen.insert(key).second) return bad(item, "key '" + key + "' given twice");
      if (key == "rank" || key == "peer") {
        auto v = parse_int(item, key, value, 0, 1 << 20);
        if (!v.ok()) return v.status();
        (key == "rank" ? f.rank : f.peer) = static_cast<int>(v.value());
      } else if (key == "op") {
        auto v = parse_int(item, key, value, 1, INT64_MAX);
        if (!v.ok()) return v.status();
        f.op = static_cast<uint64_t>(v.value());
      } else if (key == "epoch") {
        auto v = parse_int(item, key, value, 0, UINT32_MAX);
        if (!v.ok()) return v.status();
        f.epoch = static_cast<uint32_t>(v.value());
      } else if (key == "ms") {
        auto v = parse_int(item, key, value, 0, 3600 * 1000);
        if (!v.ok()) return v.status();
        f.ms = v.value();
      } else if (key == "us") {
        auto v = parse_int(item, key, value, 1, 10 * 1000 * 1000);
        if (!v.ok()) return v.status();
        f.us = v.value();
      } else if (key == "count") {
        auto v = parse_int(item, key, value, 1, 1000000);
        if (!v.ok()) return v.status();
        f.count = static_cast<int>(v.value());
      } else if (key == "at" && f.kind == FaultKind::kCloseLink) {
        if (value != "done") {
          return bad(item,
                     "at='" + value +
                         "' is not done (on NCCL: once the op's slices are done, before the rank "
                         "counts them)");
        }
        f.at = value;
      } else if (key == "at") {
        if (value != "ledgers" && value != "connect" && value != "confirm") {
          return bad(item, "at='" + value +
                               "' is not ledgers or connect (a step of a recovery during the op) "
                               "or confirm (the op's confirmation round)");
        }
        f.at = value;
      } else if (key == "seed") {
        auto v = parse_int(item, key, value, 0, INT64_MAX);
        if (!v.ok()) return v.status();
        f.seed = static_cast<uint64_t>(v.value());
      } else if (key == "transport") {
        if (find_transport(value) == nullptr) {
          return bad(item, "transport '" + value + "' is not " + transport_names_or());
        }
        f.transport = value;
      } else if (key == "rate") {
        char* end = nullptr;
        errno = 0;
        double r = std::strtod(value.c_str(), &end);
        if (value.empty() || errno != 0 || *end != '\0' || !(r > 0.0 && r <= 1.0)) return bad(item, "rate='" + value + "' is not a number in (0, 1]");
        f.rate = r;
      } else if (key == "kinds") {
        size_t q = 0;
        while (q <= value.size()) {
          size_t plus = value.find('+', q);
          if (plus == std::string::npos) plus = value.size();
          std::string k = value.substr(q, plus - q);
          q = plus + 1;
          auto kit = kinds().find(k);
          if (kit == kinds().end() || kit->second.kind == FaultKind::kRandom ||
              kit->second.kind == FaultKind::kFailConnect ||
              kit->second.kind == FaultKind::kLinkLatency ||
              kit->second.kind == FaultKind::kBadAlloc || kit->second.kind == FaultKind::kThrow ||
              kit->second.kind == FaultKind::kHang) {
            return bad(item, "kinds='" + value + "': '" + k + "' cannot be drawn at random");
          }
          f.random_kinds.push_back(kit->second.kind);
        }
      }
    }
    for (const auto& req : info.required) {
      if (!seen.count(req)) return bad(item, "missing key '" + req + "'");
    }
    if (f.kind == FaultKind::kRandom && f.random_kinds.empty()) {
      f.random_kinds = {FaultKind::kCloseLink, FaultKind::kDelayChunk};
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace rcoll
