// The recovery protocol (DESIGN.md, Recovery):
//   detect -> abort the local data plane -> announce "epoch e failed" -> publish
//   this rank's ledger -> wait for every rank's ledger -> agree where each op
//   resumes -> connect epoch e+1 -> re-run what peers still need -> resume.
// Every step is bounded by Options::recovery_timeout; a rank that never joins
// is named in the error.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/communicator_impl.h"
#include "runtime/log.h"
#include "runtime/store/call_deadline.h"

namespace rcoll {
namespace {

std::string epoch_key(const char* what, uint32_t epoch) { return std::string("epoch/") + std::to_string(epoch) + "/" + what; }
std::string vote_key(uint32_t epoch, int rank) {
  return "recovery/" + std::to_string(epoch) + "/transport/" + std::to_string(rank);
}
std::string ledger_key(uint32_t epoch, int rank) {
  return "recovery/" + std::to_string(epoch) + "/ledger/" + std::to_string(rank);
}

}  // namespace

bool CommunicatorImpl::epoch_failed_elsewhere() {
  if (epoch_failed_seen_) return true;
  if (liveness_ && liveness_->highest_aborted_epoch() >= static_cast<int64_t>(epoch_.load())) {
    epoch_failed_seen_ = true;
    return true;
  }
  epoch_failed_seen_ = epoch_watch_.failed(epoch_.load());
  return epoch_failed_seen_;
}

void CommunicatorImpl::publish_fatal(const Status& s) {
  if (size_ == 1 || !store_) return;
  const ScopedStoreDeadline store_bound(Deadline::after(kBestEffortStoreBudget));
  // The first diagnosis wins; ranks that learned it from the store do not restate it.
  if (auto there = store_->check(epoch_key("fatal", epoch_.load())); there.ok() && there.value()) return;
  const std::string text = std::to_string(static_cast<int>(s.code())) + "\n" + std::to_string(s.context().peer) + "\n" +
                           std::to_string(rank_) + "\n" + s.message() + " (reported by rank " + std::to_string(rank_) + ")";
  (void)store_->set(epoch_key("fatal", epoch_.load()), Bytes(text.begin(), text.end()));
  const std::string why = "rank " + std::to_string(rank_) + " gave up: " + s.to_string();
  (void)store_->set(epoch_key("failed", epoch_.load()), Bytes(why.begin(), why.end()));
}

Result<ResumePlan> CommunicatorImpl::recover(const Status& cause) {
  const auto started = Clock::now();
  const uint32_t failed = epoch_.load();
  const Deadline deadline = Deadline::after(options_.recovery_timeout);
  const std::string what = current_ ? current_->op.describe() : std::string("no op in flight");
  RCOLL_LOG(kWarn, "epoch %u failed during %s: %s -- recovering: aborting the data plane, exchanging ledgers, reconnecting",
            failed, what.c_str(), cause.to_string().c_str());
  transport_->abort(cause);
  // Every store call below ends by the recovery deadline (plus a second, so the
  // diagnosis made once it has passed can still ask the store who is missing),
  // even on a stalled store host.
  const ScopedStoreDeadline store_bound(Deadline::after(options_.recovery_timeout + Millis(1000)));
  const uint64_t seq = current_ ? current_->op.seq : 0;
  auto store_failed = [&](const Status& s, const char* step) {
    return Status(s.code(), ErrorContext{rank_, -1, seq, failed, transport_name_.load()},
                  "recovery of epoch " + std::to_string(failed) + " gave up after " +
                      std::to_string(std::chrono::duration_cast<Millis>(Clock::now() - started).count()) + " ms: " + step +
                      ": " + s.message());
  };

  // Tell everyone (idle ranks poll this key), then publish what this rank has done.
  const std::string why = "rank " + std::to_string(rank_) + ": " + cause.to_string();
  if (liveness_) liveness_->announce_abort(failed, why.substr(0, 1000));
  if (Status s = store_->set(epoch_key("failed", failed), Bytes(why.begin(), why.end())); !s.ok()) {
    return store_failed(s, "could not announce the failed epoch in the store");
  }
  // This rank's vote on the next epoch's transport, before the ledger: a rank
  // that sees every ledger sees every vote.
  // With NCCL in use, the vote also says whether to stop using it for device
  // collectives (and why): a rank that cannot join its communicator, or saw
  // it fail too often. A failure on NCCL does not count against the host transport.
  const bool chain = chain_.order().size() > 1;
  const bool nccl_votes = chain_.nccl() && nccl_off_.empty();
  if (chain || nccl_votes) {
    const bool nccl_failed = (current_ != nullptr && current_->nccl) ||
                             (current_ == nullptr && waiting_device_op_ != nullptr && runs_on_nccl(*waiting_device_op_));
    const size_t vote = chain && !nccl_failed ? chain_.vote_after_failure(Clock::now()) : chain_.index();
    const std::string drop = nccl_votes ? nccl_vote() : std::string();
    Bytes ballot{static_cast<uint8_t>(vote), static_cast<uint8_t>(drop.empty() ? 0 : 1)};
    ballot.insert(ballot.end(), drop.begin(), drop.end());
    if (Status s = store_->set(vote_key(failed, rank_), ballot); !s.ok()) {
      return store_failed(s, "could not publish this rank's transport vote in the store");
    }
  }
  const std::string ledger = serialize_ledger(log_, current_, size_);
  if (Status s = store_->set(ledger_key(failed, rank_), Bytes(ledger.begin(), ledger.end())); !s.ok()) {
    return store_failed(s, "could not publish this rank's ledger in the store");
  }

  // Wait for every rank's ledger. Silent ranks are waited for up to the
  // recovery timeout; the error names whoever never joined.
  std::vector<std::string> keys;
  for (int q = 0; q < size_; ++q) keys.push_back(ledger_key(failed, q));
  Clock::time_point last_note = started;
  for (;;) {
    Status s = store_->wait(keys, std::min<Millis>(Millis(200), std::max<Millis>(Millis(1), deadline.remaining_ms())));
    if (s.ok()) break;
    if (s.code() != ErrorCode::kTimeout) return store_failed(s, "waiting for the other ranks' ledgers");
    // A peer hit a failure no recovery can fix: end with its diagnosis.
    if (auto fatal = store_->check(epoch_key("fatal", failed)); fatal.ok() && fatal.value()) {
      auto text = store_->get(epoch_key("fatal", failed), Millis(1000));
      if (text.ok()) {
        std::string t(text.value().begin(), text.value().end());
        const int code = std::atoi(t.c_str());
        // code \n peer \n reporter \n message. The peer named is the other
        // party of the failure: the reporter when the peer was this rank.
        size_t a = t.find('\n'), b = t.find('\n', a + 1), c = t.find('\n', b + 1);
        const int orig_peer = std::atoi(t.c_str() + a + 1), reporter = std::atoi(t.c_str() + b + 1);
        const int origin = orig_peer == rank_ ? reporter : orig_peer;
        t = t.substr(c);
        return Status(static_cast<ErrorCode>(code), ErrorContext{rank_, origin, current_ ? current_->op.seq : 0, failed, transport_name_.load()},
                      t.substr(t.find('\n') + 1));
      }
    }
    std::string missing;
    int first_missing = -1;
    Status store_status;  // the store's own failure, if it did not answer
    for (int q = 0; q < size_; ++q) {
      auto has = store_->check(keys[static_cast<size_t>(q)]);
      if (!has.ok()) {
        store_status = has.status();
        break;
      }
      if (!has.value()) {
        if (first_missing < 0) first_missing = q;
        missing += (missing.empty() ? "" : ", ") + std::to_string(q);
        if (liveness_ && liveness_->peer(q).left) {
          return Status(ErrorCode::kClosed, ErrorContext{rank_, q, current_ ? current_->op.seq : 0, failed, transport_name_.load()},
                        "recovery of epoch " + std::to_string(failed) + " cannot finish: rank " + std::to_string(q) +
                            " has closed its communicator (it said goodbye), so it will not rejoin");
        }
        if (dead_ && dead_[static_cast<size_t>(q)]) {
          return Status(ErrorCode::kPeerDead, ErrorContext{rank_, q, current_ ? current_->op.seq : 0, failed, transport_name_.load()},
                        "recovery of epoch " + std::to_string(failed) + " cannot finish: rank " + std::to_string(q) +
                            " is dead (its process is gone); a dead rank cannot be recovered in place");
        }
      }
    }
    if (deadline.expired() && !store_status.ok()) {
      return store_failed(store_status, "the store did not answer while this rank waited for the other ranks' ledgers "
                                        "(is the store's host stalled?)");
    }
    if (deadline.expired()) {
      return Status(ErrorCode::kPeerUnreachable, ErrorContext{rank_, first_missing, current_ ? current_->op.seq : 0, failed, transport_name_.load()},
                    "recovery of epoch " + std::to_string(failed) + " gave up after " +
                        std::to_string(options_.recovery_timeout.count()) + " ms: rank(s) " + missing +
                        " never joined (dead, frozen or partitioned); the communicator is unusable");
    }
    if (Clock::now() - last_note > std::chrono::seconds(2)) {
      last_note = Clock::now();
      RCOLL_LOG(kWarn, "recovery of epoch %u: still waiting for rank(s) %s (%lld ms left)", failed, missing.c_str(),
                static_cast<long long>(deadline.remaining_ms().count()));
    }
  }
  std::vector<std::string> ledgers;
  for (const auto& k : keys) {
    auto v = store_->get(k, deadline.remaining_ms());
    if (!v.ok()) return store_failed(v.status(), "reading the ledgers from the store");
    ledgers.emplace_back(v.value().begin(), v.value().end());
  }
  auto plan = agree_resume(rank_, size_, log_, current_, ledgers);
  if (!plan.ok()) return plan.status();
  // The most cautious vote wins: a move down if any rank counts too many
  // failures, a probe back up only if every rank's cool-down is over; NCCL
  // dropped if any rank asks.
  size_t agreed = 0;
  std::string nccl_drop;
  for (int q = 0; (chain || nccl_votes) && q < size_; ++q) {
    auto v = store_->get(vote_key(failed, q), deadline.remaining_ms());
    if (!v.ok()) return store_failed(v.status(), "reading the transport votes from the store");
    const Bytes& b = v.value();
    if (!b.empty()) agreed = std::max<size_t>(agreed, b[0]);
    if (b.size() > 1 && b[1] != 0 && nccl_drop.empty()) nccl_drop.assign(b.begin() + 2, b.end());
  }
  if (nccl_votes && !nccl_drop.empty()) drop_nccl(nccl_drop, failed + 1);
  if (chain) {
    const std::string from = chain_.current();
    const size_t from_index = chain_.index();
    if (chain_.adopt(agreed, Clock::now())) {
      fallbacks_ = chain_.fallbacks();
      probes_ = chain_.probes();
      if (chain_.index() > from_index) {
        RCOLL_LOG(kWarn, "transport %s failed %d times within %lld s; every rank moves to %s for epoch %u (fallback #%llu; chain %s)",
                  from.c_str(), options_.transport_failures_to_drop,
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(options_.transport_failure_window).count()),
                  chain_.current().c_str(), failed + 1, static_cast<unsigned long long>(fallbacks_.load()), chain_.describe().c_str());
      } else {
        RCOLL_LOG(kWarn, "transport %s unused for %lld s since it was dropped; every rank probes back up to it for epoch %u (probe #%llu; chain %s)",
                  chain_.current().c_str(),
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(options_.transport_probe_after).count()),
                  failed + 1, static_cast<unsigned long long>(probes_.load()), chain_.describe().c_str());
      }
    }
  }

  // A fresh data plane: new connections, and frames of the old epoch can no
  // longer arrive anywhere.
  tune_from_seq_ = plan.value().collectives_started + 1;
  credits_from_seq_ = tune_from_seq_;
  last_credit_seq_ = 0;
  if (Status s = connect_epoch(failed + 1, deadline); !s.ok()) {
    return Status(s.code(), s.context(), "recovery could not rebuild the data plane for epoch " + std::to_string(failed + 1) + ": " + s.message());
  }
  epoch_failed_seen_ = false;
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count();
  ++recoveries_;
  recovery_micros_ += micros;
  std::string resume;
  for (const auto& e : plan.value().entries) {
    resume += (resume.empty() ? "" : ", ") + std::string("op ") + std::to_string(e.local_seq) + " from slice " + std::to_string(e.resume);
  }
  RCOLL_LOG(kWarn, "recovered: epoch %u over %s after %.1f ms (recovery #%llu); resuming %s", failed + 1, transport_name_.load(),
            static_cast<double>(micros) / 1000.0, static_cast<unsigned long long>(recoveries_.load()),
            resume.empty() ? "nothing (no op in flight here)" : resume.c_str());
  return plan;
}

