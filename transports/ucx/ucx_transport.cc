#include "transports/ucx/ucx_transport.h"

#include <poll.h>
#include <sched.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "transports/ucx/ucx_transport_impl.h"

namespace rcoll {

const char* to_string(UcxErrorMode mode) {
  switch (mode) {
    case UcxErrorMode::kAuto: return "auto";
    case UcxErrorMode::kPeer: return "peer";
    case UcxErrorMode::kNone: return "none";
  }
  return "?";
}

namespace ucx {
namespace {

// Frames with at most this much payload travel as one message (header and
// payload copied into one buffer); larger ones as a header message followed by
// the payload, sent from and received into the caller's buffer.
constexpr size_t kInlinePayload = 8192;
constexpr size_t kHeadBytes = kFrameHeaderBytes + kInlinePayload;

}  // namespace

Result<std::shared_ptr<UcxContext>> UcxContext::get(const std::string& tls) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<UcxContext>> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto live = cache[tls].lock()) return live;
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return Status(ErrorCode::kTransport, "ucp_config_read failed: " + ucs_error(s));
  if (!tls.empty()) ucp_config_modify(config, "TLS", tls.c_str());
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  // Several communicators of one process (one worker each) may progress
  // their workers from different threads at once.
  params.mt_workers_shared = 1;
  ucp_context_h handle = nullptr;
  s = ucp_init(&params, config, &handle);
  ucp_config_release(config);
  if (s != UCS_OK) {
    return Status(ErrorCode::kTransport,
                  "ucp_init failed (UCX_TLS=" + (tls.empty() ? std::string("<default>") : tls) +
                      "): " + ucs_error(s));
  }
  auto ctx = std::shared_ptr<UcxContext>(new UcxContext(handle));
  cache[tls] = ctx;
  return ctx;
}

// A transport that was not aborted closes gracefully: every endpoint is
// flushed first, so what this rank sent last (the end of a closing barrier,
// say) reaches its peer even over a wire where a closed connection drops
// data still in flight.
UcxTransport::~UcxTransport() {
  if (!aborted_) flush_close();
  abort(Status(ErrorCode::kClosed, context(-1), "transport destroyed"));
}

void UcxTransport::post_send(int peer, const FrameHeader& header, const void* data, Request* req) {
  req->state = Request::State::kPending;
  if (Status s = check_peer(peer); !s.ok()) return finish_request(req, std::move(s));
  Peer& pr = peers_[static_cast<size_t>(peer)];
  const uint64_t seq = pr.send_seq++;
  Slot* slot = take_slot(peer, req);
  slot->is_send = true;
  slot->wire_bytes = kFrameHeaderBytes + header.payload_bytes;
  const FrameBytes head = encode(header);
  slot->posting = true;  // no completion until every part is posted
  if (header.payload_bytes <= kInlinePayload) {
    slot->buf.resize(kFrameHeaderBytes + header.payload_bytes);
    std::memcpy(slot->buf.data(), head.data(), kFrameHeaderBytes);
    if (header.payload_bytes > 0)
      std::memcpy(slot->buf.data() + kFrameHeaderBytes, data, header.payload_bytes);
    send_part(slot, pr.ep, slot->buf.data(), slot->buf.size(),
              make_tag(rank_, TagKind::kHead, seq));
  } else if (header.op_kind == OpKind::kSendRecv &&
             pr.buffered + header.payload_bytes <= buffered_capacity_) {
    // A point-to-point frame is copied aside and its send completes at once,
    // as a TCP send does once the socket buffer holds it: two ranks that
    // both send before they receive then meet, as they do over TCP (UCX's
    // own send completes only when the receiver has fetched the data). The
    // runtime keeps the tail of a send that a recovery could need again.
    slot->buf.assign(head.begin(), head.end());
    slot->payload.assign(static_cast<const uint8_t*>(data),
                         static_cast<const uint8_t*>(data) + header.payload_bytes);
    slot->buffered = header.payload_bytes;
    pr.buffered += slot->buffered;
    send_part(slot, pr.ep, slot->buf.data(), kFrameHeaderBytes,
              make_tag(rank_, TagKind::kHead, seq));
    send_part(slot, pr.ep, slot->payload.data(), header.payload_bytes,
              make_tag(rank_, TagKind::kPayload, seq));
    if (slot->req) {
      bytes_sent_ += slot->wire_bytes;
      settle(slot, Status());
    }
  } else {
    slot->buf.assign(head.begin(), head.end());
    send_part(slot, pr.ep, slot->buf.data(), kFrameHeaderBytes,
              make_tag(rank_, TagKind::kHead, seq));
    send_part(slot, pr.ep, data, header.payload_bytes, make_tag(rank_, TagKind::kPayload, seq));
  }
  slot->posting = false;
  send_done(slot, UCS_OK);
  maybe_release(slot);
}

