#include "transports/tcp/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <netinet/in.h>

#include <string>
#include <string_view>
#include <vector>

namespace rcoll {
namespace {

struct Matcher {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  bool matches(const std::string& ifname) const {
    bool hit = false;
    for (const auto& n : names) {
      if (exact ? ifname == n : ifname.rfind(n, 0) == 0) hit = true;
    }
    return exclude ? !hit : hit;
  }
};

Matcher parse_spec(std::string_view spec) {
  Matcher m;
  if (!spec.empty() && spec.front() == '^') {
    m.exclude = true;
    spec.remove_prefix(1);
  }
  if (!spec.empty() && spec.front() == '=') {
    m.exact = true;
    spec.remove_prefix(1);
  }
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos) comma = spec.size();
    auto item = spec.substr(start, comma - start);
    if (!item.empty()) m.names.emplace_back(item);
    start = comma + 1;
  }
  return m;
}

bool is_virtual_bridge(const std::string& name) {
  return name.rfind("docker", 0) == 0 || name.rfind("virbr", 0) == 0 || name.rfind("veth", 0) == 0;
}

}  // namespace

std::vector<NetInterface> list_interfaces() {
  std::vector<NetInterface> out;
  ifaddrs* head = nullptr;
  if (::getifaddrs(&head) != 0) return out;
  for (ifaddrs* it = head; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || (it->ifa_flags & IFF_UP) == 0) continue;
    int family = it->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, buf, sizeof(buf));
    } else {
      auto* a6 = reinterpret_cast<sockaddr_in6*>(it->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;  // needs a scope id; skip
      ::inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof(buf));
    }
    out.push_back(NetInterface{it->ifa_name, buf, (it->ifa_flags & IFF_LOOPBACK) != 0,
                               family == AF_INET6});
  }
  ::freeifaddrs(head);
  // IPv4 before IPv6 for the same interface, so the first match is the common case.
  std::stable_sort(out.begin(), out.end(),
                   [](const NetInterface& a, const NetInterface& b) { return !a.ipv6 && b.ipv6; });
  return out;
}

std::string describe_interfaces(const std::vector<NetInterface>& all) {
  std::string s;
  for (const auto& i : all) {
    if (!s.empty()) s += ", ";
    s += i.name + " " + i.address;
  }
  return s.empty() ? "none" : s;
}

std::string route_source_address(const std::string& host) {
  if (host.empty()) return "";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &list) != 0) return "";
  std::string out;
  for (addrinfo* ai = list; ai != nullptr && out.empty(); ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      if (local.ss_family == AF_INET) {
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, buf, sizeof(buf));
      } else if (local.ss_family == AF_INET6) {
        ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, buf, sizeof(buf));
      }
      out = buf;
    }
    ::close(fd);
  }
  ::freeaddrinfo(list);
  return out;
}

Result<NetInterface> select_interface(const std::vector<NetInterface>& all, const std::string& spec,
                                      bool prefer_loopback, const std::string& route_address) {
  if (!spec.empty()) {
    Matcher m = parse_spec(spec);
    for (const auto& i : all)
      if (m.matches(i.name)) return i;
    return Status(ErrorCode::kInvalidArgument,
                  "no network interface matches RCOLL_SOCKET_IFNAME='" + spec +
                      "'; interfaces that are up: " + describe_interfaces(all));
  }
  if (prefer_loopback) {
    for (const auto& i : all)
      if (i.loopback) return i;
  }
  if (!route_address.empty()) {
    for (const auto& i : all)
      if (i.address == route_address) return i;
  }
  for (const auto& i : all)
    if (!i.loopback && !is_virtual_bridge(i.name)) return i;
  for (const auto& i : all)
    if (i.loopback) return i;
  if (!all.empty()) return all.front();
  return Status(ErrorCode::kInvalidArgument, "no network interface is up");
}

}  // namespace rcoll
