// The runtime behind rcoll::Communicator: the op queue, the progress thread
// that runs ops in issue order, the data plane of the current epoch, and the
// recovery that replaces a failed epoch with a new one and resumes the ops.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "base/packed_values.h"
#include "base/ring_queue.h"
#include "base/store_exchange.h"
#include "kernels/stream_gate.h"
#include "rcoll/communicator.h"
#include "runtime/algorithms/context.h"
#include "runtime/credits.h"
#include "runtime/device_staging.h"
#include "runtime/env.h"
#include "runtime/epoch_watch.h"
#include "runtime/flight_recorder.h"
#include "runtime/inject.h"
#include "runtime/ledger.h"
#include "runtime/link_model.h"
#include "runtime/link_tuning.h"
#include "runtime/liveness.h"
#include "runtime/nccl_plane.h"
#include "runtime/op.h"
#include "runtime/op_in_flight.h"
#include "runtime/op_numbering.h"
#include "runtime/shrink_rule.h"
#include "runtime/stall_judge.h"
#include "runtime/store/janitor.h"
#include "runtime/tally.h"
#include "runtime/transport_chain.h"
#include "transports/nccl/nccl_comm.h"
#include "transports/tcp/mesh_listener.h"
#include "transports/transport.h"

namespace rcoll {

class CommunicatorImpl : public ProgressGuard {
 public:
  static Result<std::unique_ptr<CommunicatorImpl>> create(Options options);
  ~CommunicatorImpl() override;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Options& options() const { return options_; }

  // Validates, numbers and queues the op; returns at once.
  // How a submitted op runs. kQueue: on the progress thread (async ops).
  // kHereIfIdle: a blocking op runs on the calling thread when nothing else is
  // queued or running, saving the two thread hand-offs (caller -> progress
  // thread -> caller) that otherwise dominate small-op latency.
  enum class Issue { kQueue, kHereIfIdle };
  Work submit(Op op, Issue how = Issue::kQueue);
  void close();
  Counters counters() const;
  std::string diagnostics() const;

  // ProgressGuard: consulted by algorithms while they wait.
  Status on_stall(const Op& op, int peer, Clock::duration stalled_for) override;
  Clock::duration next_look() const override;
  // For a wait that keeps its own stall clock against `budget` (the NCCL
  // waits): where that clock restarts after on_stall said to wait on. A
  // whole budget from `now` for a live straggler; where judging waits for
  // the peers' views, so that it is asked again after next_look().
  Clock::time_point restart_stall_clock(Clock::time_point now, Clock::duration budget) const {
    return in_flight_.views_deferred ? now - budget + std::min(budget, next_look()) : now;
  }
  void moved(uint64_t bytes) override;
  Status interrupted() override;

