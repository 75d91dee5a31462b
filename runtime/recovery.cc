// The recovery protocol (DESIGN.md, Recovery):
//   detect -> abort the local data plane -> announce "epoch e failed" -> publish
//   this rank's ledger -> wait for every rank's ledger -> agree where each op
//   resumes -> connect epoch e+1 -> re-run what peers still need -> resume.
// Over TCP with the listeners kept, epoch e+1 is connected (and its links
// timed) before the ledgers, within a budget, and the outcome rides on them:
// one exchange; where a rank was late, e+2 is connected after them.
// Every step is bounded by Options::recovery_timeout; a rank that never joins
// is named in the error.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "base/log.h"
#include "base/store_exchange.h"
#include "runtime/communicator_impl.h"
#include "runtime/store/call_deadline.h"
#include "runtime/store/keys.h"
#include "runtime/store/notices.h"

namespace rcoll {

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
  const uint32_t e = epoch_.load();
  if (auto there = store_->check(keys::epoch_fatal(e)); there.ok() && there.value()) return;
  const std::string text = store::encode(
      store::FatalNotice{s.code(), s.context().peer, rank_,
                         s.message() + " (reported by rank " + std::to_string(rank_) + ")"});
  const std::string why = "rank " + std::to_string(rank_) + " gave up: " + s.to_string();
  // And for the next epoch: the others may be in it already (a recovery's
  // exchange over, connected ahead of it, while this rank gave up after it),
  // and learn it there from their epoch watch, not as a rank that left.
  for (const uint32_t epoch : {e, e + 1}) {
    (void)store_->set(keys::epoch_fatal(epoch), Bytes(text.begin(), text.end()));
    (void)store_->set(keys::epoch_failed(epoch), Bytes(why.begin(), why.end()));
  }
}

// One recovery of one failed epoch: what its steps share.
struct CommunicatorImpl::RecoveryRound {
  Clock::time_point started = Clock::now();
  uint32_t failed = 0;  // the epoch that failed
  Deadline deadline = Deadline::never();
  uint64_t seq = 0;  // the op in flight here, if any
  bool chain = false;       // a transport chain to vote on
  bool nccl_votes = false;  // NCCL in use: the ballot also says whether to drop it
  // recovery_interrupted learns of a fatal notice from the epoch watch (one
  // request parked per rank). Polled in the store, even every 200 ms, the
  // notice was 3,153 of a 128-rank recovery's 4,184 requests. Set where the
  // store itself must be asked at once (a connect just failed: its diagnosis
  // may be a notice the watch has not brought yet).
  mutable bool ask_store_for_fatal = false;
  // "recovery of epoch e gave up after t ms: step: why", as this rank's error.
  Status gave_up(const CommunicatorImpl& c, const Status& s, const char* step) const {
    return Status(s.code(), ErrorContext{c.rank_, -1, seq, failed, c.transport_name_.load()},
                  "recovery of epoch " + std::to_string(failed) + " gave up after " +
                      std::to_string(std::chrono::duration_cast<Millis>(Clock::now() - started).count()) + " ms: " + step +
                      ": " + s.message());
  }
};