void UcxTransport::post_recv(int peer, const FrameHeader& expected, void* dst, Request* req) {
  req->state = Request::State::kPending;
  if (Status s = check_peer(peer); !s.ok()) return finish_request(req, std::move(s));
  Peer& pr = peers_[static_cast<size_t>(peer)];
  Slot* slot = take_slot(peer, req);
  slot->seq = pr.recv_seq++;
  slot->expected = expected;
  slot->dst = dst;
  slot->buf.resize(kHeadBytes);
  recv_part(slot, slot->buf.data(), kHeadBytes, make_tag(peer, TagKind::kHead, slot->seq),
            &UcxTransport::on_head);
  maybe_release(slot);
}

void UcxTransport::progress(Deadline until) {
  if (!worker_) return;
  const uint64_t before = completions_;
  auto spin_until = Clock::now() + spin_;
  for (;;) {
    while (ucp_worker_progress(worker_) != 0) {
    }
    if (completions_ != before || until.expired()) return;
    if (Clock::now() < spin_until) {
      sched_yield();  // an oversubscribed host runs the peer we wait for
      continue;
    }
    // Nothing moved for a while: sleep on the worker's event fd.
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) continue;
    const auto wait = std::min<Clock::duration>(until.remaining(), std::chrono::milliseconds(10));
    const int ms = static_cast<int>(
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()));
    if (armed == UCS_OK && efd_ >= 0) {
      pollfd pfd{efd_, POLLIN, 0};
      ::poll(&pfd, 1, ms);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    spin_until = Clock::now() + spin_;
  }
}

void UcxTransport::abort(const Status& why) {
  if (aborted_) return;
  aborted_ = true;
  for (int p = 0; p < size_; ++p) fail_peer(p, why, /*log=*/false);
  teardown();
}

void UcxTransport::break_link(int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) return;
  fail_peer(peer,
            Status(ErrorCode::kTransport, context(peer),
                   "link to rank " + std::to_string(peer) + " closed by fault injection"),
            /*log=*/true);
}

Status UcxTransport::check_peer(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_ || !peers_[static_cast<size_t>(peer)].ep) {
    return Status(ErrorCode::kInternal, context(peer),
                  "no UCX endpoint to rank " + std::to_string(peer));
  }
  return peers_[static_cast<size_t>(peer)].error;
}

UcxTransport::Slot* UcxTransport::take_slot(int peer, Request* req) {
  std::unique_ptr<Slot> s;
  if (!free_.empty()) {
    s = std::move(free_.back());
    free_.pop_back();
  } else {
    s = std::make_unique<Slot>();
  }
  Slot* raw = s.get();
  raw->transport = this;
  raw->req = req;
  raw->peer = peer;
  raw->parts = 0;
  for (Part& p : raw->part) {
    p.slot = raw;
    p.handle = nullptr;
    p.busy = false;
  }
  raw->error = Status();
  raw->head_done = false;
  raw->posting = false;
  raw->live = true;
  raw->wire_bytes = 0;
  raw->buffered = 0;
  raw->is_send = false;
  live_.push_back(std::move(s));
  return raw;
}