 private:
  Status judge_cycle(const Op& op, int peer);
  Status wait_for_silent_under_gate(const Op& op, int silent);
  void publish_awaited(const Op& op);
  // Heartbeats go to ring neighbours only (runtime/liveness.h): a stalled op
  // asks the peers whose state its judging reads for theirs (a collective:
  // every peer; a send or receive: the chain of waits), and views_current
  // says whether they all answered.
  void want_views(const Op& op, int awaited);
  bool views_current(const Op& op, int awaited) const;
  // How long an op moves no bytes before it asks for its peers' views: a
  // third of the liveness budget, or of the op's progress deadline where that
  // is shorter, so the views are current when the stall is judged.
  Clock::duration want_views_after(const OpRecord& rec) const;
  CommunicatorImpl(Options options, Bootstrap boot, TransportChain chain);
  // Polled while a connect waits for the other ranks: true ends the wait at
  // once (a recovery's peer died or gave up). May be empty.
  using Abandon = std::function<bool()>;
  // Registers with the store and agrees on the settings every rank shares,
  // once: where creation waits for every rank to arrive (Options::join_timeout).
  Status join(Deadline deadline);
  // One transport's connect of an epoch and this rank's timing of its
  // links: what the epoch's agreement publishes (attempt_epoch).
  struct EpochAttempt {
    std::string name;
    uint32_t epoch = 0;
    Result<std::unique_ptr<Transport>> t{Status(ErrorCode::kInternal, "no connect was attempted")};
    const LinkSample* last = nullptr;  // the last epoch's sample, whose bandwidth is kept
    Clock::time_point timing_started{};
    LinkSample mine;     // invalid where the probe failed (it aborted t) or t did not connect
    bool moved = false;  // this rank's latency moved since `last`
    bool late = false;   // ahead of an exchange, out of its budget: nothing is known
    // This rank's link value: its timing, or that it did not connect; empty
    // where it was late.
    Bytes value() const { return late ? Bytes{} : encode_link_value(mine, moved, t.ok()); }
  };
  // Connects the data plane of `epoch` on the chain's current transport,
  // falling back down the chain (by agreement of every rank) when a connect
  // fails. `ahead`: a recovery connected it before its exchange
  // (connect_ahead), which carried every rank's link value reduced
  // (`ahead_links`): used as is where the ranks stay on that transport.
  Status connect_epoch(uint32_t epoch, Deadline deadline, const Abandon& abandon = {},
                       EpochAttempt* ahead = nullptr, const Bytes* ahead_links = nullptr);
  // `ahead`: a recovery's, before its exchange (`deadline` its budget,
  // the probe's too; running out of it is being late, not failing).
  EpochAttempt attempt_epoch(const std::string& name, uint32_t epoch, Deadline deadline,
                             const Abandon& abandon, bool ahead = false);
  // How long the last epoch's connect took, link timing and agreement
  // included: a recovery's connect ahead of its exchange gets a few times
  // that (recover()).
  Clock::duration last_connect_took_{};
  // One transport's connect for one epoch (fault injection included).
  Result<std::unique_ptr<Transport>> open_transport(const std::string& name, uint32_t epoch,
                                                    Deadline deadline,
                                                    const std::string& failed_key,
                                                    const Abandon& abandon);
  // What an epoch's one exchange agreed: every rank's link timing of the
  // new transport (reduced), and whether every rank connected it.
  struct EpochAgreement {
    Status status;  // OK: every rank connected and timed its links (or said it could not)
    bool connect_failed = false;  // a rank did not connect: with a chain, every rank falls back
    LinkSummary links;
    LinkSample mine;      // this rank's sample, as published
    bool probed = false;  // this rank timed its links (else its probe aborted the transport)
  };
  // Publishes this rank's link value and reads every rank's back reduced:
  // one exchange for the connect outcome and the link timing.
  EpochAgreement agree_epoch(EpochAttempt& a, Deadline deadline, const Abandon& abandon);
  // The agreement every rank reads in the reduced link values.
  EpochAgreement read_agreement(const EpochAttempt& a, const Bytes& reduced,
                                const Abandon& abandon);
  // The diagnosis at a connect's failure key as kPeerUnreachable; OK where none.
  Status connect_failure(const std::string& failed_key, const ErrorContext& at) const;
  static Status abandoned_connect(const ErrorContext& at);
  // At creation, before any transport: every rank publishes the settings all
  // ranks must share (settings_every_rank_shares) and compares them with rank
  // 0's. A difference is kInvalidArgument on every rank, naming the setting,
  // both values and both ranks; before, a rank with another chunk size (say)
  // connected, and its first op failed as lost frames after 8 recoveries.
  Status agree_settings(Deadline deadline);
  // Publishes `mine`, then the settings' verdict, and the values of the
  // ranks in `pick` (their liveness addresses).
  Result<Bytes> gather_settings(const StoreExchange& exchange, const Bytes& mine, Deadline deadline,
                                const std::vector<int>& pick, std::vector<Bytes>* picked);
  Status start_liveness(Deadline deadline);
  // What detection (runtime/stall_judge.h) knows when `op`, waiting on
  // `awaited`, stalls: this rank's liveness view of its peers.
  StallView stall_view(const Op& op, int awaited) const;
  // How long `op` waits for a live rank that is late (OpOptions, else Options).
  Clock::duration straggler_timeout(const Op& op) const {
    return op.options.straggler_timeout.count() > 0 ? op.options.straggler_timeout
                                                    : options_.straggler_timeout;
  }
  void retire_transport();
  // This rank's timing of `t`'s ring (latency only, keeping `last`'s
  // bandwidth, unless `last` is null). A probe that fails aborts `t`: the
  // next op then fails over to a recovery.
  LinkSample time_links(Transport& t, uint32_t epoch, Deadline deadline, const LinkSample* last,
                        bool* moved, const std::function<bool()>& cancelled);
  // True once the connect of an epoch should end: the runtime abandoned it,
  // or (with a chain to fall back on) another rank said it did not connect
  // (`failed_key`, looked at every 200 ms at most).
  std::function<bool()> connect_cancelled(const std::string& failed_key,
                                          const Abandon& abandon) const;
  // Adopts the tuning of the ops to come from the agreed timing (link_model.h),
  // timing every bandwidth again where a latency moved.
  Status tune_links(uint32_t epoch, Deadline connect_deadline, EpochAgreement& agreed,
                    const LinkSample* last, Clock::time_point started);
  Result<LinkSummary> time_again(uint32_t epoch, Deadline deadline, LinkSample* mine);
  // kPeerDead naming the first rank of `missing` seen dead, else OK.
  Status died_during_setup(const std::vector<int>& missing, uint32_t epoch,
                           const char* tname) const;
  // Called while an exception is being handled, thrown by `op` (nullptr: by
  // an idle check or a recovery while no op ran): the communicator gives up
  // (fatal_), telling the peers; std::bad_alloc is kOutOfMemory, anything
  // else kInternal naming the exception. Returns the op's status.
  Status give_up_on_exception(const Op* op);
  Status give_up_after_exception(const Op* op, ErrorCode code, const std::string& what);
  // Aborts nccl_.comm (if any) with the communicator's device current, from any
  // thread (else CUDA would make a context on GPU 0 for it).
  void abort_nccl_on_device(const Status& why);
  // A setup phase that follows one which may have used up `d` (the link timing
  // after a slow connect, or reading the others' timing and connecting the
  // liveness channel after a slow timing) gets what is left of d, but no less
  // than a connect's budget of its own.
  Deadline own_budget(Deadline d) const {
    return d.is_never()
               ? d
               : Deadline::after(std::max<Millis>(options_.connect_timeout, d.remaining_ms()));
  }
  // Shrink mode: agree with the other survivors on the new group, renumber,
  // rebuild the data plane and the heartbeat mesh. Ops queued for the old
  // group fail with `why`; returns how many. A failure sets fatal_.
  //
  // Every survivor reports the same collective as failed: in shrink mode
  // each collective ends with a confirmation round (confirms_completion),
  // so a survivor that completed it had every survivor's word that it held
  // the whole result. A survivor whose collective failed but which held the
  // whole result learns, in the shrink, whether every survivor did too (or
  // completed it): then it completes the op as well (`*failed_op_complete`),
  // and the shrink reaches the caller with the next op, as on every other
  // survivor.
  //
  // Who tells the caller: the op that failed (a group, or a collective that
  // did not complete), or, with `by_next_op` (an idle shrink) or a failed op
  // that completes, the caller's next op (shrink_unreported_). That is set
  // together with the old group's queue failing (leave_old_group): an op
  // issued while the shrink still runs is told too, never run in the new
  // group (before, one issued between the two ran there, while the other
  // survivors had failed theirs: a desync).
  size_t shrink(const Status& why, const OpRecord* failed = nullptr,
                bool* failed_op_complete = nullptr, bool by_next_op = false);
  Status shrink_group(const Status& why, const OpRecord* failed, size_t* stale_count,
                      bool* failed_op_complete, bool by_next_op);
  // Where this rank's collectives stood when the shrink began (runtime/shrink_rule.h).
  ShrinkStand shrink_stand(const OpRecord* failed) const;
  // Reads where every other survivor stood and applies the rule.
  bool failed_op_complete_everywhere(const ShrinkStand& mine, const std::string& outcomes,
                                     const std::vector<int>& survivors, Deadline deadline);
  Result<std::vector<int>> settle_survivors(const std::string& alive_keys, Deadline deadline);
  size_t leave_old_group(const Status& why, int new_rank, int new_size, bool tell_next_op);
  void shrink_idle(const Status& why);
  // Every rank on this host (the store is local): use loopback by default.
  bool prefer_loopback() const {
    const std::string& d = boot_.store_description;
    return d.find("127.0.0.1") != std::string::npos || d.find("localhost") != std::string::npos ||
           d.find("file store") != std::string::npos;
  }
  // With no RCOLL_SOCKET_IFNAME and ranks on several hosts (or network
  // namespaces): the local address of the route toward the store, so the
  // interface that reaches the job is chosen over one listed earlier.
  std::string route_address_;
  void progress_loop();
  // Runs an op taken from the queue (or run here) and completes its Work.
  void execute(Op& op, bool closing_barrier);
  void idle_checks();
  void recover_if_peer_failed();
  // Shrink mode: a peer died while this rank runs no op; true if the group shrank.
  bool shrink_if_peer_died();
  // The device op this rank is waiting to start (its caller's stream), if
  // any: a recovery meanwhile knows whether the failure was on NCCL.
  const Op* waiting_device_op_ = nullptr;
  void release_device_resources();
  void log_nccl_phases() const;
  // Runs one op to completion, recovering as often as allowed.
  Status run_op(const Op& op);
  OpRecord new_record(const Op& op);
  void inject_late_start(const Op& op);
  Status end_failed_op(const OpRecord& rec, Status s);
  std::string give_input_back(const OpRecord& rec);
  void end_completed_op(OpRecord&& rec);
  // An op on device buffers: on NCCL, else staged through pinned host memory
  // around run_op (runtime/device_staging.h).
  Status run_device_op(const Op& op);
  // How a device op's wait for the caller's stream ended (await_caller_stream).
  enum class CallerStream : uint8_t { kReached, kGaveUp, kEnded };
  CallerStream await_caller_stream(const Op& op, Status* ended);
  // A failure of this rank's own GPU work: for good, its peers told.
  Status device_local_failure(const Op& op, const Status& why, const char* what);
  // At issue, on the caller's thread: the op's device is the communicator's,
  // and an event marks where the caller's stream was.
  Status prepare_device_op(Op& op);
  // Device collectives on NCCL (runtime/nccl_ops.cc).
  bool runs_on_nccl(const Op& op) const;
  // Slices of an op on NCCL: contiguous element ranges of at most
  // kNcclSliceBytes where one NCCL call can take them (all-reduce,
  // broadcast), else the whole op.
  static size_t nccl_slice_count(const Op& op);
  static constexpr size_t kNcclSliceBytes = 64u << 20;
  // The current epoch's NCCL communicator, made with every rank's agreement;
  // when a rank cannot (or, after repeated failures, will not) join, every
  // rank stops using NCCL and sets nccl_.restart_staged.
  Status ensure_nccl(const Op& op);
  // Its steps (runtime/nccl_epoch.cc): why this rank will not join (or "");
  // arrive (rank 0 brings the unique id); init; agree on every rank's outcome.
  std::string nccl_refusal(uint32_t epoch);
  Result<std::string> nccl_arrive(const Op& op, uint32_t epoch, std::string* refuse);
  Result<std::unique_ptr<nccl::Comm>> nccl_init(const Op& op, uint32_t epoch, const std::string& id, Deadline init_deadline);
  Status nccl_agree(const Op& op, uint32_t epoch, Result<std::unique_ptr<nccl::Comm>>& made, const std::string& mine,
                    Deadline until);
  Status run_nccl_slices(OpRecord& rec, size_t first);
  // A collective of one rank (Op::one_rank): its input copied to its output
  // on the caller's stream at issue, with no communicator (NCCL's one-rank
  // path), then waited for by the op.
  Status queue_one_rank_copy(Op& op);
  Status await_one_rank_copy(const OpRecord& rec);
  // Waits for NCCL as an op waits for its peers (runtime/nccl_ops.cc).
  struct NcclWatch;
  // Whether a collective on NCCL settles later: no confirmation of its own,
  // its input kept on the device until the next one (nccl_ops.cc).
  bool settles_later(const Op& op) const;
  Status reserve_for_nccl(kernels::cuda::DeviceBuffer& buffer, size_t bytes, nccl::Comm& comm);
  // Where an op's input is kept on the device (an in-place all-reduce's
  // backup, or the whole input of one that settles later): null without
  // memory for it, an error only when the GPU failed.
  Result<NcclPlane::KeptInput*> keep_nccl_input(const OpRecord& rec, nccl::Comm& comm);
  void settle(const OpRecord& rec);
  Status check_nccl_fingerprints(const Op& op, nccl::Comm& comm) const;
  Status nccl_op_failure(const Op& op, nccl::Comm& comm, const Status& why, bool unbacked);
  // A close-link fault on NCCL strikes after the op's first slice, or once
  // all of them are done but before the rank counts them (at=done).
  enum class NcclFault : uint8_t { kNone, kAfterFirstSlice, kAfterLastSlice };
  Status issue_nccl_slices(const OpRecord& rec, size_t first, nccl::Comm& comm,
                           NcclPlane::KeptInput* keep, void* keep_in_group, NcclWatch& watch,
                           std::vector<std::pair<uint64_t, size_t>>* tickets);
  Status await_nccl_slices(OpRecord& rec, size_t first, nccl::Comm& comm, NcclWatch& watch,
                           const std::vector<std::pair<uint64_t, size_t>>& tickets,
                           NcclFault fault);
  // A completed collective run again for a peer that did not complete it,
  // from its kept input into scratch (on NCCL, or staged once NCCL is dropped).
  Status replay_nccl(OpRecord& rec, size_t first);
  Status replay_nccl_staged(OpRecord& rec, const NcclPlane::KeptInput& keep);
  // An op issued with Op::gated: queues its verdict event behind its calls on
  // `comm` and the stream gate (see its definition), and marks it issued.
  Status queue_verdict(const Op& op, WorkState& w, nccl::Comm& comm);
  // This rank's vote in a recovery: why every rank should stop using NCCL
  // (it cannot join a communicator, or NCCL failed too often lately), or "".
  std::string nccl_vote();
  // Every rank stops using NCCL from `epoch` on (agreed in a recovery).
  void drop_nccl(const std::string& why, uint32_t epoch);
  // Waits for `keys` in the store as an op waits for its peers: a dead rank
  // ends it, a live straggler is waited for, a silent or hung one fails it
  // (recoverably); a peer's abort notice ends it at once.
  // `stall_rule`: judge a rank that is not there after the op's progress
  // budget by on_stall (else only `until` bounds the wait).
  StoreExchange::Gathered wait_for_ranks(const StoreExchange& exchange, const Op& op, Deadline until, const char* what,
                                         bool stall_rule);
  // Puts back the inputs an in-place op on NCCL may have overwritten, before
  // the op runs again another way.
  Status restore_nccl_inputs(const Op& op);
  // Fault injection for an op on NCCL: returns the close-link planned for it.
  NcclFault inject_nccl(const Op& op);
  // Runs slices [first, end) of a record: normally, or as a replay of an op the
  // caller already has back (inputs from backups, outputs to a sink).
  Status run_slices(OpRecord& rec, size_t first, bool replay);
  // A group of sends and receives (runtime/group.cc): its members run
  // together, each from its own first slice, and are logged as ungrouped ones.
  Status run_group(const Op& carrier);
  // Its members' attempts until done (host buffers, or device ones on NCCL).
  // Where every rank dropped NCCL meanwhile (nccl_.restart_staged), `open`
  // says which members are still open on both ends.
  Status run_group_members(const Op& carrier, bool on_nccl, std::vector<bool>* open = nullptr);
  // A group on device buffers: one NCCL group, else staged.
  Status run_device_group(const Op& carrier);
  Status run_group_slices(std::span<OpRecord> recs, std::span<const size_t> first);
  // One attempt at a device group's members on NCCL (runtime/nccl_ops.cc).
  Status run_nccl_group(std::span<OpRecord> recs, std::span<const size_t> first, const Op& carrier);
  Status end_failed_group(std::span<OpRecord> recs, const Op& carrier, Status s);
  // The recovery protocol; on success the data plane is epoch + 1. Its
  // steps (runtime/recovery.cc): announce the failure; publish this rank's
  // ballot and ledger and gather every rank's (one request); agree on the
  // resume plan (agree_resume); adopt the ballots; reconnect.
  Result<ResumePlan> recover(const Status& cause);
  struct RecoveryRound;
  Status announce(const RecoveryRound& round, const Status& cause);
  // This rank's ballot and ledger, as the ledgers' exchange carries them.
  // And, where it connected the next epoch ahead, its link value.
  Bytes ballot_and_ledger(const RecoveryRound& round, const std::string& kept,
                          const EpochAttempt* ahead);
  Status recovery_interrupted(const RecoveryRound& round, const std::vector<int>& awaited);
  // Every rank's ledger (each distinct one once), and the distinct ballots
  // (empty where a rank had nothing to vote on). `mine`: this rank's value,
  // published with the wait in one request; null when published already.
  // `*links`: the link values of the ranks that connected ahead, reduced
  // (empty where none did).
  Result<DistinctValues> gather_ledgers(const RecoveryRound& round, const Bytes* mine,
                                        std::vector<Bytes>* ballots, std::vector<std::string>* kept,
                                        Bytes* links);
  Status adopt_ballots(const RecoveryRound& round, const std::vector<Bytes>& ballots);
  // After a failed attempt at the op in flight (`current`): OK when a
  // recovery succeeded and it runs again from `resume`, else its final error
  // (a straggler past its timeout, too many recoveries, not recoverable).
  Status recover_after(Status s, std::span<OpRecord> current, std::span<size_t> resume);
  // recover() then replay_completed(), again while the replays themselves fail.
  Status recover_and_replay(Status cause, std::span<OpRecord> current, std::span<size_t> resume);
  // Re-runs completed ops that a peer still needs; sets resume[i] for current[i].
  Status replay_completed(const ResumePlan& plan, std::span<OpRecord> current,
                          std::span<size_t> resume);
  void record_completion(OpRecord&& rec);
  Clock::duration derived_budget(const Op& op, size_t piece_bytes, int window) const;
  Clock::duration progress_budget(const Op& op, size_t piece_bytes, int window) const;
  Status hang_timeout_expired(const Status& s);
  // Has a peer announced that the current epoch failed? (liveness notice, or
  // the store key as seen by epoch_watch_; never blocks)
  bool epoch_failed_elsewhere();
  // Applies the injected faults due at this op; sets the first-send faults on ctx.
  void inject_before(const Op& op, AlgoContext& ctx, size_t slices);
  Status inject_hang(const Op& op);
  uint64_t hang_counted_seq_ = 0;  // the op whose hang fault was counted (once)
  void inject_in_confirmation(const Op& op, AlgoContext& ctx);
  // Kills this rank at `step` ("ledgers", "connect") of a recovery during op `op_seq`, if a fault
  // says so; kills_in_recovery says whether one will.
  void inject_in_recovery(uint64_t op_seq, uint32_t failed_epoch, const char* step);
  bool kills_in_recovery(uint64_t op_seq, const char* step) const;
  static bool recoverable(const Status& s);
  // A failure no recovery can fix (a desync, mismatched sizes): tell the peers,
  // so their recoveries end at once with the same diagnosis.
  void publish_fatal(const Status& s);
  // After a failure for good: every failing rank publishes where it is; this
  // gathers what arrives within a second and logs one summary naming who is behind.
  void report_positions(const Status& s);