Result<ResumePlan> CommunicatorImpl::recover(const Status& cause) {
  RecoveryRound round;
  round.failed = epoch_.load();
  round.deadline = Deadline::after(options_.recovery_timeout);
  round.seq = in_flight_.record ? in_flight_.record->op.seq : 0;
  round.chain = chain_.order().size() > 1;
  round.nccl_votes = chain_.nccl() && nccl_.off.empty();
  const std::string what = in_flight_.what("no op in flight");
  RCOLL_LOG(kWarn, "epoch %u failed during %s: %s -- recovering: aborting the data plane, exchanging ledgers, reconnecting",
            round.failed, what.c_str(), cause.to_string().c_str());
  transport_->abort(cause);
  // Every store call below ends by the recovery deadline (plus a second, so the
  // diagnosis made once it has passed can still ask the store who is missing),
  // even on a stalled store host.
  const ScopedStoreDeadline store_bound(Deadline::after(options_.recovery_timeout + Millis(1000)));

  janitor_.retire();  // the setup of this epoch and the recovery before it
  if (Status s = announce(round, cause); !s.ok()) return s;
  // Connecting waits for every rank: a death or a give-up meanwhile ends it
  // at once (polled at most every 20 ms), and is the error, not the connect's.
  std::vector<int> others;
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) others.push_back(q);
  }
  Clock::time_point last_poll{};
  bool interrupted = false;
  const auto abandon = [&] {
    if (interrupted) return true;
    if (Clock::now() - last_poll < std::chrono::milliseconds(20)) return false;
    last_poll = Clock::now();
    interrupted = !recovery_interrupted(round, others).ok();
    return interrupted;
  };
  // Over TCP with every rank's listener kept (every rank connected this
  // epoch on them, or all listened anew), the next epoch is connected before
  // the exchange, on the kept listeners and addresses (nothing at the store),
  // and its links timed: each rank's connect outcome and timing ride on its
  // ledger, and the recovery makes one exchange instead of two. Each of
  // those cost about 0.7 s among 16,384 ranks (every rank's thread woken
  // once more, bench/scale_harness.cc). The exchange then decides as the
  // connect's own would have: where every rank connected ahead within its
  // budget and the ranks stay on TCP, its outcome is the epoch's (a rank
  // that did not connect: every rank falls back); otherwise (a rank late,
  // frozen or dead; the ballots move the ranks) the connect is dropped and
  // the next epoch connected after the exchange, as before.
  EpochAttempt ahead;
  const bool connects_ahead = size_ > 1 && chain_.current() == "tcp" && tcp_kept_->listener.valid();
  // What this rank's ledger says it kept is what it kept before: a connect
  // ahead that fails drops the listener (as any connect on it does), for
  // the next epoch over TCP.
  const std::string kept_before = tcp_kept_->listener.valid() ? tcp_kept_->key_prefix : "";
  if (connects_ahead) {
    inject_in_recovery(round.seq, round.failed, "connect");
    // A budget of a few times the last connect's (at least 250 ms, at most
    // a connect's timeout): a rank late to the recovery, frozen or dead
    // makes the others publish their ledgers without it rather than wait
    // for it here (the exchange names who never came).
    const Clock::duration budget = std::clamp<Clock::duration>(
        4 * last_connect_took_, std::chrono::milliseconds(250), options_.connect_timeout);
    ahead = attempt_epoch("tcp", round.failed + 1, round.deadline.earlier(Deadline::after(budget)),
                          abandon, /*ahead=*/true);
  }
  // Published and gathered in one request, unless a fault kills this rank in
  // between (then published first, as a rank that dies while it waits has).
  const Bytes mine = ballot_and_ledger(round, kept_before, connects_ahead ? &ahead : nullptr);
  janitor_.note_exchange(keys::recovery_ledgers(round.failed));
  const bool dies_after_publishing = kills_in_recovery(round.seq, "ledgers");
  if (dies_after_publishing) {
    const StoreExchange exchange(*store_, keys::recovery_ledgers(round.failed), size_,
                                 pack_ledgers);
    if (Status s = exchange.publish(rank_, mine); !s.ok())
      return round.gave_up(*this, s, "could not publish this rank's ledger in the store");
    inject_in_recovery(round.seq, round.failed, "ledgers");
  }
  std::vector<Bytes> ballots;
  std::vector<std::string> kept;
  Bytes links;
  auto ledgers =
      gather_ledgers(round, dies_after_publishing ? nullptr : &mine, &ballots, &kept, &links);
  if (!ledgers.ok()) return ledgers.status();
  // The TCP listeners stay where they are only if every rank kept its own
  // from the same exchange; else every rank listens and publishes anew.
  // (One entry per distinct ledger value: ranks a slice apart write two.)
  const bool all_kept = !kept.empty() && !kept.front().empty() &&
                        std::all_of(kept.begin(), kept.end(),
                                    [&](const std::string& k) { return k == kept.front(); });
  if (!all_kept && tcp_kept_->listener.valid()) {
    RCOLL_LOG(kInfo,
              "recovery of epoch %u: not every rank kept its tcp listener of epoch %u; every rank "
              "listens and publishes its address anew for epoch %u",
              round.failed, tcp_kept_->epoch, round.failed + 1);
    drop_kept_listener();
  }
  auto plan = agree_resume(rank_, size_, log_, in_flight_.current(), ledgers.value());
  if (!plan.ok()) return plan.status();
  if (Status s = adopt_ballots(round, ballots); !s.ok()) return s;

  // A fresh data plane: new connections, and frames of the old epoch can no
  // longer arrive anywhere.
  tuner_.resume_from(plan.value().collectives_started + 1);
  credits_.restart_from(plan.value().collectives_started + 1);
  if (!connects_ahead) inject_in_recovery(round.seq, round.failed, "connect");
  // Every rank connected ahead in its budget (they all kept their
  // listeners), or the epoch is connected now, as before.
  const bool use_ahead = connects_ahead && !links.empty();
  // A rank that died after publishing its ledger ends the recovery here, as
  // it would have ended the connect after the exchange.
  if (use_ahead) {
    if (Status why = recovery_interrupted(round, others); !why.ok()) return why;
  }
  // Where some rank was late connecting ahead, the epoch after: the
  // connections made ahead, and dials of theirs still waiting in a kept
  // listener's backlog, belong to an epoch no rank uses (refused as an
  // earlier epoch's), not to the one every rank connects now.
  const uint32_t next = connects_ahead && !use_ahead ? round.failed + 2 : round.failed + 1;
  if (Status s = connect_epoch(next, round.deadline, abandon, connects_ahead ? &ahead : nullptr,
                               use_ahead ? &links : nullptr);
      !s.ok()) {
    round.ask_store_for_fatal = true;
    if (Status why = recovery_interrupted(round, others); !why.ok()) return why;
    return Status(s.code(), s.context(),
                  "recovery could not rebuild the data plane for epoch " + std::to_string(next) +
                      ": " + s.message());
  }
  // Every rank published its ledger: none reads what was retired again.
  // Erased once the epoch is connected, off the path of its exchanges (a
  // rank in 64 asks; at 16,384 ranks those 256 requests came between the
  // ledgers and the next exchange, which waited for them).
  janitor_.erase_retired(*store_, rank_, size_);
  epoch_failed_seen_ = false;
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - round.started).count();
  tally_.note_recovery(micros);
  std::string resume;
  for (const auto& e : plan.value().entries) {
    resume += (resume.empty() ? "" : ", ") + std::string("op ") + std::to_string(e.local_seq) + " from slice " + std::to_string(e.resume);
  }
  RCOLL_LOG(kWarn, "recovered: epoch %u over %s after %.1f ms (recovery #%llu); resuming %s",
            epoch_.load(), transport_name_.load(), static_cast<double>(micros) / 1000.0,
            static_cast<unsigned long long>(tally_.recoveries.load()),
            resume.empty() ? "nothing (no op in flight here)" : resume.c_str());
  return plan;
}

