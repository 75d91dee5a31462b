// The ledger: what this rank has done of each recent op, and what it keeps so
// that any slice a peer may still need can be run again.
//
// Re-executability: an op's slice k can be re-run on every rank as long as each
// rank still has its input for slice k. Inputs are the caller's buffers while
// the op is in flight, except where an in-place op has overwritten them; so
//   - an in-place op copies each window's inputs aside before touching them,
//     keeping the last two windows (a rank can be at most one window ahead of
//     the slowest rank in a ring, because every slice needs every rank);
//   - a completed op keeps copies of the inputs of its last `tail` slices until
//     it falls out of the replay log, since the caller owns its buffers again.
// A completed op that is re-run writes its outputs to a sink, never to the
// caller's buffers. Memory for all of this is bounded by Options::backup_bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/packed_values.h"
#include "base/ring_queue.h"
#include "runtime/algorithms/context.h"
#include "runtime/op.h"

namespace rcoll {

class BufferPool;

// Memory from a BufferPool that goes back to it when destroyed. Backups are
// taken on every op, so their memory is recycled rather than allocated (and
// page-faulted in) each time.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(BufferPool* pool, std::unique_ptr<char[]> data, size_t capacity, size_t size)
      : pool_(pool), data_(std::move(data)), capacity_(capacity), size_(size) {}
  PooledBuffer(PooledBuffer&& o) noexcept { *this = std::move(o); }
  PooledBuffer& operator=(PooledBuffer&& o) noexcept;
  ~PooledBuffer();
  char* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  BufferPool* pool_ = nullptr;
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0;
  size_t size_ = 0;
};

// Free blocks kept for reuse, up to `keep_bytes`. Progress thread only.
class BufferPool {
 public:
  explicit BufferPool(size_t keep_bytes) : keep_(keep_bytes) {}
  PooledBuffer take(size_t bytes);
  void give(std::unique_ptr<char[]> data, size_t capacity);
  // Frees every block kept for reuse (the communicator went idle); returns the bytes.
  size_t trim();
  size_t free_bytes() const { return free_bytes_; }

 private:
  size_t keep_;
  size_t free_bytes_ = 0;
  std::vector<std::pair<std::unique_ptr<char[]>, size_t>> free_;
};

struct InputBackup {
  size_t slice_first = 0;
  size_t slice_end = 0;
  ElementRanges ranges;  // element ranges of the op's input, in order
  PooledBuffer data;     // their bytes, concatenated
};

struct OpRecord {
  Op op;
  // The caller's completion state while the op runs (op.work is not the
  // record's to keep: states are reused); null once it is logged.
  WorkState* work = nullptr;
  size_t total = 1;       // slices of the op (equal on every rank)
  size_t done = 0;        // slices [0, done) complete on this rank
  bool complete = false;  // the caller has its result
  bool confirmed = false; // every rank said it has the whole result: never re-run
  bool replayable = true; // false when its backups would exceed the budget
  // Runs on NCCL (runtime/nccl_ops.cc): its slices are NCCL calls, it never
  // overwrites what it reads, and once one rank has it whole, every rank has,
  // unless it settles later: then a rank that completed it may be one such op
  // ahead of a peer that did not, and it is logged with its input kept on the
  // device (NcclPlane::kept) until the next one completes.
  bool nccl = false;
  bool settles_later = false;
  Tuning tuning;          // how the op is cut: kept for every replay of it
  // First slice of the last window run: a rank that finished the op is at most
  // one window ahead of the slowest, so a peer resumes no earlier than this.
  size_t last_window_first = 0;
  BufferPool* pool = nullptr;
  // A completed op keeps one (its tail); an in-place op one per window, the
  // last two. Inline: backing up allocates no list.
  boost::container::small_vector<InputBackup, 2> backups;

  size_t backup_bytes() const;
  // Copies the inputs of slices [first, end) aside (in-place ops before a
  // window, every op's tail at completion). Skips slices already covered.
  void back_up(int rank, int size, size_t first, size_t end);
  // Drops in-place window backups older than `keep_from` (a slice index).
  void release_before(size_t keep_from);
  bool covers(size_t first, size_t end) const;
  // Redirects the op's inputs of slices [first, end) to the backups.
  void map_inputs(RangeMap* in) const;
  // Copies every backup back into the op's input buffer: an in-place op
  // that failed for good gives the caller its input again.
  void restore_inputs() const;
};