  static constexpr size_t kSocketBufferBytes = 4u << 20;
  // How long a wait polls before sleeping. Measured on 2 cores with 2 and 4
  // ranks (README, "Waiting"): polling with a yield between polls beat both
  // sleeping at once and polling without yielding at every size.
  std::chrono::microseconds spin() const { return std::chrono::microseconds(options_.spin_us >= 0 ? options_.spin_us : 50); }
  // How long the best-effort store writes after a failure for good (the fatal
  // diagnosis, where every rank was) may take before the caller gets its error.
  static constexpr Millis kBestEffortStoreBudget{2000};

  Options options_;
  Bootstrap boot_;
  std::atomic<int> rank_;
  std::atomic<int> size_;
  int shrink_generation_ = 0;
  Status shrink_unreported_;  // a shrink done while idle, not yet told to the caller (under mu_)
  std::shared_ptr<Store> instance_store_;  // this communicator instance's namespace
  std::shared_ptr<Store> store_;  // namespaced for this communicator instance
  KeyJanitor janitor_;            // the keys of finished epochs (runtime/store/janitor.h)
  // Adaptive chunking: the tuning each op takes (runtime/link_tuning.h).
  LinkTuner tuner_{options_};
  bool settings_agreed_ = false;  // agree_settings ran (at creation; not again after a shrink)
  // The liveness channel's listener and every rank's address, from the
  // settings exchange; taken by the first start_liveness.
  MeshListener liveness_listener_;
  AddressBook liveness_addresses_;
  // The TCP data plane's listener and every rank's address, kept from the
  // epoch that published them while every rank keeps its own (agreed in
  // each recovery's ledgers): a recovery onto TCP then connects without an
  // address exchange (#37: about a second of a 16,384-rank recovery).
  std::shared_ptr<KeptListener> tcp_kept_ = std::make_shared<KeptListener>();
  // Drops it: the next TCP epoch listens and publishes anew, and the
  // exchange it was published in is erased in a later recovery.
  void drop_kept_listener();
  Scratch scratch_;
  DeviceStaging staging_;  // owned by the thread that holds running_
  // Device collectives on NCCL (runtime/nccl_plane.h); owned by the thread
  // that holds running_, except what NcclPlane says.
  NcclPlane nccl_;
  // Frees the stopped NCCL communicators, with the communicator's device current.
  void bury_nccl();
  int device_ = -1;        // the CUDA device of this communicator's device ops (under mu_)
  // Completion credits of eager broadcasts (runtime/credits.h). Declared
  // before transport_: their requests outlive the transport.
  CompletionCredits credits_;
  bool closing_barrier_running_ = false;
  std::unique_ptr<Transport> transport_;
  TransportChain chain_;                         // progress thread (and create())
  std::atomic<const char*> transport_name_{""};  // for counters(), from any thread
  std::atomic<uint32_t> epoch_{0};
  std::vector<Fault> faults_;  // from RCOLL_INJECT
  uint64_t injected_through_seq_ = 0;

