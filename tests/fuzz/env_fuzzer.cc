// libFuzzer target: the parsers of what users type. The input is split at
// newlines: line 1 is an RCOLL_INJECT spec, line 2 an RCOLL_SOCKET_IFNAME spec,
// line 3 an RCOLL_STORE_ADDR value, and the rest are values for the RCOLL_*
// variables apply_env_overrides reads, in order. Every parser must accept or
// return an error naming the variable, never crash, hang or allocate without
// bound; an accepted value must be in its documented range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "rcoll/options.h"
#include "runtime/env.h"
#include "runtime/inject.h"
#include "transports/tcp/interfaces.h"

namespace {

const char* const kVars[] = {
    "RCOLL_TRANSPORT",           "RCOLL_OP_TIMEOUT_MS",      "RCOLL_HANG_TIMEOUT_MS",
    "RCOLL_CONNECT_TIMEOUT_MS",  "RCOLL_RECOVERY",           "RCOLL_SHRINK",
    "RCOLL_RECOVERY_TIMEOUT_MS", "RCOLL_LIVENESS_MS",        "RCOLL_STRAGGLER_TIMEOUT_MS",
    "RCOLL_CHUNK_BYTES",         "RCOLL_SOCKET_BUFFER_BYTES"};

std::vector<std::string> lines(const uint8_t* data, size_t size) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      out.emplace_back();
    } else {
      out.back().push_back(static_cast<char>(data[i]));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rcoll;
  auto in = lines(data, size);
  // getenv/setenv need C strings: an embedded NUL ends the value, as in a real environment.
  for (auto& l : in) l = std::string(l.c_str());

  auto faults = parse_fault_spec(in[0]);
  if (faults.ok()) {
    for (const Fault& f : faults.value()) {
      if (f.kind == FaultKind::kRandom && (f.random_kinds.empty() || !(f.rate > 0 && f.rate <= 1))) std::abort();
      if (f.ms < 0 || f.ms > 3600 * 1000) std::abort();
    }
  } else if (faults.status().message().rfind("RCOLL_INJECT: ", 0) != 0) {
    std::abort();  // every error names the variable
  }

  static const std::vector<NetInterface> kInterfaces = {{"lo", "127.0.0.1", true, false},
                                                        {"eth0", "10.0.0.1", false, false},
                                                        {"eth1", "10.0.1.1", false, false},
                                                        {"docker0", "172.17.0.1", false, false},
                                                        {"ib0", "fe80::1", false, true}};
  if (in.size() > 1) {
    auto i = select_interface(kInterfaces, in[1], false);
    if (!i.ok() && i.status().message().find("RCOLL_SOCKET_IFNAME") == std::string::npos) std::abort();
  }
  if (in.size() > 2) {
    auto hp = split_host_port(in[2], "RCOLL_STORE_ADDR");
    if (hp.ok() && hp.value().second == 0) std::abort();
  }

  for (const char* v : kVars) ::unsetenv(v);
  for (size_t k = 0; k < sizeof(kVars) / sizeof(kVars[0]) && k + 3 < in.size(); ++k) {
    ::setenv(kVars[k], in[k + 3].c_str(), 1);
  }
  Options o;
  Status s = apply_env_overrides(&o);
  if (s.ok()) {
    if (o.transport != "auto" && o.transport != "tcp" && o.transport != "ucx" && o.transport != "nccl") std::abort();
    if (o.chunk_bytes != 0 && (o.chunk_bytes < 64 || o.chunk_bytes > (size_t{1} << 30))) std::abort();
    if (o.socket_buffer_bytes != 0 && (o.socket_buffer_bytes < kMinSocketBufferBytes ||
                                       o.socket_buffer_bytes > (size_t{1} << 30)))
      std::abort();
    if (o.liveness_budget.count() < 50) std::abort();
  } else if (s.message().find("RCOLL_") == std::string::npos) {
    std::abort();
  }
  return 0;
}