// Tell everyone: the failed key in the store (idle ranks watch it), then a
// notice over the liveness channel.
Status CommunicatorImpl::announce(const RecoveryRound& round, const Status& cause) {
  const std::string why = "rank " + std::to_string(rank_) + ": " + cause.to_string();
  // Only a rank that found the failure itself sets the key: a rank told of
  // it by a peer (its failure is a peer's abort frame, or a notice or the
  // watch that made it abort: kAborted) knows the key is there or coming:
  // the peer that found it sets it before it announces over the liveness
  // channel, and a data plane's abort frame comes from a rank that found it
  // or was told. What this rank heard meanwhile does not count: the rank
  // that found a failure must set the key even if a notice its own abort
  // frame caused came back to it first. Before, every rank the watch had
  // not told set it: a request each, about a second at 16,384 ranks (#37);
  // at 16 ranks a closed link now has one rank set it.
  // A peer's notice went to every rank already (the overlay passes it on):
  // telling them again is P-1 frames and log lines per rank for nothing.
  const bool heard =
      liveness_ && liveness_->highest_aborted_epoch() >= static_cast<int64_t>(round.failed);
  const bool told = cause.code() == ErrorCode::kAborted || epoch_watch_.failed(round.failed);
  // A store that fails the set still leaves the notice to go (the peers stop
  // waiting on this epoch either way).
  const Status set =
      told ? Status()
           : store_->set(keys::epoch_failed(round.failed), Bytes(why.begin(), why.end()));
  if (liveness_ && !heard) liveness_->announce_abort(round.failed, why.substr(0, 1000));
  if (!set.ok())
    return round.gave_up(*this, set, "could not announce the failed epoch in the store");
  if (rank_ == 0) janitor_.note_key(keys::epoch_failed(round.failed));
  return Status();
}