  // The heartbeat side channel (null for a single rank) and what it told us.
  std::unique_ptr<Liveness> liveness_;
  std::unique_ptr<std::atomic<bool>[]> dead_;
  // Publishes this rank's state in its heartbeats.
  void publish_state(bool in_comm);
  // A dead peer, or -1.
  int first_dead_peer() const;

  FlightRecorder recorder_;
  // Measured speed of the data plane, for the progress deadline (EWMA, bytes/s).
  std::atomic<double> bandwidth_{0};
  std::mutex close_mu_;
  // Ops whose inputs the algorithm overwrites (in-place allreduce): they back
  // up each window before touching it.
  bool overwrites_input(const Op& op) const { return op.kind == OpKind::kAllreduce && op.in_place() && size_ > 1; }
  // Whether such ops back their inputs up: for a recovery to resume them, or
  // in shrink mode to give them back after a death.
  bool keeps_inputs() const { return options_.recovery || options_.shrink_on_death; }
  // Large collectives end with a confirmation round (one empty frame to and
  // from every peer) instead of copying their last window of inputs aside for
  // peers that might still need it re-run. Measured side by side (allreduce,
  // median of 7 runs): 2 ranks +12% at 1 MiB, +2..10% up to 64 MiB; at 4 ranks
  // on 2 cores the round costs more (-16% at 1 MiB, +5..26% at 2-16 MiB), so
  // it starts at 2 MiB there. Decided from the op and the group alone, so
  // every rank decides the same.
  // In shrink mode every collective confirms, whatever its size: what lets
  // the survivors of a death agree on which collective failed (shrink()).
  bool confirms_completion(const Op& op) const {
    if (options_.shrink_on_death && op.kind != OpKind::kSendRecv && size_ > 1) return true;
    const bool kind = op.kind == OpKind::kAllreduce || op.kind == OpKind::kAllgather ||
                      op.kind == OpKind::kReduceScatter || op.kind == OpKind::kAlltoall;
    const size_t from = size_ > 2 ? (2u << 20) : (1u << 20);
    return kind && size_ > 1 && options_.recovery && op.in.bytes() >= from;
  }
  // What a send can be ahead of its receiver: both socket buffers, kernel-doubled.
  // Never below the default's: a peer that left its buffers at the default
  // holds that much whatever this rank set (a larger setting must be the same
  // on every rank; see Options::socket_buffer_bytes).
  static size_t in_flight_capacity(const Options& o) {
    return 4 * std::max(o.socket_buffer_bytes, kSocketBufferBytes);
  }
  size_t in_flight_capacity() const { return in_flight_capacity(options_); }
  // The replay log's bound for sends still needed: what the sockets hold plus
  // two windows of frames (the pins, or Tuning's defaults).
  static size_t sends_kept_bytes(const Options& o) {
    const Tuning defaults;
    const size_t depth =
        static_cast<size_t>(o.pipeline_depth > 0 ? o.pipeline_depth : defaults.window);
    const size_t chunk = o.chunk_bytes > 0 ? o.chunk_bytes : defaults.piece_bytes;
    return in_flight_capacity(o) + 2 * depth * chunk;
  }

