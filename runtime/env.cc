#include "runtime/env.h"

#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <string>

#include "base/deadline.h"
#include "base/log.h"
#include "transports/factory.h"

namespace rcoll {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

Result<std::optional<long long>> env_int(const char* name, long long lo, long long hi) {
  auto s = env_string(name);
  if (!s) return std::optional<long long>();
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s->c_str(), &end, 10);
  if (errno != 0 || end == s->c_str() || *end != '\0' || v < lo || v > hi) {
    return Status(ErrorCode::kInvalidArgument, std::string(name) + "='" + *s + "' is not an integer in [" +
                                                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return std::optional<long long>(v);
}

Result<std::pair<std::string, uint16_t>> split_host_port(const std::string& addr, const char* var) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) {
    return Status(ErrorCode::kInvalidArgument, std::string(var) + "='" + addr + "' is not HOST:PORT");
  }
  std::string host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(addr.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 1 || port > 65535) {
    return Status(ErrorCode::kInvalidArgument, std::string(var) + "='" + addr + "' has no valid port");
  }
  return std::make_pair(host, static_cast<uint16_t>(port));
}

namespace {

struct Identity {
  const char* source;
  const char* rank;
  const char* size;
};
constexpr Identity kIdentities[] = {
    {"RCOLL_RANK/RCOLL_WORLD_SIZE", "RCOLL_RANK", "RCOLL_WORLD_SIZE"},
    {"torchrun (RANK/WORLD_SIZE)", "RANK", "WORLD_SIZE"},
    {"Open MPI (OMPI_COMM_WORLD_RANK/SIZE)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI (PMI_RANK/PMI_SIZE)", "PMI_RANK", "PMI_SIZE"},
    {"Slurm (SLURM_PROCID/SLURM_NTASKS)", "SLURM_PROCID", "SLURM_NTASKS"},
};

Status resolve_identity(const Options& o, Bootstrap* b) {
  if (o.rank >= 0 || o.world_size >= 0) {
    if (o.rank < 0 || o.world_size < 1 || o.rank >= o.world_size) {
      return Status(ErrorCode::kInvalidArgument, "Options.rank=" + std::to_string(o.rank) + " and Options.world_size=" +
                                                     std::to_string(o.world_size) + " must satisfy 0 <= rank < world_size");
    }
    b->rank = o.rank;
    b->size = o.world_size;
    b->identity_source = "options";
    return Status();
  }
  for (const auto& id : kIdentities) {
    auto rank = env_int(id.rank, 0, 1 << 20);
    auto size = env_int(id.size, 1, 1 << 20);
    if (!rank.ok()) return rank.status();
    if (!size.ok()) return size.status();
    if (!rank.value() && !size.value()) continue;
    if (!rank.value() || !size.value()) {
      return Status(ErrorCode::kInvalidArgument, std::string(id.rank) + " and " + id.size + " must be set together");
    }
    if (*rank.value() >= *size.value()) {
      return Status(ErrorCode::kInvalidArgument, std::string(id.rank) + "=" + std::to_string(*rank.value()) + " is not below " +
                                                     id.size + "=" + std::to_string(*size.value()));
    }
    b->rank = static_cast<int>(*rank.value());
    b->size = static_cast<int>(*size.value());
    b->identity_source = id.source;
    return Status();
  }
  b->rank = 0;
  b->size = 1;
  b->identity_source = "default (no launcher variables: a single rank)";
  return Status();
}

Status connect_store(const Options& o, Bootstrap* b, const std::string& host, uint16_t port, bool serve,
                     const std::string& origin) {
  TcpStoreOptions so;
  so.host = host;
  so.port = port;
  so.token = b->job_token;
  so.connect_timeout = o.connect_timeout;
  if (serve) {
    TcpStoreOptions server_opts = so;
    auto server = start_tcp_store_server(server_opts);
    if (!server.ok()) {
      return Status(server.status().code(), ErrorContext{b->rank, -1, 0, -1, ""},
                    "rank " + std::to_string(b->rank) + " could not host the store on " + host + ":" +
                        std::to_string(port) + " (" + origin + "): " + server.status().message());
    }
    b->hosted_store = std::move(server).value();
    so.port = b->hosted_store->port();
  }
  auto client = connect_tcp_store(so);
  if (!client.ok()) {
    return Status(client.status().code(), ErrorContext{b->rank, -1, 0, -1, ""},
                  "rank " + std::to_string(b->rank) + " could not reach the store named by " + origin + ": " +
                      client.status().message());
  }
  b->store = std::move(client).value();
  b->store_host = host;
  b->store_description = "tcp store " + host + ":" + std::to_string(so.port) + (serve ? " (hosted here)" : "");
  return Status();
}

}  // namespace

