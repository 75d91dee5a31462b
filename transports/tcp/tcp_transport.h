// The TCP transport: one connection per peer pair (the mesh built with
// Boost.Asio, the data moved with non-blocking sendmsg/recv), framed
// messages (transports/frame.h), single-threaded. The runtime's progress
// thread drives all I/O through progress(), so a completed receive is handed to
// the algorithm without a thread hop.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "rcoll/store.h"
#include "transports/tcp/mesh_listener.h"
#include "transports/transport.h"

namespace rcoll {

struct TcpConnectParams {
  int rank = 0;
  int size = 1;
  uint32_t epoch = 0;
  // Already namespaced for this communicator; this epoch's addresses go
  // under `key_prefix`<rank> (the runtime's runtime/store/keys.h chooses
  // it; empty = "tcp/<epoch>/").
  std::shared_ptr<Store> store;
  std::string key_prefix;
  std::string ifname_spec;     // RCOLL_SOCKET_IFNAME syntax
  bool prefer_loopback = true;  // every rank on this host
  std::string route_address;    // source address of the route to the store (select_interface)
  std::string job_token;
  size_t socket_buffer_bytes = 0;  // 0 = leave the kernel's default
  // TCP_CONGESTION for the data sockets: a name, "auto" (reno on a loopback
  // interface, else the kernel's default) or "default".
  std::string congestion = "auto";
  Deadline deadline = Deadline::never();
  // How long a wait polls the sockets (yielding between polls) before it
  // sleeps in ppoll.
  std::chrono::microseconds spin{50};
  // Polled while waiting for peers: true ends the connect at once with
  // kAborted (MeshParams::cancelled). May be empty.
  std::function<bool()> cancelled;
  // Where given: a valid listener in it is listened on and its addresses
  // dialled (no exchange at the store); an invalid one is filled with this
  // epoch's once its mesh is built. Null: every epoch listens and publishes.
  std::shared_ptr<KeptListener> kept;
};

// Listens, publishes the address, connects to this rank's partners (lower
// ranks are dialled, higher ranks are accepted; the other peers on first use,
// transports/tcp/on_demand_links.h), exchanges hellos and checks the job
// token. Fails within the deadline with kPeerUnreachable naming the peers and
// addresses not reached, or kInvalidArgument for a bad interface spec.
Result<std::unique_ptr<Transport>> connect_tcp_transport(const TcpConnectParams& params);

}  // namespace rcoll
