// Wiring up one epoch's UCX worker: its address published in the store (and
// every rank's read as one combined value: base/store_exchange.h), an
// endpoint to every peer from the peer's address, then a hello each way per
// pair (rank, world size, epoch and the job token's hash), so that every pair
// is wired up and of one job before the first op.
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/store_exchange.h"
#include "transports/ucx/ucx_transport_impl.h"

namespace rcoll::ucx {

// One hello send and one hello receive per peer (this rank's own entries stay
// unused), and the hello this rank sends.
struct UcxTransport::Hellos {
  struct Pending {
    void* handle = nullptr;
    bool done = false;
    ucs_status_t status = UCS_OK;
    FrameBytes in{};
    size_t length = 0;
  };

  explicit Hellos(size_t size) : sends(size), recvs(size) {}

  static void on_send_done(void* req, ucs_status_t st, void* user) {
    auto* pd = static_cast<Pending*>(user);
    pd->done = true;
    pd->status = st;
    ucp_request_free(req);
    pd->handle = nullptr;
  }
  static void on_recv_done(void* req, ucs_status_t st, const ucp_tag_recv_info_t* info,
                           void* user) {
    auto* pd = static_cast<Pending*>(user);
    pd->done = true;
    pd->status = st;
    pd->length = st == UCS_OK ? info->length : 0;
    ucp_request_free(req);
    pd->handle = nullptr;
  }

  bool any_pending() const {
    for (auto* list : {&sends, &recvs}) {
      for (const Pending& pd : *list) {
        if (pd.handle) return true;
      }
    }
    return false;
  }

  FrameHeader hello;
  FrameBytes out{};
  std::vector<Pending> sends;
  std::vector<Pending> recvs;
};

Status UcxTransport::wire_up(const UcxConnectParams& p) {
  const std::string prefix =
      p.key_prefix.empty() ? "ucx/" + std::to_string(epoch_) + "/" : p.key_prefix;
  if (Status s = publish_address(p, prefix); !s.ok()) return s;
  auto theirs = await_addresses(p, prefix);
  if (!theirs.ok()) return theirs.status();
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    if (Status s = create_endpoint(q, theirs.value()[static_cast<size_t>(q)]); !s.ok()) return s;
  }
  return exchange_hellos(p);
}

Status UcxTransport::publish_address(const UcxConnectParams& p, const std::string& prefix) {
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  if (ucs_status_t s = ucp_worker_get_address(worker_, &addr, &addr_len); s != UCS_OK) {
    return Status(ErrorCode::kTransport, context(-1),
                  "ucp_worker_get_address failed: " + ucs_error(s));
  }
  Bytes mine(reinterpret_cast<uint8_t*>(addr), reinterpret_cast<uint8_t*>(addr) + addr_len);
  ucp_worker_release_address(worker_, addr);
  if (Status s = StoreExchange(*p.store, prefix, size_).publish(rank_, mine); !s.ok()) {
    return Status(
        s.code(), context(-1),
        "publishing the UCX address of epoch " + std::to_string(epoch_) + ": " + s.message());
  }
  return Status();
}

// Every rank's address (one combined read), in slices so that a cancelled
// connect ends early.
Result<std::vector<Bytes>> UcxTransport::await_addresses(const UcxConnectParams& p,
                                                         const std::string& prefix) {
  const auto cancelled = [&p] {
    return p.cancelled && p.cancelled() ? Status(ErrorCode::kAborted, "cancelled") : Status();
  };
  StoreExchange::Gathered got =
      StoreExchange(*p.store, prefix, size_).gather(p.deadline, {}, Millis(100), cancelled);
  if (got.ok()) return std::move(got.values);
  const int q = got.missing.empty() ? -1 : got.missing.front();
  if (got.ended == StoreExchange::Gathered::Ended::kJudged) {
    return Status(ErrorCode::kAborted, context(-1),
                  "UCX wire-up of epoch " + std::to_string(epoch_) +
                      " cancelled: the runtime gave up on it (a rank died or gave up)");
  }
  if (got.ended == StoreExchange::Gathered::Ended::kStoreFailed) {
    return Status(got.status.code(), context(q),
                  "reading the UCX addresses of epoch " + std::to_string(epoch_) + ": " +
                      got.status.message());
  }
  return Status(ErrorCode::kPeerUnreachable, context(q),
                "rank(s) " + rank_list(got.missing) +
                    " did not publish their UCX address for epoch " + std::to_string(epoch_) +
                    " in time");
}

