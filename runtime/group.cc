// Groups of sends and receives (Communicator::group_async): NCCL's
// ncclGroupStart/ncclGroupEnd on rcoll's ledger.
//
// Each member of a group is an ordinary send or receive: numbered in issue
// order (seq, and the per-peer match_seq its frames carry), logged, resumed
// and re-run for a peer exactly as its ungrouped form, so the ledger, the
// agreement and the replays need nothing new. What the group changes is how
// the members run: together, as streams. The members that go to one peer in
// one direction form a stream, in issue order. A stream keeps up to W slices
// in flight (W: what a lone send or receive keeps), and puts them on its
// connection in exactly the order the ungrouped ops would: one member's
// remaining slices, then the next member's. So the peer may run the
// counterparts grouped or not, in one group or in several, and a recovery's
// replays (completed sends re-run one by one) meet them in the same order.
// Streams slide each on its own: a stream whose window is done posts the
// next at once, whatever the others wait for.
//
// Why that completes whatever NCCL completes: a stream only ever waits for
// its peer to post the counterparts of its own slices, never for another
// stream of the group, just as each send and receive of an NCCL group
// progresses on its own and the group ends when all of them have. Ungrouped,
// a large send completes only once its receiver takes the bytes, and the ops
// after it wait behind it: that is what can wait in a cycle.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "runtime/communicator_impl.h"

