#include "transports/tcp/mesh.h"

#include <boost/asio.hpp>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>

#include "base/log.h"
#include "transports/frame.h"

namespace rcoll {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

struct AppliedOptions {
  std::string congestion;  // as the kernel reports it for the socket
  int congestion_errno = 0;  // why the requested one was refused, or 0
};

AppliedOptions set_socket_options(tcp::socket& s, const MeshParams& p) {
  AppliedOptions applied;
  error_code ignored;
  s.set_option(tcp::no_delay(true), ignored);
  s.set_option(asio::socket_base::keep_alive(true), ignored);
  if (p.socket_buffer_bytes > 0) {
    s.set_option(asio::socket_base::send_buffer_size(static_cast<int>(p.socket_buffer_bytes)), ignored);
    s.set_option(asio::socket_base::receive_buffer_size(static_cast<int>(p.socket_buffer_bytes)), ignored);
  }
  if (!p.congestion.empty() &&
      setsockopt(s.native_handle(), IPPROTO_TCP, TCP_CONGESTION, p.congestion.data(),
                 static_cast<socklen_t>(p.congestion.size())) != 0) {
    applied.congestion_errno = errno;
  }
  char name[32] = {};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(s.native_handle(), IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0) {
    applied.congestion.assign(name, strnlen(name, len));
  }
  return applied;
}

FrameHeader hello_header(FrameType type, const MeshParams& p) {
  FrameHeader h;
  h.type = type;
  h.epoch = p.epoch;
  h.root = p.rank;
  h.count = static_cast<uint64_t>(p.size);
  h.op_seq = job_token_hash(p.job_token);
  return h;
}

}  // namespace