void UcxTransport::finish_request(Request* req, Status s) {
  if (s.ok()) {
    req->state = Request::State::kDone;
  } else {
    req->status = std::move(s);
    req->state = Request::State::kFailed;
  }
  ++completions_;
}

// Finishes the slot's request (once) with `s`.
void UcxTransport::settle(Slot* slot, Status s) {
  if (!slot->req) return;
  Request* req = slot->req;
  slot->req = nullptr;
  finish_request(req, std::move(s));
}

// Returns a slot whose request is settled and whose UCX parts are all back to the pool.
void UcxTransport::maybe_release(Slot* slot) {
  if (slot->req || slot->parts > 0 || !slot->live) return;
  if (slot->buffered > 0) {
    peers_[static_cast<size_t>(slot->peer)].buffered -= slot->buffered;
    slot->buffered = 0;
  }
  slot->live = false;
  for (size_t i = 0; i < live_.size(); ++i) {
    if (live_[i].get() == slot) {
      free_.push_back(std::move(live_[i]));
      live_[i] = std::move(live_.back());
      live_.pop_back();
      break;
    }
  }
}

UcxTransport::Part* UcxTransport::part_posting(Slot* slot, uint32_t* gen) {
  Part* p = slot->part[0].busy ? &slot->part[1] : &slot->part[0];
  p->busy = true;
  p->handle = nullptr;
  *gen = ++p->gen;
  ++slot->parts;
  return p;
}

// r: the post's result. An error or an immediate completion (nullptr) runs
// no callback, so the part is back now; a request is kept only if its
// callback has not already run inside the post (the part is still busy
// with this post).
void UcxTransport::part_posted(Part* p, uint32_t gen, ucs_status_ptr_t r) {
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    part_returned(p);
  } else if (p->busy && p->gen == gen) {
    p->handle = r;
  }
}

void UcxTransport::part_returned(Part* p) {
  p->busy = false;
  p->handle = nullptr;
  --p->slot->parts;
}

void UcxTransport::send_part(Slot* slot, ucp_ep_h ep, const void* data, size_t bytes,
                             uint64_t tag) {
  if (!slot->req) return;  // an earlier part already failed
  ucp_request_param_t prm{};
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  prm.cb.send = &UcxTransport::on_send;
  uint32_t gen = 0;
  Part* part = part_posting(slot, &gen);
  prm.user_data = part;
  prm.datatype = ucp_dt_make_contig(1);
  ucs_status_ptr_t r = ucp_tag_send_nbx(ep, data, bytes, tag, &prm);
  part_posted(part, gen, r);
  if (r == nullptr) return send_done(slot, UCS_OK);
  if (UCS_PTR_IS_ERR(r)) return send_done(slot, UCS_PTR_STATUS(r));
}

void UcxTransport::on_send(void* request, ucs_status_t status, void* user) {
  auto* part = static_cast<Part*>(user);
  Slot* slot = part->slot;
  UcxTransport* t = slot->transport;
  t->part_returned(part);
  ucp_request_free(request);
  if (slot->parts == 0 && slot->buffered > 0) {
    t->peers_[static_cast<size_t>(slot->peer)].buffered -= slot->buffered;
    slot->buffered = 0;
  }
  t->send_done(slot, status);
  t->maybe_release(slot);
}

void UcxTransport::send_done(Slot* slot, ucs_status_t status) {
  if (status != UCS_OK) {
    return fail_from_ucx(slot, status, "sending to");
  }
  if (slot->parts == 0 && !slot->posting && slot->req) {
    bytes_sent_ += slot->wire_bytes;
    settle(slot, Status());
  }
}