Status CommunicatorImpl::replay_completed(const ResumePlan& plan, OpRecord* current, size_t* resume) {
  *resume = current ? current->total : 0;
  for (const auto& e : plan.entries) {
    if (current != nullptr && e.local_seq == current->op.seq) {
      *resume = e.resume;
      continue;
    }
    for (auto& rec : log_.records()) {
      if (rec.op.seq != e.local_seq) continue;
      RCOLL_LOG(kInfo, "re-running slices %zu..%zu of %s (completed here, needed by a peer)", e.resume, rec.total,
                rec.op.describe().c_str());
      if (Status s = run_slices(rec, e.resume, true); !s.ok()) return s;
    }
  }
  return Status();
}

Status CommunicatorImpl::recover_and_replay(Status cause, OpRecord* current, size_t* resume) {
  // A failure while re-running completed ops is just another failed epoch.
  while (recoveries_this_op_ < options_.max_recoveries_per_op) {
    ++recoveries_this_op_;
    auto plan = recover(cause);
    if (!plan.ok()) return plan.status();
    Status s = replay_completed(plan.value(), current, resume);
    if (s.ok()) return s;
    if (!recoverable(s)) return s;
    cause = s;
  }
  return Status(cause.code(), cause.context(), cause.message() + " (gave up: recovery kept failing)");
}

