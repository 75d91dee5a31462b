// Bootstrap from the environment: who am I, how many are we, where is the store.
// Recognises rcoll's own variables and those of torchrun, Open MPI, PMI and Slurm.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "rcoll/options.h"
#include "rcoll/status.h"
#include "rcoll/store.h"

namespace rcoll {

struct Bootstrap {
  int rank = 0;
  int size = 1;
  std::string identity_source;  // "RCOLL_RANK", "torchrun", "Open MPI", "Slurm", "options", "default"
  std::shared_ptr<Store> store;
  std::string store_description;  // "tcp store 127.0.0.1:29500", "file store /tmp/x", ...
  std::string store_host;         // the TCP store's host; empty for other stores
  std::unique_ptr<TcpStoreServer> hosted_store;  // when this rank hosts the store
  std::string job_token;
};

Result<Bootstrap> bootstrap(const Options& options);

// Fills options the caller left at their defaults from RCOLL_* variables
// (RCOLL_TRANSPORT, RCOLL_SOCKET_IFNAME, RCOLL_OP_TIMEOUT_MS,
// RCOLL_CONNECT_TIMEOUT_MS, RCOLL_CHUNK_BYTES). A malformed value is an error,
// and so is a socket buffer below kMinSocketBufferBytes, from either source.
Status apply_env_overrides(Options* options);

// RCOLL_NCCL_PHASES=1: log where device ops' host time goes (a diagnostic,
// not an option). Unset is false; anything but 0 or 1 an error naming it
// (apply_env_overrides checks it too, so creation refuses it).
Result<bool> nccl_phases_requested();
// RCOLL_NCCL_KEEP_IN_GROUP (0 or 1, default 1): whether a collective that
// settles later copies its input aside inside its own NCCL group (a send and
// a receive to itself) rather than with a cudaMemcpyAsync before it (5 us of
// host time per op on an H200 under MPS). A diagnostic, like the phases.
Result<bool> nccl_keep_in_group_requested();

// The smallest Options::socket_buffer_bytes / RCOLL_SOCKET_BUFFER_BYTES (0
// aside). Over loopback (MTU 64 KiB) 12 KiB buffers stalled the connect-time
// link timing past the 8 s connect timeout, 16 KiB ones passed (bench/RESULTS.md,
// stop 32); a real NIC's smaller segments would pass lower, but no link gains
// from buffers this small.
constexpr size_t kMinSocketBufferBytes = 64u << 10;

// The names RCOLL_ALLREDUCE_ALGO and RCOLL_BROADCAST_ALGO take, indexed by the
// enums' values.
inline constexpr const char* kAllreduceAlgorithmNames[] = {"auto", "ring", "direct", "hd", "rd"};
inline constexpr const char* kBroadcastAlgorithmNames[] = {"auto", "chain", "star"};
const char* algorithm_name(AllreduceAlgorithm a);
const char* algorithm_name(BroadcastAlgorithm a);

// Strict integer parse of an environment variable: nullopt when unset, an
// error naming the variable when it is set but not an integer in [lo, hi].
Result<std::optional<long long>> env_int(const char* name, long long lo, long long hi);
std::optional<std::string> env_string(const char* name);

// "HOST:PORT" or "[V6]:PORT" as in RCOLL_STORE_ADDR; errors name `var`.
Result<std::pair<std::string, uint16_t>> split_host_port(const std::string& addr, const char* var);

}  // namespace rcoll