Bytes CommunicatorImpl::ballot_and_ledger(const RecoveryRound& round, const std::string& kept,
                                          const EpochAttempt* ahead) {
  // The ballot: the next epoch's transport, and with NCCL in use whether to
  // stop using it for device collectives (and why): a rank that cannot join
  // its communicator, or saw it fail too often. A failure on NCCL does not
  // count against the host transport. Empty with nothing to vote on.
  Bytes ballot;
  if (round.chain || round.nccl_votes) {
    const bool nccl_failed = (in_flight_.record != nullptr && in_flight_.record->nccl) ||
                             (in_flight_.record == nullptr && waiting_device_op_ != nullptr &&
                              runs_on_nccl(*waiting_device_op_));
    const size_t vote = round.chain && !nccl_failed ? chain_.vote_after_failure(Clock::now()) : chain_.index();
    const std::string drop = round.nccl_votes ? nccl_vote() : std::string();
    ballot = store::encode(store::Ballot{static_cast<uint8_t>(vote), !drop.empty(), drop});
  }
  const std::string ledger = serialize_ledger(log_, in_flight_.current(), size_);
  // `kept`: which TCP listener this rank keeps (the exchange its address
  // went out in), if any: the next epoch dials the kept addresses only if
  // every rank keeps the same.
  // And where this rank connected the next epoch ahead, its connect outcome
  // and link timing (pack_ledgers).
  return encode_values({ballot, Bytes(ledger.begin(), ledger.end()),
                        Bytes(kept.begin(), kept.end()), ahead ? ahead->value() : Bytes{}});
}

Status CommunicatorImpl::replay_completed(const ResumePlan& plan, std::span<OpRecord> current,
                                          std::span<size_t> resume) {
  for (size_t i = 0; i < current.size(); ++i) resume[i] = current[i].total;
  for (const auto& e : plan.entries) {
    bool in_flight = false;
    for (size_t i = 0; i < current.size(); ++i) {
      if (e.local_seq != current[i].op.seq) continue;
      resume[i] = e.resume;
      in_flight = true;
    }
    if (in_flight) continue;
    for (auto& rec : log_.records()) {
      if (rec.op.seq != e.local_seq) continue;
      RCOLL_LOG(kInfo, "re-running slices %zu..%zu of %s (completed here, needed by a peer)", e.resume, rec.total,
                rec.op.describe().c_str());
      if (Status s = run_slices(rec, e.resume, true); !s.ok()) return s;
    }
  }
  return Status();
}