void CommunicatorImpl::report_positions(const Status& s) {
  if (size_ == 1 || !store_) return;
  const ScopedStoreDeadline store_bound(Deadline::after(kBestEffortStoreBudget + Millis(1000)));
  const uint32_t e = epoch_.load();
  const std::string mine = recorder_.position();
  (void)store_->set(epoch_key("where", e) + "/" + std::to_string(rank_), Bytes(mine.begin(), mine.end()));
  // Ranks that fail for good publish theirs too; give them a moment.
  std::string summary;
  const Deadline until = Deadline::after(std::chrono::milliseconds(1000));
  for (int q = 0; q < size_; ++q) {
    std::string where;
    if (q == rank_) {
      where = mine;
    } else if (dead_ && dead_[static_cast<size_t>(q)]) {
      where = "dead (process gone)";
    } else {
      auto v = store_->get(epoch_key("where", e) + "/" + std::to_string(q), std::max<Millis>(Millis(1), until.remaining_ms()));
      if (v.ok()) {
        where.assign(v.value().begin(), v.value().end());
      } else if (liveness_) {
        const PeerView pv = liveness_->peer(q);
        where = std::string("no report; heartbeats say ") + to_string(pv.health) + ", at collective seq " +
                std::to_string(pv.state.op_seq) + (pv.state.in_comm ? " (in comm)" : " (in compute)");
      } else {
        where = "no report";
      }
    }
    summary += "\n  rank " + std::to_string(q) + ": " + where;
  }
  RCOLL_LOG(kError, "where every rank was when %s failed for good (%s):%s", current_ ? current_->op.describe().c_str() : "the communicator",
            to_string(s.code()), summary.c_str());
}

}  // namespace rcoll
