// How the stores' errors and log lines show a key, an address and an errno:
// one spelling for the TCP store's client and server and the file store.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace rcoll::store {

// "host:port", or "[host]:port" for an IPv6 address.
inline std::string host_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

// The key quoted; a key longer than 200 bytes shows its first 200 and its length.
inline std::string key_text(const std::string& key) {
  constexpr size_t kShown = 200;
  if (key.size() <= kShown) return "\"" + key + "\"";
  return "\"" + key.substr(0, kShown) + "...\" (" + std::to_string(key.size()) + " bytes)";
}

inline std::string errno_text(int err) { return std::strerror(err); }

}  // namespace rcoll::store
