// Network interface selection with NCCL's RCOLL_SOCKET_IFNAME syntax:
//   "eth,ib"  interfaces whose name starts with eth or ib
//   "^docker" every interface except those starting with docker
//   "=eth0"   exactly eth0 ("^=eth0": all but exactly eth0)
#pragma once

#include <string>
#include <vector>

#include "rcoll/status.h"

namespace rcoll {

struct NetInterface {
  std::string name;
  std::string address;  // numeric IPv4 or IPv6
  bool loopback = false;
  bool ipv6 = false;
};

// Every interface that is up and has an address.
std::vector<NetInterface> list_interfaces();

// Applies `spec` (may be empty) to `all`. With an empty spec: loopback when
// `prefer_loopback` (all ranks on this host); else the interface that owns
// `route_address` (the source address of the route toward the store, see
// route_source_address) when one does; else non-loopback, non-docker/virbr
// interfaces first, loopback when nothing else is up.
Result<NetInterface> select_interface(const std::vector<NetInterface>& all, const std::string& spec,
                                      bool prefer_loopback, const std::string& route_address = "");

// The local address the kernel would send from to reach `host` (numeric or a
// name; nothing is sent: a UDP socket is connected and asked for its name), or
// "" when there is no route. A rank with several interfaces uses this to pick
// the one that reaches the rest of the job instead of the first one listed.
std::string route_source_address(const std::string& host);

// "lo 127.0.0.1, eth0 10.1.2.3" for error messages.
std::string describe_interfaces(const std::vector<NetInterface>& all);

}  // namespace rcoll