// What ends any wait of a recovery at once, at every step (ledgers, votes,
// the connect of the next epoch, its link timing): a rank gave up and
// published its diagnosis (the fatal notice of the failed epoch), or a rank
// among `awaited` died or closed its communicator. OK while none of these.
Status CommunicatorImpl::recovery_interrupted(const RecoveryRound& round,
                                              const std::vector<int>& awaited) {
  const ErrorContext at{rank_, -1, round.seq, round.failed, transport_name_.load()};
  bool fatal = epoch_watch_.fatal(round.failed);
  // A rank that left or died may have given up first: its diagnosis, if it
  // left one, says more than that it is gone (and the watch may not have
  // brought it yet).
  const bool gone = std::any_of(awaited.begin(), awaited.end(), [&](int q) {
    return (liveness_ && liveness_->peer(q).left) || (dead_ && dead_[static_cast<size_t>(q)]);
  });
  if (!fatal && (round.ask_store_for_fatal || gone)) {
    round.ask_store_for_fatal = false;
    auto there = store_->check(keys::epoch_fatal(round.failed));
    fatal = there.ok() && there.value();
  }
  if (fatal) {
    auto text = store_->get(keys::epoch_fatal(round.failed), Millis(1000));
    const auto notice =
        text.ok() ? store::decode_fatal(std::string(text.value().begin(), text.value().end()))
                  : std::nullopt;
    if (notice) {
      // The peer named is the other party of the failure: the reporter when the peer was this rank.
      ErrorContext c = at;
      c.peer = notice->peer == rank_ ? notice->reporter : notice->peer;
      return Status(notice->code, c, notice->message);
    }
    // A rank gave up: this recovery cannot succeed, whatever the notice said.
    return Status(ErrorCode::kAborted, at,
                  "recovery of epoch " + std::to_string(round.failed) +
                      " cannot finish: a rank gave up on it (its fatal notice is in the store but "
                      "could not be read: " +
                      (text.ok() ? std::string("malformed") : text.status().message()) + ")");
  }
  for (int q : awaited) {
    ErrorContext c = at;
    c.peer = q;
    if (liveness_ && liveness_->peer(q).left) {
      return Status(ErrorCode::kClosed, c,
                    "recovery of epoch " + std::to_string(round.failed) + " cannot finish: rank " +
                        std::to_string(q) +
                        " has closed its communicator (it said goodbye), so it will not rejoin");
    }
    if (dead_ && dead_[static_cast<size_t>(q)]) {
      return Status(ErrorCode::kPeerDead, c,
                    "recovery of epoch " + std::to_string(round.failed) + " cannot finish: rank " +
                        std::to_string(q) +
                        " is dead (its process is gone); a dead rank cannot be recovered in place");
    }
  }
  return Status();
}

// Every rank's ledger. Silent ranks are waited for up to the recovery
// timeout; the error names whoever never joined. A rank that can never join
// (dead, gone on purpose) or a failure no recovery fixes ends the wait at once.
Result<DistinctValues> CommunicatorImpl::gather_ledgers(const RecoveryRound& round,
                                                        const Bytes* mine,
                                                        std::vector<Bytes>* ballots,
                                                        std::vector<std::string>* kept,
                                                        Bytes* links) {
  Clock::time_point last_note = round.started;
  auto judge = [&](const std::vector<int>& not_yet) -> Status {
    if (Status s = recovery_interrupted(round, not_yet); !s.ok()) return s;
    if (Clock::now() - last_note > std::chrono::seconds(2)) {
      last_note = Clock::now();
      RCOLL_LOG(kWarn, "recovery of epoch %u: still waiting for rank(s) %s (%lld ms left)", round.failed, rank_list(not_yet).c_str(),
                static_cast<long long>(round.deadline.remaining_ms().count()));
    }
    return Status();
  };
  // Reduced to the distinct values and which rank wrote which: most ranks
  // write the same ledger and ballot.
  const StoreExchange ledgers(*store_, keys::recovery_ledgers(round.failed), size_, pack_ledgers);
  const StoreExchange::Gathered gathered =
      mine != nullptr ? ledgers.publish_and_gather(rank_, *mine, round.deadline, judge, Millis(200))
                      : ledgers.gather(round.deadline, judge, Millis(200));
  switch (gathered.ended) {
    case StoreExchange::Gathered::Ended::kAll:
      break;
    case StoreExchange::Gathered::Ended::kJudged:
      return gathered.status;  // a fatal notice as a peer gave it, a rank dead or gone
    case StoreExchange::Gathered::Ended::kTimedOut:
      return Status(ErrorCode::kPeerUnreachable,
                    ErrorContext{rank_, gathered.missing.front(), round.seq, round.failed, transport_name_.load()},
                    "recovery of epoch " + std::to_string(round.failed) + " gave up after " +
                        std::to_string(options_.recovery_timeout.count()) + " ms: rank(s) " + rank_list(gathered.missing) +
                        " never joined (dead, frozen or partitioned); the communicator is unusable");
    case StoreExchange::Gathered::Ended::kStoreFailed:
      return round.gave_up(
          *this, gathered.status,
          mine != nullptr
              ? "the store did not answer while this rank published its ledger and waited for the "
                "other ranks' (is the store's host stalled?)"
              : "the store did not answer while this rank waited for the other ranks' ledgers "
                "(is the store's host stalled?)");
  }
  DistinctValues values;
  if (!unpack_ledgers(gathered.reduced, size_, &values, links)) {
    return round.gave_up(*this, Status(ErrorCode::kStore, "they do not decode"),
                         "reading the ranks' ledgers as combined in the store");
  }
  // Each distinct ballot, ledger and kept listener. A value that does not
  // split in three goes whole to the ledger check, which names it malformed.
  return std::move(values).transformed([ballots, kept](const std::string& v) {
    std::vector<Bytes> parts;
    const Bytes b(v.begin(), v.end());
    if (!decode_values(b, 3, &parts)) parts = {Bytes{}, b, Bytes{}};
    ballots->push_back(std::move(parts[0]));
    kept->emplace_back(parts[2].begin(), parts[2].end());
    return std::string(parts[1].begin(), parts[1].end());
  });
}