std::string remote_address(const tcp::socket& s) {
  error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "?";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

Result<MeshSockets> build_tcp_mesh(asio::io_context& io, const MeshParams& p) {
  auto iface = select_interface(list_interfaces(), p.ifname_spec, p.prefer_loopback, p.route_address);
  if (!iface.ok()) {
    return Status(iface.status().code(), ErrorContext{p.rank, -1, 0, p.epoch, p.transport},
                  iface.status().message());
  }
  return build_tcp_mesh(io, p, iface.value());
}

Result<MeshSockets> build_tcp_mesh(asio::io_context& io, const MeshParams& p, const NetInterface& iface) {
  const int rank = p.rank;
  const int size = p.size;
  const char* purpose = p.purpose.c_str();
  ErrorContext ctx{rank, -1, 0, p.epoch, p.transport};
  MeshSockets socks(static_cast<size_t>(size));
  if (size <= 1) return socks;

  error_code ec;
  tcp::acceptor acceptor(io);
  tcp::endpoint listen_ep(asio::ip::make_address(iface.address, ec), 0);
  if (!ec) acceptor.open(listen_ep.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(listen_ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(ErrorCode::kTransport, ctx,
                  "cannot listen on interface " + iface.name + " (" + iface.address + ") for " + p.purpose +
                      ": " + ec.message());
  }
  const uint16_t port = acceptor.local_endpoint().port();
  const std::string my_addr = iface.address + " " + std::to_string(port) + " " + iface.name;
  if (Status s = p.store->set(p.key_prefix + std::to_string(rank), Bytes(my_addr.begin(), my_addr.end()));
      !s.ok()) {
    return s;
  }
  RCOLL_LOG(kInfo, "%s: listening on %s:%u (interface %s), connecting to %d peers", purpose,
            iface.address.c_str(), port, iface.name.c_str(), size - 1);

  const uint64_t expected_token = job_token_hash(p.job_token);
  std::vector<std::string> last_error(static_cast<size_t>(size));
  int pending = size - 1;
  AppliedOptions applied;  // as applied to the last socket; a refusal is kept
  auto connected = [&](int peer, std::unique_ptr<tcp::socket> sock) {
    AppliedOptions now = set_socket_options(*sock, p);
    if (applied.congestion_errno == 0) applied.congestion_errno = now.congestion_errno;
    applied.congestion = std::move(now.congestion);
    socks[peer] = std::move(sock);
    --pending;
  };

  // Dial lower ranks, retrying until the deadline (a rank may publish before
  // its peers have started listening on a new interface, or be slow to start).
  struct Dial {
    int peer;
    tcp::endpoint ep;
    std::string ifname;
    std::unique_ptr<tcp::socket> sock;
    asio::steady_timer retry;
    FrameBytes out;
    FrameBytes in;
  };
  std::vector<std::unique_ptr<Dial>> dials;
  std::function<void(Dial*)> attempt = [&](Dial* d) {
    d->sock = std::make_unique<tcp::socket>(io);
    d->sock->async_connect(d->ep, [&, d](const error_code& ec) {
      if (ec == asio::error::operation_aborted) return;  // torn down: keep the real reason
      if (ec) {
        last_error[d->peer] = "connect to " + d->ep.address().to_string() + ":" +
                              std::to_string(d->ep.port()) + " failed: " + ec.message();
        error_code ignored;
        d->sock->close(ignored);
        d->retry.expires_after(std::chrono::milliseconds(20));
        d->retry.async_wait([&, d](const error_code& tec) {
          if (!tec && !p.deadline.expired()) attempt(d);
        });
        return;
      }
      d->out = encode(hello_header(FrameType::kHello, p));
      asio::async_write(*d->sock, asio::buffer(d->out), [&, d](const error_code& ec, size_t) {
        if (ec == asio::error::operation_aborted) return;
        if (ec) {
          last_error[d->peer] = "sending hello failed: " + ec.message();
          return;
        }
        asio::async_read(*d->sock, asio::buffer(d->in), [&, d](const error_code& ec, size_t) {
          if (ec == asio::error::operation_aborted) return;
          if (ec) {
            last_error[d->peer] = "rank " + std::to_string(d->peer) +
                                  " closed the connection during the hello (" + ec.message() +
                                  "): wrong job token or epoch?";
            return;
          }
          auto h = decode_frame_header(d->in.data(), d->in.size());
          if (!h.ok() || h.value().type != FrameType::kHelloAck || h.value().root != d->peer ||
              h.value().epoch != p.epoch) {
            last_error[d->peer] = "bad hello ack from " + d->ep.address().to_string();
            return;
          }
          connected(d->peer, std::move(d->sock));
        });
      });
    });
  };
  for (int peer = 0; peer < rank; ++peer) {
    auto value = p.store->get(p.key_prefix + std::to_string(peer), p.deadline.remaining_ms());
    if (!value.ok()) {
      return Status(ErrorCode::kPeerUnreachable, ErrorContext{rank, peer, 0, p.epoch, p.transport},
                    "rank " + std::to_string(peer) + " never published its address for " + p.purpose + ": " +
                        value.status().message());
    }
    const std::string addr(value.value().begin(), value.value().end());
    // "IP PORT IFNAME"
    const size_t a = addr.find(' ');
    const size_t b = a == std::string::npos ? a : addr.find(' ', a + 1);
    unsigned long port_num = 0;
    if (a != std::string::npos) {
      try {
        port_num = std::stoul(addr.substr(a + 1, b == std::string::npos ? b : b - a - 1));
      } catch (const std::exception&) {
        port_num = 0;
      }
    }
    auto ip = asio::ip::make_address(addr.substr(0, a), ec);
    if (ec || port_num == 0 || port_num > 65535) {
      return Status(ErrorCode::kStore, ErrorContext{rank, peer, 0, p.epoch, p.transport},
                    "rank " + std::to_string(peer) + " published a bad address '" + addr + "' for " + p.purpose);
    }
    const std::string ifname = b == std::string::npos ? "" : addr.substr(b + 1);
    dials.push_back(std::unique_ptr<Dial>(new Dial{peer, tcp::endpoint(ip, static_cast<uint16_t>(port_num)),
                                                  ifname, nullptr, asio::steady_timer(io), {}, {}}));
    attempt(dials.back().get());
  }

  // Accept higher ranks; refuse strangers.
  struct Incoming {
    std::unique_ptr<tcp::socket> sock;
    FrameBytes in;
    FrameBytes out;
  };
  std::vector<std::unique_ptr<Incoming>> incoming;
  int to_accept = size - 1 - rank;
  std::function<void()> accept_next = [&]() {
    if (to_accept == 0) return;
    incoming.push_back(std::make_unique<Incoming>());
    Incoming* in = incoming.back().get();
    in->sock = std::make_unique<tcp::socket>(io);
    acceptor.async_accept(*in->sock, [&, in](const error_code& ec) {
      if (ec) return;
      accept_next();
      asio::async_read(*in->sock, asio::buffer(in->in), [&, in](const error_code& ec, size_t) {
        if (ec == asio::error::operation_aborted) return;  // torn down at the deadline
        const std::string from = remote_address(*in->sock);
        auto refuse = [&](const std::string& why) {
          RCOLL_LOG(kWarn, "%s: rank %d refused connection from %s: %s; closed it, still accepting the job's ranks", purpose,
                    rank, from.c_str(), why.c_str());
          error_code ignored;
          in->sock->close(ignored);
        };
        if (ec) return refuse("no hello (" + ec.message() + ")");
        auto h = decode_frame_header(in->in.data(), in->in.size());
        if (!h.ok()) return refuse(h.status().message());
        const FrameHeader& hello = h.value();
        if (hello.type != FrameType::kHello) return refuse("first frame is not a hello");
        if (hello.op_seq != expected_token) return refuse("job token mismatch (a process of another job?)");
        if (hello.epoch != p.epoch) {
          return refuse("hello for epoch " + std::to_string(hello.epoch) + ", this is epoch " + std::to_string(p.epoch));
        }
        if (hello.count != static_cast<uint64_t>(size)) {
          return refuse("world size " + std::to_string(hello.count) + " differs from " + std::to_string(size));
        }
        const int peer = hello.root;
        if (peer <= rank || peer >= size || socks[peer]) return refuse("unexpected rank " + std::to_string(peer));
        --to_accept;
        in->out = encode(hello_header(FrameType::kHelloAck, p));
        asio::async_write(*in->sock, asio::buffer(in->out), [&, in, peer](const error_code& ec, size_t) {
          if (ec == asio::error::operation_aborted) return;
          if (ec) {
            last_error[peer] = "sending hello ack failed: " + ec.message();
            ++to_accept;
            accept_next();
            return;
          }
          connected(peer, std::move(in->sock));
        });
      });
    });
  };
  accept_next();

  while (pending > 0 && !p.deadline.expired()) {
    if (io.stopped()) io.restart();
    io.run_one_until(p.deadline.is_never() ? Clock::now() + std::chrono::hours(24) : p.deadline.time());
  }
  // Tear down whatever is still in flight and run the cancelled handlers now,
  // before the locals they refer to go away.
  error_code ignored;
  acceptor.close(ignored);
  for (auto& d : dials) {
    d->retry.cancel();
    if (d->sock) d->sock->close(ignored);
  }
  for (auto& in : incoming) {
    if (in->sock) in->sock->close(ignored);
  }
  io.restart();
  io.poll();
  // A connect that failed just before the close may have armed its retry timer
  // while those handlers ran: cancel once more so nothing is left pending.
  for (auto& d : dials) d->retry.cancel();
  io.restart();
  io.poll();

  if (pending == 0) {
    if (applied.congestion_errno != 0) {
      RCOLL_LOG(kWarn,
                "%s: TCP congestion control '%s' refused by the kernel (%s; see "
                "net.ipv4.tcp_allowed_congestion_control); this mesh keeps the kernel's default (%s)",
                purpose, p.congestion.c_str(), std::strerror(applied.congestion_errno),
                applied.congestion.empty() ? "?" : applied.congestion.c_str());
    }
    const std::string cc = applied.congestion.empty() ? "" : ", congestion control " + applied.congestion;
    RCOLL_LOG(kInfo, "%s: connected to all %d peers over %s (%s%s)", purpose, size - 1, p.transport.c_str(),
              iface.name.c_str(), cc.c_str());
    return socks;
  }
  std::string missing;
  int first_missing = -1;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank || socks[peer]) continue;
    if (first_missing < 0) first_missing = peer;
    missing += "\n  rank " + std::to_string(peer) + ": ";
    if (peer < rank) {
      for (auto& d : dials) {
        if (d->peer != peer) continue;
        missing += "dialling " + d->ep.address().to_string() + ":" + std::to_string(d->ep.port()) +
                   (d->ifname.empty() ? "" : " (its interface " + d->ifname + ")");
      }
      missing += last_error[peer].empty() ? "; no answer" : "; " + last_error[peer];
    } else {
      missing += "never connected to this rank's listener " + iface.address + ":" + std::to_string(port);
    }
  }
  return Status(ErrorCode::kPeerUnreachable, ErrorContext{rank, first_missing, 0, p.epoch, p.transport},
                "rank " + std::to_string(rank) + " (interface " + iface.name + " " + iface.address +
                    ") could not connect to " + std::to_string(pending) + " peer(s) within the connect deadline:" +
                    missing + "\n  check RCOLL_SOCKET_IFNAME and that the ranks can reach each other");
}

}  // namespace rcoll
