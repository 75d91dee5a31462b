// The transports rcoll knows, in one place: their names, whether this build
// has them, what memory they move, and how to connect one. Option parsing,
// the fault injector, the fallback chain and the epoch setup ask here instead
// of spelling transport names themselves; a new transport is added here (and
// in its own folder), nowhere else.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/deadline.h"
#include "rcoll/status.h"
#include "rcoll/store.h"
#include "transports/tcp/mesh_listener.h"
#include "transports/transport.h"
#include "transports/ucx/ucx_transport.h"

namespace rcoll {

struct TransportInfo {
  std::string_view name;  // as in RCOLL_TRANSPORT, RCOLL_TRANSPORTS, fault specs and ErrorContext
  bool built;             // compiled into this library
  bool host_memory;       // moves host buffers (can carry a communicator's epoch)
  bool device_memory;     // moves device buffers only (collectives on GPU buffers)
};

// Every transport rcoll knows, in the default order of preference.
std::span<const TransportInfo> known_transports();
// The entry for `name`, or null when rcoll knows no such transport.
const TransportInfo* find_transport(std::string_view name);
// "tcp, ucx or nccl": for messages that reject an unknown name.
const std::string& transport_names_or();
// The names of the transports built in, in the default order.
std::vector<std::string> built_transports();
bool transport_built(std::string_view name);

// What connecting one epoch of a host transport needs. Each transport reads
// the fields it uses (tcp: the interface and socket fields; ucx: error_mode,
// cancelled).
struct HostConnectParams {
  int rank = 0;
  int size = 1;
  uint32_t epoch = 0;
  std::shared_ptr<Store> store;  // already namespaced for the communicator
  std::string key_prefix;        // this epoch's addresses go under key_prefix<rank>
  std::string job_token;
  bool one_host = true;            // every rank on this host
  std::string ifname_spec;         // RCOLL_SOCKET_IFNAME syntax (tcp)
  std::string route_address;       // source address of the route to the store (tcp)
  size_t socket_buffer_bytes = 0;  // tcp: SO_SNDBUF/SO_RCVBUF; ucx: bytes a send copies aside
  std::string tcp_congestion = "auto";
  UcxErrorMode ucx_error_mode = UcxErrorMode::kAuto;
  Deadline deadline = Deadline::never();
  std::chrono::microseconds spin{50};
  // Polled while waiting for peers: true ends the connect at once (another
  // rank already gave up on this epoch). May be empty.
  std::function<bool()> cancelled;
  // tcp: the listener kept from epoch to epoch (TcpConnectParams::kept).
  std::shared_ptr<KeptListener> tcp_kept;
};

// Connects one epoch of the host transport `name`. Fails with kUnsupported
// (naming the transport) when this build has no such host transport, else
// as that transport's connect does.
Result<std::unique_ptr<Transport>> connect_host_transport(std::string_view name,
                                                          const HostConnectParams& params);

}  // namespace rcoll