namespace rcoll {

Status CommunicatorImpl::run_group(const Op& carrier) {
  if (carrier.device >= 0) return run_device_group(carrier);
  if (!carrier.group->front().on_device()) return run_group_members(carrier, false);
  // Only empty device buffers (on no device: validate_group): they move
  // nothing. Where device groups run on NCCL, the peers' groups skip such
  // members (NCCL is not asked): done at once, logged as theirs are.
  if (nccl::built() && chain_.nccl() && nccl_.off.empty()) return run_group_members(carrier, true);
  // Else their counterparts run staged, as empty host frames.
  Op host = carrier;
  host.group = std::make_shared<std::vector<Op>>(*carrier.group);
  for (Op& m : *host.group) m.in.memory = m.out.memory = MemoryKind::kHost;
  return run_group_members(host, false);
}

// A group on device buffers runs as one NCCL group (run_nccl_group, runtime/nccl_ops.cc)
// once the caller's stream reached it, as a lone device op does; without
// NCCL (not in the chain, or dropped by every rank, then from the start),
// staged: its sends' inputs copied to pinned host memory, the group run
// there, its receives' results copied back.
Status CommunicatorImpl::run_device_group(const Op& carrier) {
  if (!fatal_.ok()) return run_group_members(carrier, false);  // names the earlier failure
  kernels::cuda::ScopedDevice on;
  if (Status s = on.enter(carrier.device); !s.ok())
    return device_local_failure(carrier, s, "making its CUDA device current");
  Status ended;
  switch (await_caller_stream(carrier, &ended)) {
    case CallerStream::kReached:
      break;
    case CallerStream::kGaveUp:
      return run_group_members(carrier, false);  // names the failure
    case CallerStream::kEnded:
      return ended;
  }
  Op staged = carrier;
  if (runs_on_nccl(carrier)) {
    std::vector<bool> open;
    Status s = run_group_members(carrier, true, &open);
    if (!nccl_.restart_staged) return s;
    // Every rank dropped NCCL: the members still open on both ends (all of
    // them, if NCCL was dropped before the first attempt) run again from the
    // start, staged (a send's input is intact: nothing on NCCL writes what
    // it sends); the others are done, here and at their peers.
    nccl_.restart_staged = false;
    if (Status r = restore_nccl_inputs(carrier); !r.ok())
      return device_local_failure(carrier, r,
                                  "waiting for its NCCL calls to drain to run it again");
    staged.group = std::make_shared<std::vector<Op>>();
    for (size_t i = 0; i < carrier.group->size(); ++i)
      if (open[i]) staged.group->push_back((*carrier.group)[i]);
    RCOLL_LOG(
        kWarn,
        "%s: %zu of its %zu members run again from the start, staged through pinned host memory "
        "over %s (NCCL dropped: %s)",
        carrier.describe().c_str(), staged.group->size(), carrier.group->size(),
        transport_name_.load(), nccl_.off.c_str());
  }
  DeviceStaging::Limits limits;
  limits.caller_stream = options_.straggler_timeout;
  limits.copy_floor = options_.deadline_floor;
  auto host = staging_.stage_in_group(staged, limits);
  if (!host.ok()) return device_local_failure(carrier, host.status(), "staging its sends' inputs");
  if (Status s = run_group_members(host.value(), false); !s.ok()) return s;
  // The group completed with every peer; only this rank's copy of its
  // receives can fail here.
  if (Status s = staging_.stage_out_group(staged, host.value(), limits); !s.ok()) {
    return device_local_failure(
        carrier, s,
        "the group completed with every peer, but copying its receives to the device failed");
  }
  return Status();
}

Status CommunicatorImpl::run_group_members(const Op& carrier, bool on_nccl,
                                           std::vector<bool>* open) {
  const std::vector<Op>& members = *carrier.group;
  if (!fatal_.ok()) {
    for (const Op& m : members) recorder_.finished(m.seq, false);
    return Status(
        fatal_.code(),
        ErrorContext{rank_, fatal_.context().peer, carrier.seq, epoch_.load(),
                     transport_name_.load()},
        carrier.describe() +
            " not run: the communicator gave up after an earlier failure: " + fatal_.message());
  }
  // An array, not a vector: records move but do not copy (their backups).
  const auto storage = std::make_unique<OpRecord[]>(members.size());
  const std::span<OpRecord> recs(storage.get(), members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    recs[i] = new_record(members[i]);
    // On NCCL an attempt is one NCCL group, whose end is the only progress
    // seen: each member is one slice, done with the group.
    if (on_nccl) recs[i].total = 1;
  }
  for (const Op& m : members) inject_late_start(m);
  in_flight_ = OpInFlight{};  // nothing of the last op's stall judging carries over
  in_flight_.record = &recs.front();
  in_flight_.group = recs;
  in_flight_.group_op = &carrier;
  in_flight_.started = Clock::now();
  for (const auto& r : recs)
    recorder_.started(r.op.seq, epoch_.load(), r.total, in_flight_.started);
  in_flight_.straggler = -1;
  in_flight_.straggler_expired = false;
  in_flight_.recoveries = 0;
  publish_state(true);
  std::vector<size_t> first(recs.size(), 0);
  for (;;) {
    Status s = on_nccl ? run_nccl_group(recs, first, carrier) : run_group_slices(recs, first);
    if (!s.ok() || in_flight_.recoveries > 0) {
      for (const auto& r : recs) recorder_.progressed(r.op.seq, r.done, epoch_.load());
    }
    if (s.ok()) break;
    if (nccl_.restart_staged) {
      // Every rank stopped using NCCL: run_device_group runs the members
      // still open again, staged.
      if (open != nullptr) {
        open->assign(recs.size(), false);
        for (size_t i = 0; i < recs.size(); ++i) (*open)[i] = first[i] < recs[i].total;
      }
      in_flight_ = OpInFlight{};
      // The others are done here and at their peers: logged as completed.
      for (size_t i = 0; i < recs.size(); ++i) {
        if (first[i] < recs[i].total) continue;
        recorder_.finished(recs[i].op.seq, true);
        record_completion(std::move(recs[i]));
      }
      return s;
    }
    if (on_nccl) nccl_.failures.push_back(Clock::now());
    s = recover_after(std::move(s), recs, first);
    if (s.ok()) continue;
    return end_failed_group(recs, carrier, std::move(s));
  }
  if (in_flight_.straggler >= 0) {
    RCOLL_LOG(kWarn, "%s completed; rank %d held it up for %.1f s (straggler, no recovery needed)",
              carrier.describe().c_str(), in_flight_.straggler,
              std::chrono::duration<double>(Clock::now() - in_flight_.started).count());
  }
  in_flight_ = OpInFlight{};
  if (on_nccl) ++nccl_.ops;  // the group, once (its last attempt may have had nothing left to run)
  const Clock::time_point ended = Clock::now();
  for (auto& r : recs) {
    recorder_.finished(r.op.seq, true, ended);
    record_completion(std::move(r));
  }
  publish_state(false);
  return Status();
}

Status CommunicatorImpl::end_failed_group(std::span<OpRecord> recs, const Op& carrier, Status s) {
  const bool too_late = in_flight_.straggler_expired;
  if (options_.shrink_on_death && s.code() == ErrorCode::kPeerDead && first_dead_peer() >= 0) {
    in_flight_ = OpInFlight{};
    // The members write only their receive buffers (nothing in place): the
    // caller issues the group again for the new group of ranks, or not.
    const int was = rank_, of = size_;
    (void)shrink(s);
    for (const auto& r : recs) recorder_.finished(r.op.seq, false);
    if (fatal_.ok()) {
      return Status(ErrorCode::kPeerDead, s.context(),
                    s.message() + "; shrink mode: the communicator went on without it, rank " +
                        std::to_string(was) + " of " + std::to_string(of) + " is now rank " +
                        std::to_string(rank_.load()) + " of " + std::to_string(size_.load()) +
                        "; " + carrier.describe() +
                        " did not complete: its receive buffers hold undefined data");
    }
    return fatal_;
  }
  fatal_ = s;
  publish_fatal(s);
  RCOLL_LOG(kError, "%s; %s", s.to_string().c_str(),
            too_late
                ? "a rank was too late for this group: later ops on this communicator will fail"
            : recoverable(s) && options_.recovery
                ? "recovery failed: later ops on this communicator will fail"
                : "not recoverable: later ops on this communicator will fail");
  publish_state(false);
  for (const auto& r : recs) recorder_.finished(r.op.seq, false);
  report_positions(s);  // names the group (in_flight_.what)
  in_flight_ = OpInFlight{};
  return s;
}

namespace {

struct Member {
  OpRecord* rec;
  std::unique_ptr<AlgoContext> ctx;
  size_t piece;  // elements per slice
  size_t next;   // the next slice to post
};
struct Slot {
  Member* member;
  size_t slice;
};
// The members to one peer in one direction, in issue order.
struct Stream {
  std::vector<Member*> members;
  size_t current = 0;  // members before it have every slice posted
  std::span<Request> reqs;
  std::vector<Slot> slots;  // what reqs[k] carries in the window in flight
};

std::vector<Stream> form_streams(std::vector<Member>& ms, size_t window) {
  std::vector<Stream> streams;
  for (Member& m : ms) {
    auto same = [&m](const Stream& st) {
      const Op& a = st.members.front()->rec->op;
      return a.peer == m.rec->op.peer && a.is_send == m.rec->op.is_send;
    };
    auto it = std::find_if(streams.begin(), streams.end(), same);
    if (it == streams.end()) it = streams.insert(streams.end(), Stream{});
    it->members.push_back(&m);
  }
  for (Stream& st : streams) st.reqs = ms.front().ctx->requests(window);
  return streams;
}

// Posts the stream's next window: up to `window` slices, members in order.
void post_window(Stream& st, size_t window) {
  st.slots.clear();
  while (st.slots.size() < window && st.current < st.members.size()) {
    Member& m = *st.members[st.current];
    if (m.next >= m.rec->total) {
      ++st.current;
      continue;
    }
    const Op& op = m.rec->op;
    const size_t es = op.element_size(), n = op.out.count;
    const size_t off = m.next * m.piece, len = std::min(m.piece, n - std::min(n, off));
    Request* r = &st.reqs[st.slots.size()];
    if (st.slots.empty() || st.slots.back().member != &m) m.rec->last_window_first = m.next;
    if (op.is_send) {
      m.ctx->send(op.peer, static_cast<uint32_t>(m.next), 0, m.ctx->in(off), len * es, r);
    } else {
      m.ctx->recv(op.peer, static_cast<uint32_t>(m.next), 0, m.ctx->out(off), len * es, r);
    }
    st.slots.push_back({&m, m.next});
    ++m.next;
  }
}

// A stream's window is done: the ledger learns each member's progress.
Status settle_window(Stream& st) {
  for (size_t k = 0; k < st.slots.size(); ++k) {
    const Slot& slot = st.slots[k];
    if (st.reqs[k].failed()) return slot.member->ctx->fail(st.reqs[k].status);
    OpRecord& rec = *slot.member->rec;
    rec.done = std::max(rec.done, slot.slice + 1);
  }
  for (size_t k = 0; k < st.slots.size(); ++k) {
    // Once per member (its last slot): the mid-op fault injection hooks here.
    if (k + 1 == st.slots.size() || st.slots[k + 1].member != st.slots[k].member) {
      st.slots[k].member->ctx->slices_done(st.slots[k].slice + 1);
    }
  }
  st.slots.clear();
  return Status();
}

// Whom the group waits on now, for the peers that follow chains of waits: a
// receive still open (what a pipeline stage waits for upstream), else a send.
const Op* awaited_member(const std::vector<Stream>& streams) {
  const Stream* awaited = nullptr;
  for (const Stream& st : streams) {
    if (st.slots.empty()) continue;
    if (awaited == nullptr ||
        (!st.members.front()->rec->op.is_send && awaited->members.front()->rec->op.is_send)) {
      awaited = &st;
    }
  }
  return awaited ? &awaited->slots.front().member->rec->op : nullptr;
}

}  // namespace

// One attempt at the members' slices, member i from first[i] on.
Status CommunicatorImpl::run_group_slices(std::span<OpRecord> recs, std::span<const size_t> first) {
  in_flight_.straggler_expired = false;
  std::vector<Member> ms;
  ms.reserve(recs.size());
  size_t window = 1;
  for (size_t i = 0; i < recs.size(); ++i) {
    OpRecord& rec = recs[i];
    if (first[i] >= rec.total) continue;  // complete on both ends
    auto ctx = std::make_unique<AlgoContext>(*transport_, rec.op, rec.tuning, scratch_,
                                             /*shares_scratch=*/!ms.empty());
    ctx->set_guard(this, progress_budget(rec.op, rec.tuning.piece_bytes, rec.tuning.window));
    ctx->set_slice_range(first[i], rec.total);
    window = ctx->window() * 2;  // as a lone send or receive keeps in flight (point_to_point.cc)
    const size_t piece = ctx->piece_elements();
    ms.push_back(Member{&rec, std::move(ctx), piece, first[i]});
  }
  if (ms.empty()) return Status();
  std::vector<Stream> streams = form_streams(ms, window);
  for (Member& m : ms) {
    if (m.next == 0 && !faults_.empty()) inject_before(m.rec->op, *m.ctx, m.rec->total);
  }

  Status s;
  for (Stream& st : streams) post_window(st, window);
  std::vector<Request*> waiting;
  for (;;) {
    bool active = false, moved = false;
    waiting.clear();
    for (Stream& st : streams) {
      if (st.slots.empty()) continue;
      const auto reqs = st.reqs.first(st.slots.size());
      if (std::any_of(reqs.begin(), reqs.end(), [](const Request& r) { return r.failed(); }) ||
          std::all_of(reqs.begin(), reqs.end(), [](const Request& r) { return r.finished(); })) {
        if (s = settle_window(st); !s.ok()) break;
        ms.front().ctx->forget_finished();
        post_window(st, window);
        moved = true;
      }
      if (st.slots.empty()) continue;
      active = true;
      for (size_t k = 0; k < st.slots.size(); ++k)
        if (!st.reqs[k].finished()) waiting.push_back(&st.reqs[k]);
    }
    if (!s.ok() || !active) break;
    if (moved || waiting.empty()) continue;
    if (const Op* awaited = awaited_member(streams)) publish_awaited(*awaited);
    if (s = ms.front().ctx->wait_any(waiting); !s.ok()) break;
  }
  for (auto& m : ms) tally_.injected += m.ctx->faults_fired();
  tally_.transport_moved(transport_->bytes_sent(), transport_->bytes_received());
  return s;
}

}  // namespace rcoll
