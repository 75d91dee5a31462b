// The table of transports (transports/factory.h). Apart from connecting, so
// that option parsing links without any transport (the env fuzzer does).
#include <array>

#include "transports/factory.h"

#ifndef RCOLL_HAVE_UCX
#define RCOLL_HAVE_UCX 0
#endif
#ifndef RCOLL_HAVE_NCCL
#define RCOLL_HAVE_NCCL 0
#endif

namespace rcoll {

namespace {

constexpr std::array<TransportInfo, 3> kTransports{{
    {"nccl", RCOLL_HAVE_NCCL != 0, false, true},
    {"ucx", RCOLL_HAVE_UCX != 0, true, false},
    {"tcp", true, true, false},
}};

}  // namespace

std::span<const TransportInfo> known_transports() { return kTransports; }

const TransportInfo* find_transport(std::string_view name) {
  for (const auto& t : kTransports) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const std::string& transport_names_or() {
  // Cheapest first, as the README lists them.
  static const std::string names = [] {
    std::string s;
    for (size_t i = kTransports.size(); i-- > 0;) {
      s += kTransports[i].name;
      s += i > 1 ? ", " : i == 1 ? " or " : "";
    }
    return s;
  }();
  return names;
}

std::vector<std::string> built_transports() {
  std::vector<std::string> names;
  for (const auto& t : kTransports) {
    if (t.built) names.emplace_back(t.name);
  }
  return names;
}

bool transport_built(std::string_view name) {
  const TransportInfo* t = find_transport(name);
  return t != nullptr && t->built;
}

}  // namespace rcoll