Status UcxTransport::create_endpoint(int q, const Bytes& address) {
  const ucp_err_handling_mode_t err_mode =
      mode_ == UcxErrorMode::kPeer ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  Peer& pr = peers_[static_cast<size_t>(q)];
  pr.index = q;
  pr.transport = this;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep.err_mode = err_mode;
  if (err_mode == UCP_ERR_HANDLING_MODE_PEER) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_handler.cb = &UcxTransport::on_ep_error;
    ep.err_handler.arg = &pr;
  }
  if (ucs_status_t s = ucp_ep_create(worker_, &ep, &pr.ep); s != UCS_OK) {
    pr.ep = nullptr;
    return Status(ErrorCode::kPeerUnreachable, context(q),
                  "UCX cannot reach rank " + std::to_string(q) + " (ucp_ep_create: " +
                      ucs_error(s) + "; error mode " + to_string(mode_) + ", UCX_TLS=" +
                      (std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "<rcoll default>") + ")");
  }
  return Status();
}

// Hellos: one each way per pair, carrying rank, world size, epoch and the job token's hash.
Status UcxTransport::exchange_hellos(const UcxConnectParams& p) {
  Hellos h(static_cast<size_t>(size_));
  h.hello.type = FrameType::kHello;
  h.hello.epoch = epoch_;
  h.hello.root = rank_;
  h.hello.count = static_cast<uint64_t>(size_);
  h.hello.op_seq = job_token_hash(p.job_token);
  h.out = encode(h.hello);
  post_hellos(h);
  Status outcome = wait_hellos(p, h);
  outcome = check_hellos(h, std::move(outcome));
  return release_hellos(h, std::move(outcome));
}

void UcxTransport::post_hellos(Hellos& h) {
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const size_t i = static_cast<size_t>(q);
    ucp_request_param_t rp{};
    rp.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    rp.cb.recv = &Hellos::on_recv_done;
    rp.user_data = &h.recvs[i];
    rp.datatype = ucp_dt_make_contig(1);
    rp.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, h.recvs[i].in.data(), h.recvs[i].in.size(),
                                          make_tag(q, TagKind::kHello, 0), ~uint64_t{0}, &rp);
    if (UCS_PTR_IS_ERR(r)) {
      h.recvs[i].done = true;
      h.recvs[i].status = UCS_PTR_STATUS(r);
    } else if (!h.recvs[i].done) {
      // (A hello already here completes inside ucp_tag_recv_nbx: its
      // callback ran and freed the request.)
      h.recvs[i].handle = r;
    }
    ucp_request_param_t sp{};
    sp.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    sp.cb.send = &Hellos::on_send_done;
    sp.user_data = &h.sends[i];
    sp.datatype = ucp_dt_make_contig(1);
    ucs_status_ptr_t s = ucp_tag_send_nbx(peers_[i].ep, h.out.data(), h.out.size(),
                                          make_tag(rank_, TagKind::kHello, 0), &sp);
    if (s == nullptr || UCS_PTR_IS_ERR(s)) {
      h.sends[i].done = true;
      h.sends[i].status = s == nullptr ? UCS_OK : UCS_PTR_STATUS(s);
    } else {
      h.sends[i].handle = s;
    }
  }
}

