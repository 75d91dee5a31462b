// What an algorithm runs with: the op, the transport of the current epoch, the
// range of slices to run, where each element of the op's buffers lives, the
// progress guard, tuning and scratch memory. Algorithms are straight-line code
// over post/wait of chunk frames; they never block without a deadline.
//
// Slices are the ledger's unit: an op is cut into slices that each run a
// complete mini-collective, processed in windows of `window` slices. A retry
// after recovery re-runs slices [first, end) on every rank, so every algorithm
// takes its slice range from the context and reports each finished window.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "base/deadline.h"
#include "runtime/op.h"
#include "transports/transport.h"

namespace rcoll {

// Eager broadcast ranges (broadcast_is_eager says why these).
inline constexpr size_t kEagerBroadcastBytes = 8u << 10;
inline constexpr size_t kEagerBroadcastBytesTcp = 256u << 10;
inline constexpr size_t kEagerBroadcastBytesTcpStar = 128u << 10;
// Groups on one host of at most this many CPUs broadcast by the star
// (broadcast_is_star; runtime/algorithms/broadcast.cc says why).
inline constexpr int kStarBroadcastCpus = 2;

struct Tuning {
  size_t piece_bytes = 128 * 1024;  // most payload bytes of one frame (measured: beats 256K/512K on loopback)
  int window = 4;                   // slices in flight at once
  // The largest frame the measured link allows (5 ms of it, a share of the op
  // timeout, at most 1 MiB; 0 = not measured, or frames pinned): for a
  // transfer with no forwarding to pipeline behind it, a broadcast between 2
  // ranks, where every frame boundary only costs.
  size_t stream_piece_bytes = 0;
  AllreduceAlgorithm allreduce = AllreduceAlgorithm::kAuto;
  size_t small_allreduce_bytes = 64 * 1024;
  // Allgather / reduce-scatter by recursive doubling / halving where allowed
  // (blocks_by_doubling): set per epoch for the transport it measured faster on.
  bool doubling_blocks = false;
  // Broadcasts up to this many bytes are eager (broadcast_is_eager): set per
  // epoch from the transport and the group every rank agreed on.
  size_t eager_broadcast_bytes = kEagerBroadcastBytes;
  BroadcastAlgorithm broadcast = BroadcastAlgorithm::kAuto;  // the user's pin
  // The group shares one host of at most 2 CPUs (broadcast_is_star): set per
  // epoch from the samples every rank agreed on.
  bool few_shared_cpus = false;
};

// Who a posted request waits on, for stall decisions and messages.
struct PendingRequest {
  Request* req;
  int peer;
  bool is_send;
  uint32_t chunk;
  uint16_t step;
  uint64_t credit_seq = 0;  // step AlgoContext::kCreditStep: whose credit
  const Op* op = nullptr;   // the op it belongs to (a group's contexts share the list)
};

// What an algorithm works with besides the op's buffers: staging memory, its
// requests, and the list of those pending. Grows to the largest op and keeps
// it: no allocation per op once warm. One op at a time (the thread that holds
// the data plane); each AlgoContext starts it over (start_op).
class Scratch {
 public:
  void* get(size_t bytes) {
    if (buf_.size() < bytes) buf_.resize(bytes);
    return buf_.data();
  }
  // `n` idle requests, valid until the next start_op (blocks never move).
  std::span<Request> requests(size_t n);
  std::vector<PendingRequest>& pending() { return pending_; }
  void start_op() {
    block_ = 0;
    used_ = 0;
    pending_.clear();
  }
  size_t held() const { return buf_.capacity() + request_bytes_; }
  // Gives the memory back (the communicator went idle); returns the bytes.
  size_t release() {
    const size_t freed = buf_.size() + request_bytes_;
    std::vector<std::byte>().swap(buf_);
    blocks_.clear();
    request_bytes_ = 0;
    start_op();
    return freed;
  }

