// Setting up an epoch's data plane (at creation and in every recovery):
// connect the chain's transport (falling back down the chain by agreement),
// agree that every rank connected, then time the links and agree on the
// tuning of the ops to come.
#include <algorithm>
#include <string>

#include "base/log.h"
#include "base/store_exchange.h"
#include "runtime/communicator_impl.h"
#include "runtime/store/call_deadline.h"
#include "runtime/store/keys.h"
#include "transports/factory.h"
#include "transports/latency/latency_transport.h"
#include "transports/tcp/interfaces.h"

namespace rcoll {

Status CommunicatorImpl::join(Deadline deadline) {
  if (!store_) {
    // Every rank takes the next instance number of this communicator name,
    // so a store shared by several communicators (or by successive ones with
    // one name) keeps their keys apart.
    auto base = make_prefix_store(boot_.store, "rcoll/" + options_.name);
    auto ticket = base->add("instances", 1);
    if (!ticket.ok()) {
      return Status(ticket.status().code(), ErrorContext{rank_, -1, 0, epoch_.load(), ""},
                    "rank " + std::to_string(rank_) + " could not register with the " +
                        boot_.store_description + ": " + ticket.status().message());
    }
    const int64_t instance = (ticket.value() - 1) / size_;
    store_ = make_prefix_store(base, std::to_string(instance));
    instance_store_ = store_;
  }
  if (!settings_agreed_ && size_ > 1) {
    settings_agreed_ = true;
    if (Status s = agree_settings(deadline); !s.ok()) return s;
  }
  return Status();
}

Status CommunicatorImpl::connect_epoch(uint32_t epoch, Deadline deadline, const Abandon& abandon,
                                       EpochAttempt* ahead, const Bytes* ahead_links) {
  if (Status s = join(deadline); !s.ok()) return s;
  EpochAgreement agreed;
  EpochAttempt attempt;
  const auto connect_started = Clock::now();
  for (bool first = true;; first = false) {
    const std::string name = chain_.current();
    // A recovery connected ahead of its exchange, on the transport it still
    // uses: that connect, and the agreement its exchange carried.
    const bool use_ahead = first && ahead != nullptr && ahead->name == name &&
                           ahead->epoch == epoch && ahead_links != nullptr;
    if (use_ahead) {
      attempt = std::move(*ahead);
    } else {
      if (first && ahead != nullptr && ahead->t.ok()) {
        ahead->t.value()->abort(Status(ErrorCode::kAborted,
                                       ErrorContext{rank_, -1, 0, epoch, ahead->name},
                                       "not every rank connected it ahead in its budget, or "
                                       "the ranks moved to another transport"));
      }
      attempt = attempt_epoch(name, epoch, deadline, abandon);
    }
    // With nowhere to fall back to, a failed connect is the answer; otherwise
    // every rank learns whether all connected, and all fall back together:
    // in the exchange of the link timings, which every epoch makes anyway.
    const bool has_next = chain_.has_next();
    if (!attempt.t.ok() && (!has_next || size_ == 1) && !use_ahead) return attempt.t.status();
    if (size_ > 1) {
      agreed = use_ahead ? read_agreement(attempt, *ahead_links, abandon)
                         : agree_epoch(attempt, deadline, abandon);
    }
    if (agreed.status.ok() && attempt.t.ok()) {
      retire_transport();
      transport_ = std::move(attempt.t).value();
      credits_.drop();  // the old transport, which held them, is gone
      transport_name_ = transport_->name();
      epoch_ = epoch;
      if (size_ > 1)
        epoch_watch_.watch(store_, epoch, keys::epoch_failed(epoch), keys::epoch_fatal(epoch));
      break;
    }
    if (agreed.status.ok())
      return attempt.t.status();  // the others agree, this rank did not connect
    if (attempt.t.ok()) attempt.t.value()->abort(agreed.status);
    // A death, a give-up, the store or the deadline: no transport would do better.
    if (!agreed.connect_failed || !has_next) return agreed.status;
    chain_.drop_current(Clock::now());
    tally_.fallbacks = chain_.fallbacks();
    RCOLL_LOG(kWarn,
              "transport %s could not connect epoch %u (%s); falling back to %s for epoch %u "
              "(fallback #%llu; chain %s)",
              name.c_str(), epoch, agreed.status.to_string().c_str(), chain_.current().c_str(),
              epoch, static_cast<unsigned long long>(tally_.fallbacks.load()),
              chain_.describe().c_str());
  }
  if (Status s = tune_links(epoch, deadline, agreed, attempt.last, attempt.timing_started); !s.ok())
    return s;
  last_connect_took_ = Clock::now() - connect_started;
  if (epoch > 0) return Status();
  const std::string why =
      options_.transports_reason.empty() ? "" : "; " + options_.transports_reason;
  RCOLL_LOG(kInfo,
            "communicator '%s' ready: %d ranks, epoch %u, transport %s (chain %s%s), store: %s, "
            "identity from %s; "
            "slowest link: %s",
            options_.name.c_str(), size_.load(), epoch, transport_->name(),
            chain_.describe().c_str(), why.c_str(), boot_.store_description.c_str(),
            boot_.identity_source.c_str(), tuner_.note().c_str());
  return Status();
}

// One transport's connect of `epoch` (fault injection included), and this
// rank's timing of its links: latency only where the last epoch ran on it
// among the same ranks (its bandwidth kept, unless a latency moved:
// link_tuning.h). A rank that did not connect says so at the connect's
// failure key (with a chain to fall back on), so that the others' connects
// and probes end.
CommunicatorImpl::EpochAttempt CommunicatorImpl::attempt_epoch(const std::string& name,
                                                               uint32_t epoch, Deadline deadline,
                                                               const Abandon& abandon, bool ahead) {
  EpochAttempt a;
  a.name = name;
  a.epoch = epoch;
  const std::string failed_key = keys::connect_failed(epoch, name);
  const bool reused = name == "tcp" && tcp_kept_->listener.valid();
  a.t = open_transport(name, epoch, deadline, failed_key, abandon);
  // Ahead of the recovery's exchange, a connect that runs out of its budget
  // failed nothing: a rank was late (or frozen, or dead: the exchange
  // says). The epoch is connected after the exchange, as before.
  a.late = ahead && !a.t.ok() && deadline.expired();
  if (reused && !a.t.ok() && !a.late) {
    // Perhaps the kept listener itself: this rank's next ledger says it
    // keeps none, and every rank publishes anew.
    RCOLL_LOG(kInfo,
              "epoch %u over tcp failed on epoch %u's listener and addresses; this rank drops "
              "them, and the next epoch over tcp listens and publishes anew",
              epoch, tcp_kept_->epoch);
    drop_kept_listener();
  }
  for (const Fault& f : faults_) {
    if (a.t.ok() && f.kind == FaultKind::kLinkLatency && epoch >= f.epoch &&
        (f.rank == -1 || f.rank == rank_)) {
      RCOLL_LOG(kWarn,
                "fault injection: every frame this rank receives over %s in epoch %u arrives %lld "
                "us late (link-latency)",
                name.c_str(), epoch, static_cast<long long>(f.us));
      a.t = with_link_latency(std::move(a.t).value(), std::chrono::microseconds(f.us));
    }
  }
  if (size_ == 1) return a;
  a.last = tuner_.last_sample(epoch, name, size_);
  a.timing_started = Clock::now();
  if (a.t.ok()) {
    // The probe has a budget of its own, as long as a connect's: a slow
    // connect (8 ranks on 2 cores can take most of it) must not leave the
    // timing too little to finish in (ahead of an exchange, the connect's
    // budget is the probe's too). It ends early where a rank did not
    // connect (its ring neighbours would wait for it), with a chain to fall
    // back on, or where the runtime gave up on the epoch.
    a.mine = time_links(*a.t.value(), epoch, ahead ? deadline : own_budget(deadline), a.last,
                        &a.moved, connect_cancelled(failed_key, abandon));
    a.late = ahead && !a.mine.valid && deadline.expired();
  } else if (chain_.has_next() && !a.late) {
    // The failure key first, so that a rank seeing every rank's value also
    // sees it. The first diagnosis wins (a rank that only saw the connect
    // cancelled does not restate it).
    const std::string text = "rank " + std::to_string(rank_) + ": " + a.t.status().message();
    if (auto there = store_->check(failed_key); !there.ok() || !there.value()) {
      (void)store_->set(failed_key, Bytes(text.begin(), text.end()));
      janitor_.note_key(failed_key);
    }
  }
  return a;
}

Result<std::unique_ptr<Transport>> CommunicatorImpl::open_transport(const std::string& name,
                                                                    uint32_t epoch,
                                                                    Deadline deadline,
                                                                    const std::string& failed_key,
                                                                    const Abandon& abandon) {
  for (Fault& f : faults_) {
    if (f.kind == FaultKind::kFailConnect && f.transport == name && f.count > 0 && epoch >= f.epoch &&
        (f.rank == -1 || f.rank == rank_)) {
      --f.count;
      ++tally_.injected;
      return Status(ErrorCode::kPeerUnreachable, ErrorContext{rank_, -1, 0, epoch, name},
                    "connect of epoch " + std::to_string(epoch) + " failed by fault injection (fail-connect)");
    }
  }
  HostConnectParams p;
  p.key_prefix = keys::transport_addresses(name, epoch);
  // TCP publishes only where it keeps no listener, and keeps the keys of the
  // exchange whose listener it keeps (erased once dropped).
  const bool tcp = name == "tcp";
  const bool reusing = tcp && tcp_kept_->listener.valid();
  if (tcp) p.tcp_kept = tcp_kept_;
  p.rank = rank_;
  p.size = size_;
  p.epoch = epoch;
  p.store = store_;
  p.job_token = boot_.job_token;
  p.one_host = prefer_loopback();
  p.ifname_spec = options_.socket_ifname;
  p.route_address = route_address_;
  // For UCX: within what a send's tail backup covers (in_flight_capacity()).
  p.socket_buffer_bytes =
      options_.socket_buffer_bytes > 0 ? options_.socket_buffer_bytes : kSocketBufferBytes;
  p.tcp_congestion = options_.tcp_congestion;
  p.ucx_error_mode = options_.ucx_error_mode == "peer"   ? UcxErrorMode::kPeer
                     : options_.ucx_error_mode == "none" ? UcxErrorMode::kNone
                                                         : UcxErrorMode::kAuto;
  p.deadline = deadline;
  p.spin = spin();
  p.cancelled = connect_cancelled(failed_key, abandon);
  auto connected = connect_host_transport(name, p);
  if (!tcp || (!reusing && tcp_kept_->key_prefix != p.key_prefix))
    janitor_.note_exchange(p.key_prefix);  // published, and not kept
  return connected;
}

std::function<bool()> CommunicatorImpl::connect_cancelled(const std::string& failed_key,
                                                          const Abandon& abandon) const {
  std::shared_ptr<Store> store = store_;
  const bool can_fall_back = chain_.has_next();
  // Another rank's failure to connect is looked for in the store at most
  // every 200 ms, the first time 200 ms in: a connect that is over by then
  // asks nothing (the wire-ups poll this every slice: P requests and more).
  return [store, failed_key, can_fall_back, &abandon, looked = Clock::now()]() mutable {
    constexpr Clock::duration kLookEvery = std::chrono::milliseconds(200);
    if (abandon && abandon()) return true;
    if (!can_fall_back || Clock::now() - looked < kLookEvery) return false;
    looked = Clock::now();
    auto failed = store->check(failed_key);
    return failed.ok() && failed.value();
  };
}

// A rank among `missing` that died (or left) after connecting will never
// publish: said at once, as the recovery would, not when the deadline ends.
Status CommunicatorImpl::died_during_setup(const std::vector<int>& missing, uint32_t epoch,
                                           const char* tname) const {
  for (int q : missing) {
    if ((dead_ && dead_[static_cast<size_t>(q)]) ||
        (liveness_ && liveness_->peer(q).health == PeerHealth::kDead)) {
      return Status(ErrorCode::kPeerDead, ErrorContext{rank_, q, 0, epoch, tname},
                    "rank " + std::to_string(q) + " died while epoch " + std::to_string(epoch) +
                        " was being set up; the epoch cannot be used");
    }
  }
  return Status();
}

void CommunicatorImpl::drop_kept_listener() {
  if (!tcp_kept_->listener.valid()) return;
  janitor_.note_exchange(tcp_kept_->key_prefix);
  *tcp_kept_ = KeptListener{};
}

// This rank's timing of `t`'s links (latency only, keeping `last`'s
// bandwidth, unless `last` is null); `*moved`: its latency moved since
// `last`. An invalid sample where the probe failed (it aborted `t`).
LinkSample CommunicatorImpl::time_links(Transport& t, uint32_t epoch, Deadline deadline,
                                        const LinkSample* last, bool* moved,
                                        const std::function<bool()>& cancelled) {
  *moved = false;
  auto probed = probe_ring(t, deadline, last == nullptr, cancelled);
  if (!probed.ok()) {
    RCOLL_LOG(kWarn,
              "timing the links of epoch %u over %s failed: %s; this rank aborted the epoch, the "
              "next op recovers",
              epoch, t.name(), probed.status().to_string().c_str());
    return LinkSample{};
  }
  LinkSample mine = probed.value();
  mine.deadline_ms = options_.op_timeout.count();
  describe_this_host(&mine);
  // Not timed: the last epoch's bandwidth, unless the latency moved (then
  // a placeholder a sample needs to decode, and every rank times again).
  if (last != nullptr) {
    mine.bandwidth = 1;
    *moved = !LinkTuner::keep_bandwidth(*last, mine);
  }
  return mine;
}

// One exchange: this rank's timing of the attempt's links, or that it did
// not connect, published; every rank's read back reduced (the worst link,
// who could not time theirs, who did not connect, whether a latency moved).
// Before, whether every rank connected was an exchange of its own, and a
// recovery at 16,384 ranks spent 0.6 s on it.
CommunicatorImpl::EpochAgreement CommunicatorImpl::agree_epoch(EpochAttempt& a,
                                                               Deadline connect_deadline,
                                                               const Abandon& abandon) {
  const ErrorContext at{rank_, -1, 0, a.epoch, a.name};
  const std::string failed_key = keys::connect_failed(a.epoch, a.name);
  EpochAgreement out;
  out.mine = a.mine;
  out.probed = a.mine.valid;
  const std::string prefix = keys::connect(a.epoch, a.name);
  janitor_.note_exchange(prefix);
  const StoreExchange exchange(*store_, prefix, size_, reduce_link_values);
  // The others' probes end by their own deadlines, which started when their
  // connects did: a probe that ran out of time here would leave none for
  // reading theirs (so the reading gets a budget of its own too). A rank
  // that failed to connect says why: every rank stops waiting with its
  // diagnosis. A rank that died (or left) after connecting will never
  // publish: said at once, as the recovery would, not when the deadline ends.
  const Deadline deadline = own_budget(connect_deadline);
  auto judge = [&](const std::vector<int>& missing) -> Status {
    if (abandon && abandon()) return abandoned_connect(at);
    if (Status failed = connect_failure(failed_key, at); !failed.ok()) {
      out.connect_failed = true;
      return failed;
    }
    return died_during_setup(missing, a.epoch, a.name.c_str());
  };
  // Published and waited for in one request where the store can.
  const StoreExchange::Gathered gathered =
      exchange.publish_and_gather(rank_, a.value(), deadline, judge, Millis(50));
  switch (gathered.ended) {
    case StoreExchange::Gathered::Ended::kAll:
      break;
    case StoreExchange::Gathered::Ended::kJudged:
      out.status = gathered.status;
      return out;
    case StoreExchange::Gathered::Ended::kTimedOut:
      out.status = Status(ErrorCode::kTimeout,
                          ErrorContext{rank_, gathered.missing.front(), 0, a.epoch, a.name},
                          "rank(s) " + rank_list(gathered.missing) + " did not report their " +
                              a.name + " connect and link timing of epoch " +
                              std::to_string(a.epoch) + " in time; the epoch cannot be used");
      return out;
    case StoreExchange::Gathered::Ended::kStoreFailed:
      out.status =
          Status(gathered.status.code(), at,
                 "publishing this rank's " + a.name + " connect and link timing of epoch " +
                     std::to_string(a.epoch) + " and reading every rank's from the store: " +
                     gathered.status.message() + "; the epoch cannot be used");
      return out;
  }
  EpochAgreement read = read_agreement(a, gathered.reduced, abandon);
  read.connect_failed = read.connect_failed || out.connect_failed;
  return read;
}

// Every rank's timing of the attempt's links as reduced (reduce_link_values),
// read: every rank reads the same, so every rank decides alike.
CommunicatorImpl::EpochAgreement CommunicatorImpl::read_agreement(const EpochAttempt& a,
                                                                  const Bytes& reduced,
                                                                  const Abandon& abandon) {
  const ErrorContext at{rank_, -1, 0, a.epoch, a.name};
  EpochAgreement out;
  out.mine = a.mine;
  out.probed = a.mine.valid;
  if (!decode_link_summary(reduced, &out.links)) {
    out.status = Status(ErrorCode::kStore, at,
                        "the link timings of epoch " + std::to_string(a.epoch) +
                            " as combined in the store do not decode; the epoch cannot be used");
    return out;
  }
  if (!out.links.not_connected.empty()) {
    // A rank that did not connect set the key before its own value.
    out.connect_failed = true;
    out.status = connect_failure(keys::connect_failed(a.epoch, a.name), at);
    if (out.status.ok())
      out.status = Status(ErrorCode::kPeerUnreachable, at,
                          "rank(s) " + rank_list(out.links.not_connected) + " could not connect " +
                              a.name + " for epoch " + std::to_string(a.epoch));
    return out;
  }
  if (abandon && abandon()) out.status = abandoned_connect(at);
  return out;
}

Status CommunicatorImpl::connect_failure(const std::string& failed_key,
                                         const ErrorContext& at) const {
  auto failed = store_->check(failed_key);
  if (!failed.ok() || !failed.value()) return Status();
  auto text = store_->get(failed_key, Millis(1000));
  std::string why = text.ok() ? std::string(text.value().begin(), text.value().end())
                              : "a rank failed to connect";
  return Status(ErrorCode::kPeerUnreachable, at, why);
}

Status CommunicatorImpl::abandoned_connect(const ErrorContext& at) {
  return Status(ErrorCode::kAborted, at,
                "the connect of epoch " + std::to_string(at.epoch) +
                    " was abandoned (a rank died or gave up)");
}

// Adopts the agreed timing of the epoch's links (every rank the same). A
// rank that could not time its links makes every rank abort the epoch alike:
// the first op on it recovers instead of finding a half-broken data plane.
Status CommunicatorImpl::tune_links(uint32_t epoch, Deadline connect_deadline,
                                    EpochAgreement& agreed, const LinkSample* last,
                                    Clock::time_point started) {
  if (size_ == 1) {
    if (epoch == 0) tuner_.start_over();  // a group shrunk to one rank
    return Status();
  }
  const char* tname = transport_->name();
  LinkSummary& links = agreed.links;
  // The bandwidth kept since the last epoch, unless a rank's latency moved:
  // then every link is timed again, bandwidth too, and that timing counts.
  const bool retimed = last != nullptr && links.unmeasured.empty() && links.moved;
  if (retimed) {
    RCOLL_LOG(kInfo,
              "epoch %u over %s: a link's latency moved since epoch %u; timing every link's "
              "bandwidth again",
              epoch, tname, epoch - 1);
    auto again = time_again(epoch, own_budget(connect_deadline), &agreed.mine);
    if (!again.ok()) return again.status();
    links = std::move(again).value();
    agreed.probed = agreed.mine.valid;
  }
  if (!links.unmeasured.empty()) {
    const Status why(ErrorCode::kTransport, ErrorContext{rank_, -1, 0, epoch, tname},
                     "rank(s) " + rank_list(links.unmeasured) +
                         " could not time their links of epoch " + std::to_string(epoch));
    if (agreed.probed) {
      RCOLL_LOG(kWarn, "%s; every rank aborts epoch %u over %s, the next op recovers",
                why.message().c_str(), epoch, tname);
      transport_->abort(why);
    }
    // The next recovery times them again; until then the tuning stays (a
    // latency-only timing, or one timed again where a rank could not, has
    // no bandwidth to adopt).
    if (last != nullptr) return Status();
  }
  tuner_.adopt(epoch, links, agreed.mine, tname, size_,
               std::chrono::duration<double, std::milli>(Clock::now() - started).count());
  return Status();
}

// Every link's bandwidth timed again (a latency moved), and every rank's
// timing read back reduced, in an exchange of its own.
Result<LinkSummary> CommunicatorImpl::time_again(uint32_t epoch, Deadline deadline,
                                                 LinkSample* mine) {
  const char* tname = transport_->name();
  bool moved = false;
  *mine = time_links(*transport_, epoch, deadline, nullptr, &moved, {});
  const std::string prefix = keys::tune_again(epoch);
  janitor_.note_exchange(prefix);
  const StoreExchange exchange(*store_, prefix, size_, reduce_link_values);
  auto died = [this, epoch, tname](const std::vector<int>& missing) {
    return died_during_setup(missing, epoch, tname);
  };
  const StoreExchange::Gathered gathered =
      exchange.publish_and_gather(rank_, encode_link_value(*mine, false), deadline, died);
  if (gathered.ended == StoreExchange::Gathered::Ended::kJudged) return gathered.status;
  if (gathered.ended == StoreExchange::Gathered::Ended::kTimedOut) {
    const int q = gathered.missing.front();
    return Status(ErrorCode::kTimeout, ErrorContext{rank_, q, 0, epoch, tname},
                  "rank(s) " + rank_list(gathered.missing) + " did not publish their link timing while epoch " +
                      std::to_string(epoch) + " was being set up; the epoch cannot be used");
  }
  if (!gathered.ok()) {
    return Status(gathered.status.code(), ErrorContext{rank_, -1, 0, epoch, tname},
                  "publishing this rank's link timing of epoch " + std::to_string(epoch) +
                      " and reading every rank's from the store: " + gathered.status.message() +
                      "; the epoch cannot be used");
  }
  LinkSummary links;
  if (!decode_link_summary(gathered.reduced, &links)) {
    return Status(ErrorCode::kStore, ErrorContext{rank_, -1, 0, epoch, tname},
                  "the link timings of epoch " + std::to_string(epoch) +
                      " as combined in the store do not decode; the epoch cannot be used");
  }
  return links;  // who could not time theirs: tune_links aborts the epoch
}

// Folds the bytes of the transport being replaced into the running totals.
void CommunicatorImpl::retire_transport() {
  if (!transport_) return;
  tally_.retire_transport(transport_->bytes_sent(), transport_->bytes_received());
}

// A state is free again once its pool slot holds the only reference: the
// caller's Work handles, the queued op and the running op are gone (the
// replay log keeps no Work). use_count() is a relaxed read: the fence orders
// the reset after the last holder's release of its reference.

}  // namespace rcoll