Result<Bootstrap> bootstrap(const Options& o) {
  Bootstrap b;
  if (Status s = resolve_identity(o, &b); !s.ok()) return s;
  b.job_token = !o.job_token.empty() ? o.job_token : env_string("RCOLL_JOB_TOKEN").value_or("");

  if (o.store) {
    b.store = o.store;
    b.store_description = "caller's store";
  } else if (auto addr = env_string("RCOLL_STORE_ADDR")) {
    auto hp = split_host_port(*addr, "RCOLL_STORE_ADDR");
    if (!hp.ok()) return hp.status();
    auto serve = env_int("RCOLL_STORE_SERVE", 0, 1);
    if (!serve.ok()) return serve.status();
    // RCOLL_STORE_SERVE=1: rank 0 hosts the store at that address (mpirun, Slurm).
    bool host_here = serve.value().value_or(0) == 1 && b.rank == 0;
    if (Status s = connect_store(o, &b, hp.value().first, hp.value().second, host_here, "RCOLL_STORE_ADDR=" + *addr); !s.ok()) return s;
  } else if (auto dir = env_string("RCOLL_STORE_FILE")) {
    auto fs = open_file_store(*dir);
    if (!fs.ok()) return fs.status();
    b.store = std::move(fs).value();
    b.store_description = "file store " + *dir;
  } else if (auto master = env_string("MASTER_ADDR")) {
    // torchrun hosts its own store at MASTER_PORT; rcoll's lives one port above,
    // hosted by rank 0.
    auto port = env_int("MASTER_PORT", 1, 65534);
    if (!port.ok()) return port.status();
    if (!port.value()) return Status(ErrorCode::kInvalidArgument, "MASTER_ADDR is set but MASTER_PORT is not");
    auto p = static_cast<uint16_t>(*port.value() + 1);
    if (Status s = connect_store(o, &b, *master, p, b.rank == 0, "MASTER_ADDR/MASTER_PORT (+1)"); !s.ok()) return s;
  } else if (b.size == 1) {
    if (Status s = connect_store(o, &b, "127.0.0.1", 0, true, "a single rank's private store"); !s.ok()) return s;
  } else {
    return Status(ErrorCode::kInvalidArgument,
                  "rank " + std::to_string(b.rank) + " of " + std::to_string(b.size) +
                      " has no rendezvous: set RCOLL_STORE_ADDR=HOST:PORT (rcoll-run does), "
                      "RCOLL_STORE_FILE=DIR, or MASTER_ADDR/MASTER_PORT, or pass Options.store");
  }
  return b;
}

namespace {

// Where `name` stands in `names`; -1 if nowhere.
template <size_t N>
int index_of(const char* const (&names)[N], const std::string& name) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<int>(i);
  return -1;
}

}  // namespace

const char* algorithm_name(AllreduceAlgorithm a) {
  const size_t i = static_cast<size_t>(a);
  return i < std::size(kAllreduceAlgorithmNames) ? kAllreduceAlgorithmNames[i] : "?";
}

const char* algorithm_name(BroadcastAlgorithm a) {
  const size_t i = static_cast<size_t>(a);
  return i < std::size(kBroadcastAlgorithmNames) ? kBroadcastAlgorithmNames[i] : "?";
}

Result<bool> nccl_phases_requested() {
  auto v = env_int("RCOLL_NCCL_PHASES", 0, 1);
  if (!v.ok()) return v.status();
  return v.value().value_or(0) == 1;
}

Result<bool> nccl_keep_in_group_requested() {
  auto v = env_int("RCOLL_NCCL_KEEP_IN_GROUP", 0, 1);
  if (!v.ok()) return v.status();
  return v.value().value_or(1) == 1;
}