void UcxTransport::recv_part(Slot* slot, void* dst, size_t bytes, uint64_t tag,
                             RecvHandler handler) {
  ucp_request_param_t prm{};
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  prm.cb.recv = handler == &UcxTransport::on_head ? &UcxTransport::on_recv_head
                                                  : &UcxTransport::on_recv_payload;
  uint32_t gen = 0;
  Part* part = part_posting(slot, &gen);
  prm.user_data = part;
  prm.datatype = ucp_dt_make_contig(1);
  // Always through the callback: UCX 1.13 completes a receive of an already
  // waiting message at once without reporting its length in recv_info.tag_info.
  // That callback runs inside ucp_tag_recv_nbx (part_posted).
  prm.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, dst, bytes, tag, ~uint64_t{0}, &prm);
  part_posted(part, gen, r);
  if (UCS_PTR_IS_ERR(r)) return (this->*handler)(slot, UCS_PTR_STATUS(r), 0);
}

void UcxTransport::on_recv_head(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                                void* user) {
  auto* part = static_cast<Part*>(user);
  Slot* slot = part->slot;
  UcxTransport* t = slot->transport;
  t->part_returned(part);
  ucp_request_free(request);
  t->on_head(slot, status, status == UCS_OK ? info->length : 0);
  t->maybe_release(slot);
}

void UcxTransport::on_recv_payload(void* request, ucs_status_t status,
                                   const ucp_tag_recv_info_t* info, void* user) {
  auto* part = static_cast<Part*>(user);
  Slot* slot = part->slot;
  UcxTransport* t = slot->transport;
  t->part_returned(part);
  ucp_request_free(request);
  t->on_payload(slot, status, status == UCS_OK ? info->length : 0);
  t->maybe_release(slot);
}

void UcxTransport::on_head(Slot* slot, ucs_status_t status, size_t length) {
  if (!slot->req) return;
  if (status != UCS_OK) return fail_from_ucx(slot, status, "receiving from");
  const int peer = slot->peer;
  auto decoded = decode_frame_header(slot->buf.data(), length);
  if (!decoded.ok()) {
    return fail_peer(peer,
                     Status(ErrorCode::kTransport, context(peer),
                            "corrupt frame from rank " + std::to_string(peer) + ": " +
                                decoded.status().message() + "; closing the endpoint"),
                     true);
  }
  const FrameHeader& got = decoded.value();
  // The op's number on this rank is the runtime's to fill in (AlgoContext::fail).
  const ErrorContext ctx = context(peer);
  if (Status s = match_frame(slot->expected, got, ctx); !s.ok())
    return fail_peer(peer, std::move(s), true);
  if (got.payload_bytes <= kInlinePayload) {
    if (length != kFrameHeaderBytes + got.payload_bytes) {
      return fail_peer(
          peer,
          Status(ErrorCode::kTransport, ctx,
                 "truncated frame from rank " + std::to_string(peer) + ": " + describe_frame(got) +
                     " arrived as " + std::to_string(length) + " bytes"),
          true);
    }
    if (got.payload_bytes > 0)
      std::memcpy(slot->dst, slot->buf.data() + kFrameHeaderBytes, got.payload_bytes);
    bytes_received_ += length;
    return settle(slot, Status());
  }
  slot->head_done = true;
  slot->wire_bytes = got.payload_bytes;
  recv_part(slot, slot->dst, got.payload_bytes, make_tag(peer, TagKind::kPayload, slot->seq),
            &UcxTransport::on_payload);
}

void UcxTransport::on_payload(Slot* slot, ucs_status_t status, size_t length) {
  if (!slot->req) return;
  if (status != UCS_OK) return fail_from_ucx(slot, status, "receiving from");
  if (length != slot->wire_bytes) {
    return fail_peer(slot->peer,
                     Status(ErrorCode::kTransport, context(slot->peer),
                            "payload from rank " + std::to_string(slot->peer) + " was " +
                                std::to_string(length) + " bytes, its header said " +
                                std::to_string(slot->wire_bytes)),
                     true);
  }
  bytes_received_ += kFrameHeaderBytes + length;
  settle(slot, Status());
}

