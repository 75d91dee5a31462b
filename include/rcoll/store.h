// The rendezvous key-value store: how ranks find each other, agree on an epoch
// and exchange recovery state. Every call has a timeout; none blocks forever.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rcoll/status.h"

namespace rcoll {

using Bytes = std::vector<uint8_t>;

// Implement this to plug in a caller's store (PyTorch passes its TCPStore).
// All methods are thread-safe. A timeout error is ErrorCode::kTimeout and names
// the key; a lost connection is ErrorCode::kStore and names the address.
class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(const std::string& key, const Bytes& value) = 0;
  // Blocks until the key exists or the timeout expires.
  virtual Result<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer stored at key (created as 0) and returns the new value.
  virtual Result<int64_t> add(const std::string& key, int64_t delta) = 0;
  // Blocks until every key exists or the timeout expires (the error names the missing keys).
  virtual Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Non-blocking: does the key exist now?
  virtual Result<bool> check(const std::string& key) = 0;
  virtual Status erase(const std::string& key) = 0;

  // What setup and recovery do at every step, as one request each where the
  // store can (the built-in TCP store does). The defaults make the single
  // calls above, so a caller's store needs none of these.
  //
  // Sets key, then adds delta to counter (as add does) and returns its new value.
  virtual Result<int64_t> set_and_add(const std::string& key, const Bytes& value,
                                      const std::string& counter, int64_t delta);
  // Blocks until every key exists (as wait does), then returns their values in key order.
  virtual Result<std::vector<Bytes>> multi_get(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout);
  // An exchange's publish and its wait in one call: sets key, adds 1 to
  // counter (as set_and_add), and unless that brought the count to `until`
  // (or past it), waits up to `timeout` for every key of `wait_keys` and
  // returns their values (as multi_get). A timeout is an answer here, not an
  // error. One request with the TCP store; the default makes the two calls.
  struct Published {
    int64_t count = 0;          // the counter's value after this publish
    bool completed = false;     // this publish brought it to `until`: nothing waited for
    bool timed_out = false;     // some of wait_keys were not there within the timeout
    std::vector<Bytes> values;  // else wait_keys' values, in their order
  };
  virtual Result<Published> publish_and_wait(const std::string& key, const Bytes& value,
                                             const std::string& counter, int64_t until,
                                             const std::vector<std::string>& wait_keys,
                                             std::chrono::milliseconds timeout);
  // Erases every key (absent ones are no error).
  virtual Status erase_many(const std::vector<std::string>& keys);
  // Waits for key to exist: true once it does; false when the timeout passes
  // or `cancelled` returns true first (asked at least every 20 ms). How a rank
  // hears, with no traffic while nothing happens, that a peer failed the epoch.
  // The default asks check() every 100 ms; the TCP store parks one request.
  virtual Result<bool> watch(const std::string& key, std::chrono::milliseconds timeout,
                             const std::function<bool()>& cancelled);
  // Which of keys do not exist now (non-blocking), in their order: how a
  // waiting rank names who is missing. A key the store could not be asked
  // about counts as absent; an error only when it answered none.
  virtual Result<std::vector<std::string>> absent(const std::vector<std::string>& keys);
};

// Prepends "prefix/" to every key: one namespace per communicator and epoch.
std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> inner, std::string prefix);

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  // How long the client keeps retrying the initial connection.
  std::chrono::milliseconds connect_timeout{8000};
  // Shared secret: the server refuses clients that present a different one. Empty = none.
  std::string token;
  // Server: a connection that has not said hello (with the token) this long
  // after it was accepted is closed and logged, so strangers that connect and
  // say nothing cannot pile up.
  std::chrono::milliseconds hello_timeout{10000};
};

// A client of the built-in TCP store server. Connects (retrying) within
// connect_timeout or fails with kPeerUnreachable naming host:port.
Result<std::shared_ptr<Store>> connect_tcp_store(const TcpStoreOptions& options);

// The built-in TCP store server (Boost.Asio, one thread it owns). Hosted by the
// launcher or by rank 0. Stops and joins its thread on destruction.
class TcpStoreServer {
 public:
  virtual ~TcpStoreServer() = default;
  virtual uint16_t port() const = 0;
  virtual std::string address() const = 0;  // "host:port"
  virtual void stop() = 0;
};
// Binds host:port (port 0 = any free port) and starts serving.
Result<std::unique_ptr<TcpStoreServer>> start_tcp_store_server(const TcpStoreOptions& options);

// A store on a shared file system (one file per key under a directory, atomic
// renames, polling for waits). Works across processes of one host or an NFS mount.
Result<std::shared_ptr<Store>> open_file_store(const std::string& directory);

}  // namespace rcoll
