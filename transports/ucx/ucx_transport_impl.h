// Private to transports/ucx/: the UCX transport's class, shared by its data
// path (ucx_transport.cc: requests, progress, abort) and its wire-up
// (ucx_wire_up.cc: addresses, endpoints, hellos).
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transports/frame.h"
#include "transports/transport.h"
#include "transports/ucx/ucx_transport.h"

namespace rcoll::ucx {

// Tag layout: sender rank (20 bits) | kind (2 bits) | per-pair sequence (42 bits).
// Every frame a rank sends to one peer takes the next sequence number, so a
// receive is matched by exact tag and frames of one pair cannot cross.
constexpr int kSeqBits = 42;
constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;
enum class TagKind : uint64_t { kHead = 0, kPayload = 1, kHello = 2 };

inline uint64_t make_tag(int sender, TagKind kind, uint64_t seq) {
  return (static_cast<uint64_t>(sender) << (kSeqBits + 2)) |
         (static_cast<uint64_t>(kind) << kSeqBits) | (seq & kSeqMask);
}

inline std::string ucs_error(ucs_status_t s) { return ucs_status_string(s); }

// One UCP context per UCX_TLS choice, shared by every worker (epoch) of the
// process and released with the last of them.
class UcxContext {
 public:
  static Result<std::shared_ptr<UcxContext>> get(const std::string& tls);
  ~UcxContext() { ucp_cleanup(handle_); }
  ucp_context_h handle() const { return handle_; }

 private:
  explicit UcxContext(ucp_context_h h) : handle_(h) {}
  ucp_context_h handle_;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(int rank, int size, uint32_t epoch, UcxErrorMode mode,
               std::chrono::microseconds spin, size_t buffered)
      : rank_(rank),
        size_(size),
        epoch_(epoch),
        mode_(mode),
        peers_(static_cast<size_t>(size)),
        spin_(spin),
        buffered_capacity_(buffered) {}
  ~UcxTransport() override;

  const char* name() const override { return "ucx"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint32_t epoch() const override { return epoch_; }
  uint64_t bytes_sent() const override { return bytes_sent_; }
  uint64_t bytes_received() const override { return bytes_received_; }

  Status start(const UcxConnectParams& p, const std::string& tls);
  // Publishes this worker's address, creates an endpoint to every peer and
  // exchanges hellos with each, so that every pair is wired up and of one job.
  Status wire_up(const UcxConnectParams& p);

  void post_send(int peer, const FrameHeader& header, const void* data, Request* req) override;
  void post_recv(int peer, const FrameHeader& expected, void* dst, Request* req) override;
  void progress(Deadline until) override;
  // Fails every request, then closes the endpoints and destroys the worker at
  // once, so UCX writes nothing more into any buffer after this returns.
  void abort(const Status& why) override;
  void break_link(int peer) override;

 private:
  struct Slot;
  // One UCX operation of a slot (a frame's head or its payload), what its
  // callback gets. Busy from just before it is posted until its callback
  // ran; `handle` is set only while UCX holds it: UCX may run the callback
  // inside the call that posts it (a receive of a message already waiting,
  // UCP_OP_ATTR_FLAG_NO_IMM_CMPL), which frees the request before its
  // handle is known. `gen` tells that post from a later one of the same part.
  struct Part {
    Slot* slot = nullptr;
    void* handle = nullptr;
    bool busy = false;
    uint32_t gen = 0;
  };
  // One posted send or receive while UCX holds parts of it. Owned by the
  // transport (UCX callbacks point at its parts), recycled when its last
  // part is back.
  struct Slot {
    UcxTransport* transport = nullptr;
    Request* req = nullptr;  // null once the request was finished (failed early)
    int peer = -1;
    int parts = 0;  // UCX operations still outstanding (busy parts)
    Part part[2];   // at most two in flight: a head and a payload
    uint64_t seq = 0;
    FrameHeader expected;
    void* dst = nullptr;
    std::vector<uint8_t> buf;
    std::vector<uint8_t> payload;  // a buffered send's copy of its payload
    size_t buffered = 0;           // bytes of it still counted against the peer's capacity
    size_t wire_bytes = 0;
    Status error;
    bool head_done = false;
    bool posting = false;
    bool live = false;
    bool is_send = false;
  };
  struct Peer {
    ucp_ep_h ep = nullptr;
    uint64_t send_seq = 0;
    uint64_t recv_seq = 0;
    size_t buffered = 0;  // bytes of buffered sends UCX has not finished
    Status error;         // set once: every later request on this peer fails with it
    int index = -1;
    UcxTransport* transport = nullptr;
  };
  // The hellos of wire_up in flight, one send and one receive per peer
  // (ucx_wire_up.cc).
  struct Hellos;

  ErrorContext context(int peer) const {
    return ErrorContext{rank_, peer, 0, static_cast<int64_t>(epoch_), "ucx"};
  }
  Status check_peer(int peer) const;

  // Requests and the UCX operations that carry them (ucx_transport.cc).
  Slot* take_slot(int peer, Request* req);
  void finish_request(Request* req, Status s);
  void settle(Slot* slot, Status s);
  void maybe_release(Slot* slot);
  // A part about to be posted (counted now), then what the post returned.
  Part* part_posting(Slot* slot, uint32_t* gen);
  void part_posted(Part* part, uint32_t gen, ucs_status_ptr_t r);
  void part_returned(Part* part);
  void send_part(Slot* slot, ucp_ep_h ep, const void* data, size_t bytes, uint64_t tag);
  static void on_send(void* request, ucs_status_t status, void* user);
  void send_done(Slot* slot, ucs_status_t status);
  using RecvHandler = void (UcxTransport::*)(Slot*, ucs_status_t, size_t);
  void recv_part(Slot* slot, void* dst, size_t bytes, uint64_t tag, RecvHandler handler);
  static void on_recv_head(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                           void* user);
  static void on_recv_payload(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user);
  void on_head(Slot* slot, ucs_status_t status, size_t length);
  void on_payload(Slot* slot, ucs_status_t status, size_t length);
  void fail_from_ucx(Slot* slot, ucs_status_t status, const char* what);
  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status);
  void fail_peer(int peer, Status why, bool log);

  // Closing (ucx_transport.cc).
  void settle_closes(std::vector<void*>* closing, Deadline bound);
  void flush_close();
  void teardown();

  // The steps of wire_up (ucx_wire_up.cc).
  Status publish_address(const UcxConnectParams& p, const std::string& prefix);
  Result<std::vector<Bytes>> await_addresses(const UcxConnectParams& p, const std::string& prefix);
  Status create_endpoint(int q, const Bytes& address);
  Status exchange_hellos(const UcxConnectParams& p);
  void post_hellos(Hellos& h);
  Status wait_hellos(const UcxConnectParams& p, const Hellos& h);
  Status check_hellos(const Hellos& h, Status outcome);
  Status release_hellos(Hellos& h, Status outcome);

  int rank_;
  int size_;
  uint32_t epoch_;
  UcxErrorMode mode_;
  std::shared_ptr<UcxContext> context_;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<Slot>> live_;
  std::vector<std::unique_ptr<Slot>> free_;
  std::vector<std::unique_ptr<Slot>> retired_;  // slots live at abort (see teardown)
  uint64_t completions_ = 0;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  bool aborted_ = false;
  std::chrono::microseconds spin_;
  size_t buffered_capacity_;  // per peer
};

}  // namespace rcoll::ucx