  // Owned by the thread that holds running_ (the progress thread, or a caller
  // running a blocking op).
  ReplayLog log_;
  // Memory release after a quiet spell (idle_checks).
  static constexpr Clock::duration kIdleTrimAfter = std::chrono::seconds(5);
  Clock::time_point last_op_end_ = Clock::now();
  bool idle_trimmed_ = false;
  // The op this rank runs now, as detection and recovery see it
  // (runtime/op_in_flight.h): reset when the op starts (run_op).
  OpInFlight in_flight_;
  Status fatal_;
  bool epoch_failed_seen_ = false;
  // Polls the store for "this epoch failed" off the progress thread.
  EpochWatch epoch_watch_{std::chrono::seconds(10), std::chrono::milliseconds(200)};

  std::mutex mu_;
  std::condition_variable cv_;
  RingQueue<Op> queue_;
  // Some thread owns the data plane: the progress thread running an op or its
  // idle checks, or a caller running a blocking op itself. Everything marked
  // "owned by the progress thread" belongs to whichever thread set this.
  bool running_ = false;
  bool closing_ = false;
  bool closed_ = false;
  OpNumbering numbering_;  // under mu_ (runtime/op_numbering.h)
  std::thread progress_;
  // Completion states whose Work handles are all gone are handed out again
  // (under mu_): a blocking op allocates none.
  std::array<std::shared_ptr<WorkState>, 4> spare_work_;
  std::shared_ptr<WorkState> reuse_work();

  Tally tally_;  // for counters() (runtime/tally.h)
};

}  // namespace rcoll