// A UCX operation failed: the endpoint is unusable (UCX fails everything on
// it), so the whole peer is.
void UcxTransport::fail_from_ucx(Slot* slot, ucs_status_t status, const char* what) {
  if (status == UCS_ERR_CANCELED)
    return settle(slot, Status(ErrorCode::kAborted, context(slot->peer), "cancelled"));
  fail_peer(slot->peer,
            Status(ErrorCode::kTransport, context(slot->peer),
                   std::string(what) + " rank " + std::to_string(slot->peer) +
                       " failed in UCX: " + ucs_error(status)),
            true);
}

void UcxTransport::on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* pr = static_cast<Peer*>(arg);
  UcxTransport* t = pr->transport;
  t->fail_peer(pr->index,
               Status(ErrorCode::kTransport, t->context(pr->index),
                      "UCX reports the endpoint to rank " + std::to_string(pr->index) +
                          " failed (" + ucs_error(status) + "): rank " + std::to_string(pr->index) +
                          " closed it (it aborted the epoch, or its process is gone)"),
               true);
}

Status UcxTransport::start(const UcxConnectParams& p, const std::string& tls) {
  auto ctx = UcxContext::get(tls);
  if (!ctx.ok()) return Status(ctx.status().code(), context(-1), ctx.status().message());
  context_ = std::move(ctx).value();
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // the progress thread or a caller running a blocking op, one at a time
  if (ucs_status_t s = ucp_worker_create(context_->handle(), &wp, &worker_); s != UCS_OK) {
    worker_ = nullptr;
    return Status(ErrorCode::kTransport, context(-1), "ucp_worker_create failed: " + ucs_error(s));
  }
  if (ucp_worker_get_efd(worker_, &efd_) != UCS_OK) efd_ = -1;
  return Status();
}

}  // namespace ucx

namespace {

// rcoll's defaults when the user set no UCX_TLS: shared memory on one host
// (peer error handling needs a wire with peer-failure support, so tcp joins
// then), UCX's own choice across hosts. Without peer error handling, shared
// memory leaves out cross-memory attach (cma, in "sm"): a rank reading a
// peer's memory with process_vm_readv when that peer dies is ended by UCX's
// fatal-error handler (1 run in 4 of a rank killed during 64 MiB
// allreduces). posix and sysv copy through shared segments, which outlive a
// dead peer. Measured here (bench/RESULTS.md, stop 42): 2-rank 16-64 MiB
// allreduce busbw 3.7 against 3.1-3.4 GB/s with cma, 4-rank 1 MiB 0.91x;
// stop 40 measured about half at 16-64 MiB on another VM.
std::string default_tls(bool one_host, UcxErrorMode mode) {
  if (std::getenv("UCX_TLS") != nullptr) return "";
  if (!one_host) return "";
  return mode == UcxErrorMode::kPeer ? "sm,tcp,self" : "posix,sysv,self";
}

}  // namespace

Result<std::unique_ptr<Transport>> connect_ucx_transport(const UcxConnectParams& p) {
  UcxErrorMode mode = p.error_mode;
  if (mode == UcxErrorMode::kAuto) mode = p.one_host ? UcxErrorMode::kNone : UcxErrorMode::kPeer;
  const int spin = static_cast<int>(p.spin.count());
  auto t = std::make_unique<ucx::UcxTransport>(p.rank, p.size, p.epoch, mode, p.spin,
                                               p.buffered_send_bytes);
  const std::string tls = default_tls(p.one_host, mode);
  if (Status s = t->start(p, tls); !s.ok()) return s;
  if (p.size > 1) {
    if (Status s = t->wire_up(p); !s.ok()) return s;
  }
  if (p.epoch == 0 && p.rank == 0) {
    RCOLL_LOG(kInfo, "ucx: UCX %s, UCX_TLS=%s, error mode %s%s, polls %d us before sleeping", ucp_get_version_string(),
              std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : (tls.empty() ? "<UCX default>" : tls.c_str()),
              to_string(mode),
              mode == UcxErrorMode::kNone ? " (failures caught by rcoll's deadlines and heartbeats)" : "", spin);
  }
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace rcoll
