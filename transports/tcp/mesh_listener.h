// A listening socket opened before its mesh is built (listen_for_mesh in
// transports/tcp/mesh.h), so that its address can travel in an exchange the
// caller makes anyway, or kept from one epoch to the next. Apart from mesh.h
// so that holding one needs no Asio.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "base/address_book.h"

namespace rcoll {

// Closes the socket unless a build took it over.
class MeshListener {
 public:
  MeshListener() = default;
  MeshListener(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  MeshListener(MeshListener&& other) noexcept { *this = std::move(other); }
  MeshListener& operator=(MeshListener&& other) noexcept;
  ~MeshListener();
  // For MeshParams::listen_fd: the caller passes ownership to the build.
  int release();
  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }                           // still owned here
  const std::string& address() const { return address_; }  // "IP PORT IFNAME"

 private:
  int fd_ = -1;
  std::string address_;
};

// A data plane's listener kept from the epoch that published its address to
// the epochs after it, with every rank's address as published then: while
// the ranks stay the same (a recovery, not a shrink) and every rank kept
// its own (the runtime agrees on that in the recovery's ledgers), an epoch
// connects without an exchange at the store. Each epoch listens on a dup of
// the socket, which its teardown closes; the socket itself stays open, so a
// peer may dial before this rank's next epoch is built (the connection waits
// in the backlog). Used by one thread at a time.
struct KeptListener {
  MeshListener listener;   // invalid: the next epoch listens and publishes anew
  AddressBook addresses;   // the book of the epoch that published (its fetches read that exchange)
  std::string key_prefix;  // that exchange's keys: not erased while kept
  uint32_t epoch = 0;      // the epoch that published them
};

}  // namespace rcoll