 private:
  std::vector<std::byte> buf_;
  struct Block {
    std::unique_ptr<Request[]> requests;
    size_t size;
  };
  std::vector<Block> blocks_;
  size_t block_ = 0;  // the block requests() takes from next
  size_t used_ = 0;   // requests of blocks_[block_] handed out
  size_t request_bytes_ = 0;
  std::vector<PendingRequest> pending_;
};

// Where elements of one of the op's buffers live: by default the caller's
// buffer; a replay redirects some element ranges to a backup copy (inputs) or
// a sink (outputs of an op the caller already has back).
class RangeMap {
 public:
  RangeMap() = default;
  RangeMap(void* base, size_t element_size) : base_(static_cast<char*>(base)), es_(element_size) {}
  void redirect(size_t begin, size_t end, char* memory) { segments_.push_back({begin, end, memory}); }
  char* at(size_t element) const {
    for (const auto& s : segments_)
      if (element >= s.begin && element < s.end) return s.memory + (element - s.begin) * es_;
    return base_ + element * es_;
  }
  bool redirected() const { return !segments_.empty(); }

 private:
  struct Segment {
    size_t begin, end;
    char* memory;
  };
  char* base_ = nullptr;
  size_t es_ = 1;
  std::vector<Segment> segments_;
};

// The runtime's side of a wait: told when an op stalls, asked whether a peer
// has announced an abort.
class ProgressGuard {
 public:
  virtual ~ProgressGuard() = default;
  // No bytes moved for the progress budget while waiting on `peer`. OK to keep
  // waiting (a live straggler: the guard logs it), or the error that ends the op.
  virtual Status on_stall(const Op& op, int peer, Clock::duration stalled_for) = 0;
  // Non-OK when the op must stop now (a peer announced that this epoch failed).
  virtual Status interrupted() = 0;
  // After on_stall said to keep waiting: how long until it is asked again
  // (max: the progress budget; another time to confirm what it saw).
  virtual Clock::duration next_look() const { return Clock::duration::max(); }
  // Bytes moved while waiting: the transport's count of bytes sent and received.
  virtual void moved(uint64_t /*bytes*/) {}
};

class AlgoContext {
 public:
  // Starts the scratch over for a new op, unless `shares_scratch`: another
  // context of the same group (runtime/group.cc) started it, and the
  // requests it handed out stay in use.
  AlgoContext(Transport& transport, const Op& op, const Tuning& tuning, Scratch& scratch,
              bool shares_scratch = false);

  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  uint32_t epoch() const { return t_.epoch(); }
  const Op& op() const { return op_; }
  const Tuning& tuning() const { return tuning_; }
  void* scratch(size_t bytes) { return scratch_.get(bytes); }
  // `n` idle requests for this op (reused by the next: no allocation per op).
  std::span<Request> requests(size_t n) { return scratch_.requests(n); }
  // Elements per frame for this op's dtype (at least 1).
  size_t piece_elements() const;
  size_t window() const { return static_cast<size_t>(tuning_.window < 1 ? 1 : tuning_.window); }

  // Element access through the maps (identity unless replaying).
  char* in(size_t element) const { return in_.at(element); }
  char* out(size_t element) const { return out_.at(element); }
  RangeMap& in_map() { return in_; }
  RangeMap& out_map() { return out_; }

  // Slices to run: [first_slice(), end_slice(total)).
  void set_slice_range(size_t first, size_t end) {
    first_ = first;
    end_ = end;
  }
  size_t first_slice() const { return first_; }
  size_t end_slice(size_t total) const { return end_ < total ? end_ : total; }
  // Slices [0, done) are complete on this rank (the ledger).
  void slices_done(size_t done) {
    done_ = done;
    if (inject_break_peer_ >= 0) {
      t_.break_link(inject_break_peer_);  // fault injection: mid-op, after the first window
      inject_break_peer_ = -1;
      ++faults_fired_;
    }
  }
  size_t done() const { return done_; }
  // Called before a window's slices are touched, so in-place inputs can be backed up.
  void set_window_hook(std::function<void(size_t first, size_t end)> hook) { window_hook_ = std::move(hook); }
  void before_window(size_t first, size_t end) {
    if (window_hook_) window_hook_(first, end);
  }