// The ballots: the next epoch's transport, and whether to stop using NCCL.
Status CommunicatorImpl::adopt_ballots(const RecoveryRound& round,
                                       const std::vector<Bytes>& ballots) {
  // The most cautious vote wins: a move down if any rank counts too many
  // failures, a probe back up only if every rank's cool-down is over; NCCL
  // dropped if any rank asks.
  size_t agreed = 0;
  std::string nccl_drop;
  if (round.chain || round.nccl_votes) {
    for (const Bytes& b : ballots) {
      const auto ballot = store::decode_ballot(b);
      if (!ballot) continue;
      agreed = std::max<size_t>(agreed, ballot->transport);
      if (ballot->drop_nccl && nccl_drop.empty()) nccl_drop = ballot->why;
    }
  }
  if (round.nccl_votes && !nccl_drop.empty()) drop_nccl(nccl_drop, round.failed + 1);
  if (round.chain) {
    const std::string from = chain_.current();
    const size_t from_index = chain_.index();
    if (chain_.adopt(agreed, Clock::now())) {
      tally_.fallbacks = chain_.fallbacks();
      tally_.probes = chain_.probes();
      if (chain_.index() > from_index) {
        RCOLL_LOG(
            kWarn,
            "transport %s failed %d times within %lld s; every rank moves to %s for epoch %u "
            "(fallback #%llu; chain %s)",
            from.c_str(), options_.transport_failures_to_drop,
            static_cast<long long>(
                std::chrono::duration_cast<std::chrono::seconds>(options_.transport_failure_window)
                    .count()),
            chain_.current().c_str(), round.failed + 1,
            static_cast<unsigned long long>(tally_.fallbacks.load()), chain_.describe().c_str());
      } else {
        RCOLL_LOG(kWarn,
                  "transport %s unused for %lld s since it was dropped; every rank probes back up "
                  "to it for epoch %u (probe #%llu; chain %s)",
                  chain_.current().c_str(),
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(
                                             options_.transport_probe_after)
                                             .count()),
                  round.failed + 1, static_cast<unsigned long long>(tally_.probes.load()),
                  chain_.describe().c_str());
      }
    }
  }

  return Status();
}

Status CommunicatorImpl::recover_and_replay(Status cause, std::span<OpRecord> current,
                                            std::span<size_t> resume) {
  // A failure while re-running completed ops is just another failed epoch.
  while (in_flight_.recoveries < options_.max_recoveries_per_op) {
    ++in_flight_.recoveries;
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
  (void)store_->set(keys::of_rank(keys::epoch_where(e), rank_), Bytes(mine.begin(), mine.end()));
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
      auto v = store_->get(keys::of_rank(keys::epoch_where(e), q), std::max<Millis>(Millis(1), until.remaining_ms()));
      if (v.ok()) {
        where.assign(v.value().begin(), v.value().end());
      } else if (liveness_) {
        const PeerView pv = liveness_->peer(q);
        where = std::string("no report; heartbeats say ") + to_string(pv.health) +
                ", at collective seq " + std::to_string(pv.state.op_seq) +
                (pv.state.in_comm ? " (in comm)" : " (in compute)") +
                (pv.current ? "" : ", as last heard");
      } else {
        where = "no report";
      }
    }
    summary += "\n  rank " + std::to_string(q) + ": " + where;
  }
  RCOLL_LOG(kError, "where every rank was when %s failed for good (%s):%s",
            in_flight_.what("the communicator").c_str(), to_string(s.code()), summary.c_str());
}

}  // namespace rcoll
