// Building a TCP mesh among the ranks: the part of connecting that the data
// plane (one mesh per epoch) and the liveness side channel (one mesh for the
// communicator's lifetime) share. The liveness channel builds the full mesh;
// the data plane connects its partners only (MeshParams::connect_now) and the
// rest on first use (transports/tcp/on_demand_links.h).
//
// Every rank listens on the selected interface and publishes "IP PORT IFNAME"
// under "<key_prefix><rank>" (base/store_exchange.h: every rank's address is
// then one combined read); rank r dials every rank below it (retrying until
// the deadline) and accepts every rank above it. Each new connection carries a
// hello (rank, world size, epoch, job-token hash) answered by an ack, so a
// stranger or a rank of another job or epoch is refused, and logged, before any
// frame of the mesh's own protocol moves.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/address_book.h"
#include "base/deadline.h"
#include "base/packed_values.h"
#include "base/store_exchange.h"
#include "rcoll/status.h"
#include "rcoll/store.h"
#include "transports/frame.h"
#include "transports/tcp/interfaces.h"
#include "transports/tcp/mesh_listener.h"

// The socket option that caps a TCP connection's retransmission timeout
// (Linux 6.15), for headers older than the kernel.
#ifndef TCP_RTO_MAX_MS
#define TCP_RTO_MAX_MS 44
#endif

