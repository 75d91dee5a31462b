// Ending a UCX epoch: a failed peer's requests settled, endpoints closed
// (flushed where the epoch ends gracefully, bounded), the worker torn down.
#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "transports/ucx/ucx_transport_impl.h"

namespace rcoll::ucx {
namespace {

// How long a graceful close waits for the endpoints to flush.
constexpr std::chrono::milliseconds kFlushBound{2000};

}  // namespace

// Every request on `peer` fails with `why`; later ones fail at once.
// Posted receives are cancelled so UCX writes nothing more into them.
void UcxTransport::fail_peer(int peer, Status why, bool log) {
  Peer& pr = peers_[static_cast<size_t>(peer)];
  if (!pr.error.ok() || peer == rank_) return;
  if (log) RCOLL_LOG(kInfo, "%s", why.to_string().c_str());
  pr.error = why;
  std::vector<Slot*> mine;
  for (auto& s : live_) {
    if (s->peer == peer) mine.push_back(s.get());
  }
  for (Slot* s : mine) {
    settle(s, why);
    // Receives are cancelled. Sends are not: the peer may already hold the
    // rendezvous and copy the payload out of this process at any moment, so
    // the memory stays as it is until UCX hands the send back (or the
    // transport is destroyed). Cancelling one let the slot be reused while
    // the peer still read it: the peer's receive completed with garbage.
    if (s->is_send) continue;
    for (Part& p : s->part) {
      if (p.handle && worker_) ucp_request_cancel(worker_, p.handle);
    }
  }
  for (Slot* s : mine) maybe_release(s);
}

// Progresses the worker until every endpoint-close request in `closing` is
// done (and frees it) or `bound` passes; what is left stays in `closing`.
void UcxTransport::settle_closes(std::vector<void*>* closing, Deadline bound) {
  while (!closing->empty() && !bound.expired()) {
    ucp_worker_progress(worker_);
    std::erase_if(*closing, [](void* r) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
      ucp_request_free(r);
      return true;
    });
  }
}

void UcxTransport::flush_close() {
  if (!worker_) return;
  std::vector<void*> closing;
  for (auto& pr : peers_) {
    if (!pr.ep || !pr.error.ok()) continue;
    ucp_request_param_t prm{};  // no flags: flush, then close
    ucs_status_ptr_t r = ucp_ep_close_nbx(pr.ep, &prm);
    pr.ep = nullptr;
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
  }
  settle_closes(&closing, Deadline::after(kFlushBound));
  if (!closing.empty()) {
    RCOLL_LOG(kInfo,
              "ucx epoch %u: %zu endpoint(s) did not flush within %lld ms on close; closing anyway",
              epoch_, closing.size(), static_cast<long long>(kFlushBound.count()));
    for (void* r : closing) ucp_request_free(r);
  }
}

// Closes the endpoints and destroys the worker. Peer mode force-closes the
// endpoints (which completes every send UCX holds with UCS_ERR_CANCELED);
// without peer error handling UCX cannot force-close, so destroying the
// worker is what releases them.
void UcxTransport::teardown() {
  if (!worker_) return;
  std::vector<void*> closing;
  for (size_t p = 0; p < peers_.size(); ++p) {
    Peer& pr = peers_[p];
    if (!pr.ep) continue;
    if (mode_ == UcxErrorMode::kPeer) {
      ucp_request_param_t prm{};
      prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t r = ucp_ep_close_nbx(pr.ep, &prm);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
    }
    pr.ep = nullptr;
  }
  settle_closes(&closing, Deadline::after(std::chrono::milliseconds(500)));
  for (int i = 0; i < 64; ++i) {
    if (ucp_worker_progress(worker_) == 0) break;
  }
  // Operations UCX still holds (sends to a peer that stopped reading): hand
  // them back, so the worker's destruction releases them without a callback.
  size_t abandoned = 0;
  for (auto& slot : live_) {
    for (Part& p : slot->part) {
      if (p.handle) {
        ucp_request_free(p.handle);
        ++abandoned;
      }
      p.handle = nullptr;
      p.busy = false;
    }
    slot->parts = 0;
  }
  if (abandoned > 0) {
    // UCX warns about each such request when the worker goes; they are
    // abandoned on purpose, so say it once here instead.
    RCOLL_LOG(kDebug, "ucx epoch %u: releasing %zu transfer(s) abandoned by the abort", epoch_,
              abandoned);
    char level[32] = "";
    const bool saved = ucs_global_opts_get_value("LOG_LEVEL", level, sizeof(level)) == UCS_OK;
    (void)ucs_global_opts_set_value("LOG_LEVEL", "error");
    ucp_worker_destroy(worker_);
    if (saved) (void)ucs_global_opts_set_value("LOG_LEVEL", level);
  } else {
    ucp_worker_destroy(worker_);
  }
  worker_ = nullptr;
  // A peer that has not aborted yet may still copy a payload out of a send
  // slot (shared-memory rendezvous reads this process's memory directly):
  // keep their memory until the transport is destroyed, which the runtime
  // does only once every rank has aborted this epoch (after the ledgers).
  for (auto& slot : live_) retired_.push_back(std::move(slot));
  live_.clear();
}

}  // namespace rcoll::ucx
