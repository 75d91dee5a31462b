#include "transports/factory.h"

#include "transports/tcp/tcp_transport.h"

namespace rcoll {

namespace {

Result<std::unique_ptr<Transport>> connect_tcp(const HostConnectParams& h) {
  TcpConnectParams p;
  p.rank = h.rank;
  p.size = h.size;
  p.epoch = h.epoch;
  p.store = h.store;
  p.key_prefix = h.key_prefix;
  p.ifname_spec = h.ifname_spec;
  p.prefer_loopback = h.one_host;
  p.route_address = h.route_address;
  p.job_token = h.job_token;
  p.socket_buffer_bytes = h.socket_buffer_bytes;
  p.congestion = h.tcp_congestion;
  p.deadline = h.deadline;
  p.spin = h.spin;
  p.cancelled = h.cancelled;
  p.kept = h.tcp_kept;
  return connect_tcp_transport(p);
}

#if RCOLL_HAVE_UCX
Result<std::unique_ptr<Transport>> connect_ucx(const HostConnectParams& h) {
  UcxConnectParams p;
  p.rank = h.rank;
  p.size = h.size;
  p.epoch = h.epoch;
  p.store = h.store;
  p.key_prefix = h.key_prefix;
  p.job_token = h.job_token;
  p.one_host = h.one_host;
  p.error_mode = h.ucx_error_mode;
  p.deadline = h.deadline;
  p.spin = h.spin;
  p.buffered_send_bytes = h.socket_buffer_bytes;
  p.cancelled = h.cancelled;
  return connect_ucx_transport(p);
}
#endif

}  // namespace

Result<std::unique_ptr<Transport>> connect_host_transport(std::string_view name,
                                                          const HostConnectParams& params) {
  if (name == "tcp") return connect_tcp(params);
#if RCOLL_HAVE_UCX
  if (name == "ucx") return connect_ucx(params);
#endif
  const TransportInfo* t = find_transport(name);
  const std::string why = t == nullptr      ? "is not " + transport_names_or()
                          : !t->host_memory ? "moves device buffers only and cannot carry an epoch"
                                            : "is not available in this build";
  return Status(
      ErrorCode::kUnsupported,
      ErrorContext{params.rank, -1, 0, static_cast<int64_t>(params.epoch), std::string(name)},
      "transport '" + std::string(name) + "' " + why);
}

}  // namespace rcoll