Status apply_env_overrides(Options* o) {
  if (o->transport == "auto") {
    o->transport = env_string("RCOLL_TRANSPORT").value_or("auto");
    if (o->transport != "auto" && find_transport(o->transport) == nullptr) {
      return Status(ErrorCode::kInvalidArgument,
                    "RCOLL_TRANSPORT='" + o->transport + "' is not auto, " + transport_names_or());
    }
  }
  if (o->transports.empty()) {
    if (auto list = env_string("RCOLL_TRANSPORTS")) {
      size_t start = 0;
      while (start <= list->size()) {
        size_t comma = list->find(',', start);
        if (comma == std::string::npos) comma = list->size();
        std::string name = list->substr(start, comma - start);
        start = comma + 1;
        if (find_transport(name) == nullptr) {
          return Status(ErrorCode::kInvalidArgument,
                        "RCOLL_TRANSPORTS='" + *list + "': '" + name + "' is not " +
                            transport_names_or() + " (a comma-separated list, preferred first)");
        }
        o->transports.push_back(name);
      }
    }
  }
  if (o->ucx_error_mode == "auto") {
    o->ucx_error_mode = env_string("RCOLL_UCX_ERROR_MODE").value_or("auto");
    if (o->ucx_error_mode != "auto" && o->ucx_error_mode != "peer" && o->ucx_error_mode != "none") {
      return Status(ErrorCode::kInvalidArgument, "RCOLL_UCX_ERROR_MODE='" + o->ucx_error_mode + "' is not auto, peer or none");
    }
  }
  if (auto algo = env_string("RCOLL_ALLREDUCE_ALGO"); algo && o->allreduce_algorithm == AllreduceAlgorithm::kAuto) {
    const int i = index_of(kAllreduceAlgorithmNames, *algo);
    if (i < 0) {
      return Status(ErrorCode::kInvalidArgument, "RCOLL_ALLREDUCE_ALGO='" + *algo + "' is not auto, ring, direct, hd or rd");
    }
    o->allreduce_algorithm = static_cast<AllreduceAlgorithm>(i);
  }
  if (auto algo = env_string("RCOLL_BROADCAST_ALGO"); algo && o->broadcast_algorithm == BroadcastAlgorithm::kAuto) {
    const int i = index_of(kBroadcastAlgorithmNames, *algo);
    if (i < 0) {
      return Status(ErrorCode::kInvalidArgument, "RCOLL_BROADCAST_ALGO='" + *algo + "' is not auto, chain or star");
    }
    o->broadcast_algorithm = static_cast<BroadcastAlgorithm>(i);
  }
  if (auto phases = nccl_phases_requested(); !phases.ok()) return phases.status();
  if (auto in_group = nccl_keep_in_group_requested(); !in_group.ok()) return in_group.status();
  auto blocking = env_int("RCOLL_NCCL_BLOCKING", 0, 1);
  if (!blocking.ok()) return blocking.status();
  if (o->nccl_blocking < 0)
    o->nccl_blocking = blocking.value() ? static_cast<int>(*blocking.value()) : 1;
  auto confirm_every = env_int("RCOLL_NCCL_CONFIRM_EVERY", 1, 1000000);
  if (!confirm_every.ok()) return confirm_every.status();
  if (o->nccl_confirm_every < 0)
    o->nccl_confirm_every = confirm_every.value() ? static_cast<int>(*confirm_every.value()) : 16;
  if (o->nccl_confirm_every < 1) {
    return Status(ErrorCode::kInvalidArgument,
                  "Options::nccl_confirm_every is " + std::to_string(o->nccl_confirm_every) +
                      ": it must be at least 1 (1 = every op on NCCL confirmed)");
  }
  auto spin = env_int("RCOLL_SPIN_US", 0, 1000000);
  if (!spin.ok()) return spin.status();
  if (spin.value() && o->spin_us < 0) o->spin_us = static_cast<int>(*spin.value());
  auto failures = env_int("RCOLL_TRANSPORT_FAILURES", 1, 1000000);
  if (!failures.ok()) return failures.status();
  if (failures.value()) o->transport_failures_to_drop = static_cast<int>(*failures.value());
  auto window = env_int("RCOLL_TRANSPORT_FAILURE_WINDOW_MS", 1, 7LL * 24 * 3600 * 1000);
  if (!window.ok()) return window.status();
  if (window.value()) o->transport_failure_window = Millis(*window.value());
  auto probe = env_int("RCOLL_TRANSPORT_PROBE_MS", 0, 7LL * 24 * 3600 * 1000);
  if (!probe.ok()) return probe.status();
  if (probe.value()) o->transport_probe_after = Millis(*probe.value());
  if (o->socket_ifname.empty()) o->socket_ifname = env_string("RCOLL_SOCKET_IFNAME").value_or("");
  // Options::tcp_congestion or, when that is "auto", RCOLL_TCP_CONGESTION;
  // either way a name the kernel could hold (it truncates past 15 characters).
  const bool congestion_from_env = o->tcp_congestion == "auto";
  if (congestion_from_env) o->tcp_congestion = env_string("RCOLL_TCP_CONGESTION").value_or("auto");
  if (o->tcp_congestion.empty() || o->tcp_congestion.size() > 15 ||
      o->tcp_congestion.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string(congestion_from_env ? "RCOLL_TCP_CONGESTION" : "Options::tcp_congestion") + "='" +
                      o->tcp_congestion +
                      "' is not auto, default or a congestion control name (lower case, at most 15 characters)");
  }
  auto op_timeout = env_int("RCOLL_OP_TIMEOUT_MS", 1, 7LL * 24 * 3600 * 1000);
  if (!op_timeout.ok()) return op_timeout.status();
  if (op_timeout.value() && o->op_timeout.count() == 0) o->op_timeout = Millis(*op_timeout.value());
  auto hang_timeout = env_int("RCOLL_HANG_TIMEOUT_MS", 1, 7LL * 24 * 3600 * 1000);
  if (!hang_timeout.ok()) return hang_timeout.status();
  if (hang_timeout.value() && o->hang_timeout.count() == 0)
    o->hang_timeout = Millis(*hang_timeout.value());
  auto connect_timeout = env_int("RCOLL_CONNECT_TIMEOUT_MS", 1, 24LL * 3600 * 1000);
  if (!connect_timeout.ok()) return connect_timeout.status();
  if (connect_timeout.value()) o->connect_timeout = Millis(*connect_timeout.value());
  auto join_timeout = env_int("RCOLL_JOIN_TIMEOUT_MS", 1, 7LL * 24 * 3600 * 1000);
  if (!join_timeout.ok()) return join_timeout.status();
  if (join_timeout.value()) o->join_timeout = Millis(*join_timeout.value());
  auto recovery = env_int("RCOLL_RECOVERY", 0, 1);
  if (!recovery.ok()) return recovery.status();
  if (recovery.value()) o->recovery = *recovery.value() == 1;
  auto shrink = env_int("RCOLL_SHRINK", 0, 1);
  if (!shrink.ok()) return shrink.status();
  if (shrink.value()) o->shrink_on_death = *shrink.value() == 1;
  auto recovery_timeout = env_int("RCOLL_RECOVERY_TIMEOUT_MS", 1, 24LL * 3600 * 1000);
  if (!recovery_timeout.ok()) return recovery_timeout.status();
  if (recovery_timeout.value()) o->recovery_timeout = Millis(*recovery_timeout.value());
  auto liveness = env_int("RCOLL_LIVENESS_MS", 50, 24LL * 3600 * 1000);
  if (!liveness.ok()) return liveness.status();
  if (liveness.value()) o->liveness_budget = Millis(*liveness.value());
  auto to_all = env_int("RCOLL_HEARTBEATS_TO_ALL", 0, 1);
  if (!to_all.ok()) return to_all.status();
  if (to_all.value()) o->heartbeats_to_all = *to_all.value() == 1;
  auto straggler = env_int("RCOLL_STRAGGLER_TIMEOUT_MS", 1, 7LL * 24 * 3600 * 1000);
  if (!straggler.ok()) return straggler.status();
  if (straggler.value()) o->straggler_timeout = Millis(*straggler.value());
  auto straggler_s = env_int("RCOLL_STRAGGLER_TIMEOUT_S", 1, 7LL * 24 * 3600);
  if (!straggler_s.ok()) return straggler_s.status();
  if (straggler_s.value()) o->straggler_timeout = Millis(*straggler_s.value() * 1000);
  auto chunk = env_int("RCOLL_CHUNK_BYTES", 64, 1LL << 30);
  if (!chunk.ok()) return chunk.status();
  if (chunk.value() && o->chunk_bytes == 0) o->chunk_bytes = static_cast<size_t>(*chunk.value());
  auto sockbuf = env_int("RCOLL_SOCKET_BUFFER_BYTES", 1, 1LL << 30);
  if (!sockbuf.ok()) return sockbuf.status();
  const bool sockbuf_from_env = sockbuf.value() && o->socket_buffer_bytes == 0;
  if (sockbuf_from_env) o->socket_buffer_bytes = static_cast<size_t>(*sockbuf.value());
  if (o->socket_buffer_bytes > (size_t{1} << 30)) {
    return Status(ErrorCode::kInvalidArgument,
                  "Options::socket_buffer_bytes=" + std::to_string(o->socket_buffer_bytes) +
                      " is above 1073741824 (1 GiB), the largest socket buffer rcoll accepts");
  }
  if (o->socket_buffer_bytes != 0 && o->socket_buffer_bytes < kMinSocketBufferBytes) {
    const std::string source =
        sockbuf_from_env ? "RCOLL_SOCKET_BUFFER_BYTES=" : "Options::socket_buffer_bytes=";
    const std::string floor = std::to_string(kMinSocketBufferBytes);
    return Status(ErrorCode::kInvalidArgument,
                  source + std::to_string(o->socket_buffer_bytes) + " is below " + floor +
                      ", the smallest socket buffer rcoll accepts (a margin over what stalls: "
                      "over loopback, whose segments are up to 64 KiB, 12 KiB buffers held "
                      "segments until the sender's persist timer fired, and the link timing at "
                      "connect ran past the 8 s connect timeout). Leave it unset (4 MiB) or use "
                      "at least " +
                      floor);
  }
  auto depth = env_int("RCOLL_PIPELINE_DEPTH", 1, 1024);
  if (!depth.ok()) return depth.status();
  if (depth.value() && o->pipeline_depth == 0) o->pipeline_depth = static_cast<int>(*depth.value());
  return Status();
}

}  // namespace rcoll