// Progresses the worker until every hello is done, the deadline passes (an
// error with no message yet: check_hellos names the ranks) or another rank
// gave up on the epoch.
Status UcxTransport::wait_hellos(const UcxConnectParams& p, const Hellos& h) {
  auto all_done = [&] {
    for (int q = 0; q < size_; ++q) {
      const size_t i = static_cast<size_t>(q);
      if (q != rank_ && (!h.sends[i].done || !h.recvs[i].done)) return false;
    }
    return true;
  };
  auto next_check = Clock::now();
  while (!all_done()) {
    if (ucp_worker_progress(worker_) != 0) continue;
    if (p.deadline.expired()) return Status(ErrorCode::kPeerUnreachable, context(-1), "");
    if (Clock::now() >= next_check) {
      next_check = Clock::now() + std::chrono::milliseconds(50);
      if (p.cancelled && p.cancelled()) {
        return Status(ErrorCode::kAborted, context(-1),
                      "connect of epoch " + std::to_string(epoch_) +
                          " cancelled: another rank gave up on it");
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return Status();
}

// What failed, by peer: a hello that UCX failed or that is not of this job.
// An outcome without a message (the deadline) becomes the list of ranks that
// sent no hello.
Status UcxTransport::check_hellos(const Hellos& h, Status outcome) {
  for (int q = 0; q < size_ && outcome.ok(); ++q) {
    if (q == rank_) continue;
    const Hellos::Pending& s = h.sends[static_cast<size_t>(q)];
    const Hellos::Pending& r = h.recvs[static_cast<size_t>(q)];
    if (s.status != UCS_OK || r.status != UCS_OK) {
      return Status(ErrorCode::kPeerUnreachable, context(q),
                    "UCX hello with rank " + std::to_string(q) +
                        " failed: " + ucs_error(s.status != UCS_OK ? s.status : r.status));
    }
    auto got = decode_frame_header(r.in.data(), r.length);
    if (!got.ok() || got.value().type != FrameType::kHello || got.value().root != q ||
        got.value().epoch != epoch_ || got.value().count != static_cast<uint64_t>(size_) ||
        got.value().op_seq != h.hello.op_seq) {
      const std::string why =
          got.ok() ? "wrong rank, world size, epoch or job token (a process of another job?)"
                   : got.status().message();
      RCOLL_LOG(kWarn, "ucx epoch %u: refused the hello that came as rank %d: %s", epoch_, q,
                why.c_str());
      outcome = Status(ErrorCode::kPeerUnreachable, context(q),
                       "the UCX hello from rank " + std::to_string(q) +
                           " was refused (wrong job token, epoch or world size)");
    }
  }
  if (!outcome.ok() && outcome.message().empty()) {
    std::string missing;
    for (int q = 0; q < size_; ++q) {
      if (q != rank_ && !h.recvs[static_cast<size_t>(q)].done) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(q);
      }
    }
    outcome = Status(ErrorCode::kPeerUnreachable, context(-1),
                     "UCX wire-up of epoch " + std::to_string(epoch_) +
                         " timed out: no hello from rank(s) " + missing);
  }
  return outcome;
}

// Cancels what is still outstanding and waits a little for UCX to hand it
// back; returns `outcome`, or an error if some of it never came back.
Status UcxTransport::release_hellos(Hellos& h, Status outcome) {
  for (auto* list : {&h.sends, &h.recvs}) {
    for (Hellos::Pending& pd : *list) {
      if (pd.handle) ucp_request_cancel(worker_, pd.handle);
    }
  }
  const Deadline bound = Deadline::after(std::chrono::milliseconds(200));
  while (h.any_pending() && !bound.expired()) ucp_worker_progress(worker_);
  if (h.any_pending()) {
    // Sends UCX cannot cancel: the worker's destruction releases them, and the
    // callbacks must not find the Pending gone. Destroy the worker now.
    abort(outcome.ok() ? Status(ErrorCode::kInternal, "hello not finished") : outcome);
    if (outcome.ok()) {
      outcome = Status(ErrorCode::kPeerUnreachable, context(-1), "UCX hellos did not complete");
    }
  }
  return outcome;
}

}  // namespace rcoll::ucx