// The last few ops of this rank, newest last. The list nodes of records that
// left the log are kept for the next ones, so a steady stream of small ops
// allocates nothing here (records hold their first backups inline).
class ReplayLog {
 public:
  ReplayLog(size_t budget_bytes, size_t in_flight_capacity)
      : pool_(budget_bytes), budget_(budget_bytes), in_flight_capacity_(in_flight_capacity) {}
  ReplayLog(const ReplayLog&) = delete;  // the indexes point into records_
  ReplayLog& operator=(const ReplayLog&) = delete;
  BufferPool* pool() { return &pool_; }
  // Forgets every record and sequence (a new group after a shrink).
  void reset(int size) {
    records_.clear();
    collectives_ = {};
    sends_.clear();
    synced_[0] = synced_[1] = 0;
    everywhere_ = 0;
    bytes_ = 0;
    collective_through = 0;
    send_through.assign(static_cast<size_t>(size), 0);
    recv_through.assign(static_cast<size_t>(size), 0);
  }
  void push(OpRecord&& record);
  // A collective that needs every rank (any but an eager broadcast) completed
  // on this rank, logged or not: older collectives may leave the log.
  void synchronized(uint64_t match_seq);
  // Every rank has every collective up to `match_seq` (completion credits,
  // runtime/progress.cc): no peer can need one of them re-run.
  void done_everywhere(uint64_t match_seq);
  std::list<OpRecord>& records() { return records_; }
  const std::list<OpRecord>& records() const { return records_; }
  size_t bytes() const { return bytes_; }
  size_t budget() const { return budget_; }
  // Frees the blocks kept for reuse and the spare records (the communicator
  // went idle); returns the bytes of blocks freed.
  size_t trim();
  // Highest collective seq / per-peer p2p seqs ever completed, evicted or not.
  uint64_t collective_through = 0;
  std::vector<uint64_t> send_through;
  std::vector<uint64_t> recv_through;

 private:
  BufferPool pool_;  // declared before records_: outlives their backups
  size_t budget_;
  size_t in_flight_capacity_;  // bytes a send can be ahead of its receiver
  std::list<OpRecord> records_;
  std::list<OpRecord> spare_;  // nodes of records that left the log, blank
  // Which records may leave next, so that while under the budget a push costs
  // O(1) however long the log (thousands of records: 16 MiB of 4 KiB sends in
  // flight to one peer). Over the budget, evict() also walks the log from the
  // oldest record to mark records unreplayable.
  // Collectives leave oldest first (both thresholds are on the seq); a peer's
  // sends leave oldest first, once the sends after them carried more bytes
  // than the sockets hold.
  using Slot = std::list<OpRecord>::iterator;
  RingQueue<Slot> collectives_;
  struct PeerSends {
    struct Entry {
      Slot record;
      uint64_t through;  // bytes sent to the peer up to and including this send
    };
    RingQueue<Entry> queue;
    uint64_t bytes = 0;  // bytes of every send ever logged to the peer
  };
  std::vector<PeerSends> sends_;  // by peer
  void drop(Slot it);
  // Backup bytes of records_, kept as they come and go (a logged record's
  // backups change only here), so the budget check needs no second walk of
  // the log on every op.
  size_t bytes_ = 0;
  uint64_t synced_[2] = {0, 0};  // match seqs of the last two synchronizing collectives, newest first
  uint64_t everywhere_ = 0;      // collectives up to here are done on every rank
  void note_synchronized(uint64_t match_seq);
  void evict();
};

// How far the ranks agree each op got: the first slice to run again.
struct ResumePlan {
  struct Entry {
    uint64_t local_seq;  // which of this rank's records
    size_t resume;       // first slice to run again
  };
  std::vector<Entry> entries;
  // The highest collective sequence number any rank has started (or finished):
  // a new tuning can take effect from the next one on every rank alike.
  uint64_t collectives_started = 0;
};

// One rank's ledger as published in the store during recovery. `current`:
// the records of the op in flight (several for a group, none when idle).
std::string serialize_ledger(const ReplayLog& log, std::span<const OpRecord> current, int size);

// Computes, for this rank's records (log and current), the resume slice agreed
// from every rank's published ledger. Fails with kInternal naming the op if a
// rank would have to re-run an op whose backups it has already released.
// `ledgers`: which ledger each rank published, each distinct one once (the
// recovery's exchange reduces them so: runtime/recovery.cc).
Result<ResumePlan> agree_resume(int rank, int size, const ReplayLog& log,
                                std::span<const OpRecord> current, const DistinctValues& ledgers);
// Every rank's ledger, by rank.
inline Result<ResumePlan> agree_resume(int rank, int size, const ReplayLog& log,
                                       std::span<const OpRecord> current,
                                       const std::vector<std::string>& ledgers) {
  return agree_resume(rank, size, log, current, DistinctValues(ledgers));
}

// What a recovery's one exchange carries from each rank: its ballot, its
// ledger and the TCP listener it keeps (encode_values, three values), and,
// where the ranks connected the next epoch before the exchange
// (CommunicatorImpl::connect_ahead), a fourth: its connect outcome and link
// timing (encode_link_value). Reduced to the distinct first three
// (pack_distinct: most ranks write the same) and every rank's fourth
// reduced (reduce_link_values), empty unless every rank wrote one.
Bytes pack_ledgers(const std::vector<Bytes>& values);
// False for anything pack_ledgers did not write for `size` ranks. `*links`:
// the link timings reduced, empty where no rank connected ahead.
bool unpack_ledgers(const Bytes& packed, int size, DistinctValues* ledgers, Bytes* links);

// One op in flight, or none (nullptr).
inline std::span<const OpRecord> one_record(const OpRecord* current) {
  return current ? std::span<const OpRecord>(current, 1) : std::span<const OpRecord>();
}

}  // namespace rcoll
