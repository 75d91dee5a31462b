// A listening socket opened before its mesh is built (listen_for_mesh in
// transports/tcp/mesh.h), so that its address can travel in an exchange the
// caller makes anyway. Apart from mesh.h so that holding one needs no Asio.
#pragma once

#include <string>
#include <utility>

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
  const std::string& address() const { return address_; }  // "IP PORT IFNAME"

 private:
  int fd_ = -1;
  std::string address_;
};

}  // namespace rcoll
