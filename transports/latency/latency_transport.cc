#include "transports/latency/latency_transport.h"

#include <list>

namespace rcoll {

namespace {

class LatencyTransport final : public Transport {
 public:
  LatencyTransport(std::unique_ptr<Transport> inner, Clock::duration delay) : inner_(std::move(inner)), delay_(delay) {}

  const char* name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  uint32_t epoch() const override { return inner_->epoch(); }

  void post_send(int peer, const FrameHeader& header, const void* data, Request* req) override {
    inner_->post_send(peer, header, data, req);
  }

  // The frame lands in `dst` when it arrives; the caller learns of it `delay_` later.
  void post_recv(int peer, const FrameHeader& expected, void* dst, Request* req) override {
    inner_->post_recv(peer, expected, dst, hold(req));
  }

  void post_background_recv(int peer, const FrameHeader& expected, Request* req) override {
    inner_->post_background_recv(peer, expected, hold(req));
  }

  void progress(Deadline until) override {
    for (;;) {
      bool arrived = false;
      if (release(&arrived)) return;
      Deadline wake = until;
      for (const Held& h : held_)
        if (h.arrived) wake = wake.earlier(Deadline::at(h.due));
      if (!wake.expired()) inner_->progress(wake);
      arrived = false;
      if (release(&arrived)) return;
      if (until.expired()) return;
      // Nothing handed over: go on waiting when a frame arrived (held) or a
      // held one is due; otherwise a send finished, which the caller may want.
      if (!arrived && !wake.expired()) return;
    }
  }

  void abort(const Status& why) override {
    inner_->abort(why);
    for (Held& h : held_) {
      h.outer->status = h.inner.failed() ? h.inner.status : why;
      h.outer->state = Request::State::kFailed;
    }
    held_.clear();
  }

  void break_link(int peer) override { inner_->break_link(peer); }
  uint64_t bytes_sent() const override { return inner_->bytes_sent(); }
  uint64_t bytes_received() const override { return inner_->bytes_received(); }
  Clock::duration retransmission_wait() const override { return inner_->retransmission_wait(); }

 private:
  struct Held {
    Request* outer = nullptr;
    Request inner;
    bool arrived = false;
    Clock::time_point due;
  };

  // The inner request standing for the caller's `req` until it is handed over.
  Request* hold(Request* req) {
    req->state = Request::State::kPending;
    held_.emplace_back();
    held_.back().outer = req;
    return &held_.back().inner;
  }

  // Stamps new arrivals and hands over those due (failures at once). True when
  // a caller's request finished; *arrived when a frame arrived but is held.
  bool release(bool* arrived) {
    const auto now = Clock::now();
    bool finished = false;
    for (auto it = held_.begin(); it != held_.end();) {
      Held& h = *it;
      if (h.inner.failed()) {
        h.outer->status = h.inner.status;
        h.outer->state = Request::State::kFailed;
        finished = true;
        it = held_.erase(it);
        continue;
      }
      if (h.inner.finished() && !h.arrived) {
        h.arrived = true;
        h.due = now + delay_;
        *arrived = true;
      }
      if (h.arrived && h.due <= now) {
        h.outer->state = Request::State::kDone;
        finished = true;
        it = held_.erase(it);
        continue;
      }
      ++it;
    }
    return finished;
  }

  std::list<Held> held_;  // before inner_: the inner transport is destroyed first
  std::unique_ptr<Transport> inner_;
  Clock::duration delay_;
};

}  // namespace

std::unique_ptr<Transport> with_link_latency(std::unique_ptr<Transport> inner, Clock::duration one_way) {
  return std::make_unique<LatencyTransport>(std::move(inner), one_way);
}

}  // namespace rcoll