namespace rcoll {

// The longest a lost segment waits for its retransmission, where the kernel
// allows a cap (TCP_RTO_MAX_MS, Linux 6.15; 1 s is the least it takes). The
// kernel's own cap is 120 s, and the timeout doubles with every retransmission
// that is lost too. A receiver that stops reading with its buffer full (a
// pipeline stage in a 6 s compute, a rank restoring a checkpoint) can drop
// segments that arrive inside the window it advertised (TCPRcvQDrop): each
// retransmission meets the full buffer and is dropped again, and once the
// receiver drains its queue, the link stays silent until the next one.
// Seen: 8 stages in a chain, a 6 s straggler, stage 1's link to stage 2 with
// 8 MB queued and a 3.3 s timeout (backoff 4) while stage 2 waited on it with
// nothing to read; the 1 s progress deadline called it hung and recovered.
// Capped, the link resumes within a second of the receiver draining.
inline constexpr int kTcpRtoMaxMs = 1000;
// The cap also shortens how long the kernel keeps retransmitting before it
// gives up on the connection: it models tcp_retries2 (15) retransmissions on
// the cap (tcp_model_timeout), 14.4 s instead of 924.6 s. A receiver may stop
// reading for longer than 14 s (a checkpoint restore) while its full buffer
// keeps dropping the retransmissions. Where the cap is set, TCP_USER_TIMEOUT
// sets the give-up time back to 15 minutes.
inline constexpr unsigned kTcpUserTimeoutMs = 15 * 60 * 1000;

struct MeshParams {
  int rank = 0;
  int size = 1;
  uint32_t epoch = 0;             // carried in the hello; peers of another epoch are refused
  std::shared_ptr<Store> store;   // addresses are published here
  std::string key_prefix;         // "tcp/<epoch>/" for the data plane, "liveness/" for the side channel
  std::string ifname_spec;        // RCOLL_SOCKET_IFNAME syntax
  bool prefer_loopback = true;    // every rank on this host
  std::string route_address;      // source address of the route to the store (select_interface)
  std::string job_token;
  size_t socket_buffer_bytes = 0;  // 0 = leave the kernel's default
  std::string congestion;          // TCP_CONGESTION for every socket; empty = the kernel's default
  Deadline deadline = Deadline::never();
  // How messages name this mesh: "epoch 3" for the data plane, "liveness" for
  // the side channel ("epoch 3: listening on ...", "address for epoch 3").
  std::string purpose;
  std::string transport = "tcp";  // ErrorContext::transport of the errors returned
  // Polled (every 20 ms at most) while waiting for peers: true ends the
  // build at once with kAborted (the runtime gave up on this epoch: a rank
  // died or gave up during a recovery). May be empty.
  std::function<bool()> cancelled;
  // Set both to skip the store: a listener opened by listen_for_mesh (the
  // build takes it over), and the ranks' addresses as they published them
  // (those of connect_now known, the others on first use). How the liveness
  // channel's addresses ride on the settings exchange.
  int listen_fd = -1;
  AddressBook addresses;
  // The peers to connect now, by rank; empty = every peer. Must be symmetric
  // (q is in p's set exactly when p is in q's): a rank dials the lower ranks
  // of its set and waits for the higher ones. Any other peer of the job that
  // dials in meanwhile (connecting on first use) is taken as well.
  std::vector<bool> connect_now;
};

// The socket options every connection of a mesh gets (no delay, keepalive,
// the buffer sizes and congestion control asked for, the retransmission
// timeout's cap); for a connection made outside the build.
void apply_mesh_socket_options(int fd, const MeshParams& p);

// The hello and its ack: the sender's rank, world size, epoch and job-token
// hash. An ack whose count is 0 refuses a connection on first use that
// crossed one the lower rank dialled (transports/tcp/on_demand_links.h).
FrameHeader mesh_hello(FrameType type, const MeshParams& p);

// Listens on the interface build_tcp_mesh would select for `p`.
Result<MeshListener> listen_for_mesh(const MeshParams& p);

using MeshSockets = std::vector<std::unique_ptr<boost::asio::ip::tcp::socket>>;

// What a build that keeps its listener leaves: the connections made, the
// listener still open, and every rank's address as published.
struct PartialMesh {
  MeshSockets sockets;  // null for this rank and for peers not connected yet
  MeshListener listener;
  AddressBook addresses;  // "IP PORT IFNAME", by rank: connect_now's known, the rest on first use
  std::string interface_name;
};

// The exchange of a mesh's addresses under `prefix`: its combined value says
// only that every rank published (a rank's partners' addresses are read with
// it: StoreExchange's pick), and every rank's address, packed, is its second
// reduction, read on a first dial to a rank that is not a partner.
StoreExchange address_exchange(Store& store, const std::string& prefix, int size);

// The slices in which a build waits for the ranks' addresses, serving the
// accepts between them: 20 ms, and with many ranks waiting (every slice is a
// request each) 10 us a rank, up to 200 ms.
inline std::chrono::milliseconds address_wait_slice(int size) {
  return std::clamp<std::chrono::milliseconds>(std::chrono::milliseconds(size / 100),
                                               std::chrono::milliseconds(20),
                                               std::chrono::milliseconds(200));
}

// Connects the peers of p.connect_now (and takes any other peer that dials
// in meanwhile), then hands over the listener for the connections to come.
Result<PartialMesh> build_partial_tcp_mesh(boost::asio::io_context& io, const MeshParams& p,
                                           const NetInterface& iface);
// The same, selecting the interface from p.ifname_spec and p.prefer_loopback.
Result<PartialMesh> build_partial_tcp_mesh(boost::asio::io_context& io, const MeshParams& p);

// One connected socket per peer, indexed by rank (null for this rank), bound to
// `io`. Runs `io` itself until the mesh is complete or the deadline passes and
// leaves no handler pending on it that refers to the call. Fails with
// kPeerUnreachable naming every peer not reached and the address dialled or
// listened on, kStore when the store fails, kTransport when it cannot listen,
// kAborted when p.cancelled said so.
Result<MeshSockets> build_tcp_mesh(boost::asio::io_context& io, const MeshParams& p,
                                   const NetInterface& iface);
// The same, selecting the interface from p.ifname_spec and p.prefer_loopback.
Result<MeshSockets> build_tcp_mesh(boost::asio::io_context& io, const MeshParams& p);

// "10.1.2.3:4567" of the socket's peer, or "?" when it has none.
std::string remote_address(const boost::asio::ip::tcp::socket& s);


}  // namespace rcoll
