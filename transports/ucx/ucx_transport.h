// The UCX transport: one UCP worker per epoch, one endpoint per peer, frames
// moved as tagged messages. UCX picks the wire (shared memory between ranks of
// one host, TCP or RDMA between hosts) and honours UCX_TLS / UCX_NET_DEVICES.
// Like every transport it is one epoch of the data plane: connected once,
// driven by the runtime's progress thread, aborted or destroyed.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "rcoll/store.h"
#include "transports/transport.h"

namespace rcoll {

// How UCX endpoints react to a failed peer.
//   kPeer: UCP_ERR_HANDLING_MODE_PEER. UCX reports a dead peer and can
//          force-close endpoints. UCX 1.13 has no peer-failure handling for
//          shared memory (posix, sysv), so on one host this moves the data to
//          TCP loopback (about 1/8 of the bandwidth, measured; see README).
//   kNone: fast protocols; failures are caught by rcoll's own progress
//          deadlines, heartbeats and abort notices, and abort destroys the worker.
//   kAuto: kNone when every rank is on this host, kPeer otherwise.
enum class UcxErrorMode : uint8_t { kAuto, kPeer, kNone };
const char* to_string(UcxErrorMode mode);

struct UcxConnectParams {
  int rank = 0;
  int size = 1;
  uint32_t epoch = 0;
  // Already namespaced for this communicator; this epoch's addresses go
  // under `key_prefix`<rank> (the runtime's runtime/store/keys.h chooses
  // it; empty = "ucx/<epoch>/").
  std::shared_ptr<Store> store;
  std::string key_prefix;
  std::string job_token;
  bool one_host = true;  // every rank on this host
  // How long progress() polls before sleeping on the worker's event fd; -1 =
  // chosen here: 20 us when every rank's progress thread can have a core of
  // its own, else 0 (polling would steal the core a peer needs).
  std::chrono::microseconds spin{50};  // polling before sleeping on the worker's event fd
  // Point-to-point sends up to this many bytes in flight per peer are copied
  // aside and complete at once, like a TCP send into the socket buffer. The
  // runtime must keep at least this much of a send's tail for recovery.
  size_t buffered_send_bytes = 4u << 20;
  UcxErrorMode error_mode = UcxErrorMode::kAuto;
  Deadline deadline = Deadline::never();
  // Polled while waiting for peers: true ends the connect at once (another
  // rank already gave up on this epoch). May be empty.
  std::function<bool()> cancelled;
};

// Creates the epoch's worker, publishes its address, reads every peer's,
// creates the endpoints and exchanges hellos (rank, epoch, job-token hash) so
// that every pair is wired up and of the same job before the first op. Fails
// within the deadline with kPeerUnreachable naming the peers not reached, or
// kTransport when UCX itself cannot start.
Result<std::unique_ptr<Transport>> connect_ucx_transport(const UcxConnectParams& params);

}  // namespace rcoll