  void set_guard(ProgressGuard* guard, Clock::duration budget) {
    guard_ = guard;
    budget_ = budget;
  }
  // Fault injection on this op's first frame sent: hold it back `delay_ms`, or
  // never send it at all (the request completes locally, the peer never sees it).
  void inject_first_send(int64_t delay_ms, bool drop) {
    inject_delay_ms_ = delay_ms;
    inject_drop_ = drop;
  }
  // Fault injection: close the link to `peer` once the first window is done,
  // so the failure lands in the middle of the op.
  void inject_break_after_first_window(int peer) { inject_break_peer_ = peer; }
  // Fault injection: drop the first send and close that link, as a
  // connection that failed with the frame in flight would (on a live
  // connection frames arrive in order: a lost frame followed by the next
  // op's would be a skipped op). One fault.
  // Fault injection (kill:...,at=confirm): this process dies (SIGKILL) in the
  // confirmation round, once its confirmation to the next rank is sent and
  // before the others are.
  void inject_death_in_confirmation() { die_in_confirm_ = true; }
  void inject_drop_then_break() {
    inject_drop_ = true;
    drop_then_break_ = true;
  }
  // Fault injection: close the link to `peer` now, before the op moves anything.
  void inject_break_now(int peer) {
    t_.break_link(peer);
    ++faults_fired_;
  }
  // Faults that actually fired during this run (a break set for a run that
  // failed earlier for another reason never fires).
  int faults_fired() const { return faults_fired_; }

  void send(int peer, uint32_t chunk, uint16_t step, const void* data, size_t bytes, Request* r);
  void recv(int peer, uint32_t chunk, uint16_t step, void* dst, size_t bytes, Request* r);
  // Drives the transport until `r` finishes. While no bytes move for the
  // progress budget the guard decides whether to keep waiting.
  Status wait(Request& r);
  Status wait_all(std::span<Request> rs);
  // Drives the transport until at least one of `rs` finishes (OK at once if
  // one has), with wait()'s progress guard. A failed request is the
  // caller's to look at. Forgets finished requests, as wait() does.
  Status wait_any(std::span<Request* const> rs);
  // Forgets finished requests before they are posted again (a group's).
  void forget_finished();
  // Every rank tells every other that it has the op's whole result (an empty
  // frame each way, as chunk `chunk`): once this returns, no peer can need a
  // slice of the op re-run, so nothing of it has to be kept.
  Status confirm_completion(uint32_t chunk);
  static constexpr uint16_t kConfirmStep = 0xFFFF;
  static constexpr uint16_t kCreditStep = 0xFFFE;
  // Waits for a request posted outside this op (a completion credit of
  // collective `credit_seq`) as for the op's own: the guard judges a stall,
  // and a timeout names the peer and the credit.
  Status wait_for_credit(Request& r, int peer, bool is_send, uint64_t credit_seq);
  // Aborts the transport (failing every pending request) and returns `why` with
  // this op named in it. Every algorithm failure goes through here.
  Status fail(Status why);

 private:
  Status wait_unfinished(Request& r);  // wait()'s loop, for a request not yet finished
  template <class Done>
  Status wait_until(const Done& done);  // the loop: drives the transport until done()

  Transport& t_;
  const Op& op_;
  const Tuning& tuning_;
  Scratch& scratch_;
  FrameHeader header_;
  RangeMap in_;
  RangeMap out_;
  size_t first_ = 0;
  size_t end_ = SIZE_MAX;
  size_t done_ = 0;
  std::function<void(size_t, size_t)> window_hook_;
  ProgressGuard* guard_ = nullptr;
  Clock::duration budget_ = std::chrono::seconds(60);
  int64_t inject_delay_ms_ = 0;
  bool inject_drop_ = false;
  bool drop_then_break_ = false;  // inject_drop_then_break: the drop closes the link too
  bool die_in_confirm_ = false;   // inject_death_in_confirmation
  int inject_break_peer_ = -1;
  int faults_fired_ = 0;
  std::vector<PendingRequest>& pending_;  // scratch_'s
};

// One entry point per op kind (runtime/algorithms/*.cc). Each also has a slice
// count so the ledger knows what "complete" means.
Status run_send(AlgoContext& ctx);
Status run_recv(AlgoContext& ctx);
Status run_allreduce(AlgoContext& ctx);
Status run_allgather(AlgoContext& ctx);
Status run_reduce_scatter(AlgoContext& ctx);
Status run_broadcast(AlgoContext& ctx);
Status run_barrier(AlgoContext& ctx);
Status run_alltoall(AlgoContext& ctx);
// Whether run_broadcast runs the star, sending straight from the root (more
// than 2 ranks, not eager: eager broadcasts run down a chain or a binomial
// tree): pinned (Tuning::broadcast), a group sharing at most 2 CPUs
// (Tuning::few_shared_cpus), or with kAuto a buffer of one piece.
bool broadcast_is_star(const Op& op, int size, const Tuning& tuning);
// Whether every broadcast above the eager range runs the star (more than 2
// ranks; the pin, or kAuto with Tuning::few_shared_cpus).
bool large_broadcasts_by_star(int size, const Tuning& tuning);
// The first peer a rank talks to in a broadcast: eager, its parent (the
// root: its first child); star, the root (the root: rank root + 1); a
// chain's successor (its last rank: the predecessor).
int broadcast_first_peer(const Op& op, int rank, int size, const Tuning& tuning);
// Small broadcasts are eager: no acknowledgement. A rank finishes once it has
// sent (the root) or received and passed on the data, and the root's replay
// log keeps a copy of the input for a receiver that did not get it. What
// bounds how far a root runs ahead (and the log) is the completion credits
// (eager_credit_period). A function of the op and its tuning, so every rank
// decides alike. Up to Tuning::eager_broadcast_bytes: 8 KiB (one small TCP
// frame), measured eager against acknowledged (TCP, 3 alternating rounds, 10
// iterations): 4 ranks 1-8 KiB 2.5-3.5x faster, 2 ranks 1-4 KiB 1.1x. Above
// that it depends on the transport: over TCP above 2 ranks eager stays ahead
// up to kEagerBroadcastBytesTcp (4 ranks, 4 alternating rounds: 16 KiB 3.2x,
// 64 KiB 1.6x, 256 KiB 1.3x: the acknowledgement round costs a wake-up of
// every rank on a busy host); where the star broadcast takes over from the
// chain (broadcast_is_star), up to kEagerBroadcastBytesTcpStar (4 ranks on 2
// CPUs, 5 alternating rounds, eager against the star: 64 KiB 1.5x, 128 KiB
// 1.06x, 256 KiB 0.85x); while at 2 ranks over TCP (16-256 KiB: 0.7x down
// to 0.2x) and over UCX (4 ranks, 64-256 KiB: 0.4-0.5x, its rendezvous
// protocol already waits for the receiver) the acknowledged broadcast wins.
bool broadcast_is_eager(const Op& op, const Tuning& tuning);
// Completion credits (runtime/progress.cc). The first eager broadcast is a
// credit point (at all, or after a recovery), and then the first one a period
// after the last: at least eager_credit_min_period collective sequence
// numbers after it, and once kMaxCreditPeriod have passed or the eager
// broadcasts since it (this one included) carried kCreditPeriodBytes. Every
// rank sees the same ops, so all agree. At a credit point every rank, once it
// has the op, sends every other rank an empty frame (step kCreditStep) and
// posts a receive for theirs, and waits for both a lag later
// (eager_credit_lag_points, eager_credit_lag_ops; at least a minimum period
// later where its backups pass half the budget).
// The credits say that every rank has every collective up to the
// credit point, so the replay log can let go of them, and waiting for them
// keeps a root within about a lag of the slowest rank, without the rendezvous
// an acknowledgement costs. 2(p - 1) frames per rank per period: the period
// grows with the group so that stays at most 1/4 frame per op. Only with
// recovery on (without, nothing is kept for a peer, and the socket buffers
// bound how far a root runs ahead). The frames ride the data connections in
// order, so point-to-point ops must be issued in the same order relative to
// collectives on both ends (as NCCL requires).
//
// Small broadcasts get periods of up to kMaxCreditPeriod ops: fewer credit
// frames, and a root that may run further ahead. Ahead by more than the
// receiver's next reads, its frames wait in the socket and leave together,
// which costs every rank less per frame than one send each. 4 ranks on 2 CPUs,
// TCP, 4 KiB broadcasts back to back, time per op over the loop (--time mean),
// 4 alternating rounds of 20000 with a fixed period: 32 ops 18.3-21.4 us, 128
// ops 15.7-19.1, 256 ops 14.8-18.5; per-op medians unchanged. Periods end by
// bytes whatever mix of sizes runs, so the backups a root holds over a lag stay
// within the lag's points x max(kCreditPeriodBytes, a minimum period of its
// largest broadcasts), 9 MiB for 4 KiB broadcasts where the lag is 8 periods.
inline constexpr uint64_t kMaxCreditPeriod = 256;
inline constexpr uint64_t kCreditPeriodBytes = 1u << 20;
inline uint64_t eager_credit_min_period(int size) {
  return size <= 5 ? 32 : 8 * static_cast<uint64_t>(size - 1);
}
// The longest period: a credit point comes this many collectives after the
// last at the latest (given an eager broadcast there).
inline uint64_t eager_credit_max_period(int size) {
  return std::max(kMaxCreditPeriod, eager_credit_min_period(size));
}
// How many credit points a rank lets pass before it waits for the oldest's
// credits (when they have not all come in by then); or, with fewer eager
// broadcasts, how many collectives after it (eager_credit_lag_ops). Which op
// waits is this rank's own affair (the frames were posted at agreed places),
// so this may depend on what only this rank sees. One period, except where
// more than 2 ranks share at most 2 CPUs (Tuning::few_shared_cpus): there a
// root that stops every period to wait for the chain's last rank leaves a CPU
// idle while that rank catches up, and a longer lag keeps every rank busy. 4
// ranks on 2 CPUs, TCP, 4 KiB eager broadcasts back to back, time per op
// over the loop (4 alternating rounds of 10000): a lag of 1 period 26-39 us,
// 8 periods 23-31 us; per-op medians unchanged. At 2 ranks (no CPU to share
// out) 8 periods was no faster. The pending credit points' ring has a slot
// more than the longest lag.
inline constexpr uint64_t kCreditLagPeriods = 8;
inline uint64_t eager_credit_lag_points(int size, const Tuning& tuning) {
  return size > 2 && tuning.few_shared_cpus ? kCreditLagPeriods : 1;
}
inline uint64_t eager_credit_lag_ops(int size, const Tuning& tuning) {
  return eager_credit_lag_points(size, tuning) * eager_credit_max_period(size);
}
// Bytes per slice of a broadcast: a 2-rank chain and a star forward nothing,
// so their frames are as large as the link allows (Tuning::stream_piece_bytes).
size_t broadcast_piece_bytes(const Op& op, int size, const Tuning& tuning);
// Bytes per slice of an allgather. Between 2 ranks it is one exchange of the
// blocks, nothing forwarded or reduced, so its frames are as large as the link
// allows too. 2 ranks on 2 CPUs, alternating rounds of 10 iterations, time
// with the 128 KiB frames over these: TCP (8 rounds) 1 MiB 1.14x (1.04-1.31
// per round), 4 MiB 1.13x, 16 MiB 1.05x, 64 MiB 1.02x; UCX (6 rounds) 1 MiB
// 0.95x (0.90-1.18), 4 MiB 1.24x, 16 MiB 1.16x, 64 MiB 1.12x.
size_t allgather_piece_bytes(int size, const Tuning& tuning);
// The allreduce algorithm an op runs (kAuto resolved): a function of the op,
// the group size and the tuning only, so every rank picks the same one.
AllreduceAlgorithm allreduce_algorithm(const Op& op, int size, const Tuning& tuning);
// Allgather by recursive doubling and reduce-scatter by recursive halving
// instead of the ring (same slices): power-of-two groups of 4 to 16 ranks on a
// transport where they measured faster (Tuning::doubling_blocks), or wherever
// the allreduce algorithm is pinned to halving-doubling; never when pinned to the ring.
bool blocks_by_doubling(int size, const Tuning& tuning);

// How many slices the op has (the same on every rank), and which element
// ranges of its input and output slices [first, end) touch. Used by the ledger
// to back up inputs and to build replay maps.
struct ElementRange {
  size_t begin, end;
};
// At most one range per rank's block: inline up to 8 ranks, so planning and
// backing up a small op allocates nothing.
using ElementRanges = boost::container::small_vector<ElementRange, 8>;
struct SlicePlan {
  size_t slices = 1;
  ElementRanges inputs;  // for the queried slice range
  ElementRanges outputs;
};
SlicePlan plan_slices(const Op& op, int rank, int size, const Tuning& tuning, size_t first, size_t end);

// Element offsets that cut `len` elements into `parts` near-equal segments.
inline size_t segment_begin(size_t len, int parts, int i) {
  return len * static_cast<size_t>(i) / static_cast<size_t>(parts);
}

}  // namespace rcoll
