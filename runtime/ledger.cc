#include "runtime/ledger.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <tuple>

#include "base/store_exchange.h"
#include "runtime/link_model.h"

namespace rcoll {

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& o) noexcept {
  if (this != &o) {
    if (pool_ && data_) pool_->give(std::move(data_), capacity_);
    pool_ = o.pool_;
    data_ = std::move(o.data_);
    capacity_ = o.capacity_;
    size_ = o.size_;
    o.pool_ = nullptr;
    o.capacity_ = o.size_ = 0;
  }
  return *this;
}

PooledBuffer::~PooledBuffer() {
  if (pool_ && data_) pool_->give(std::move(data_), capacity_);
}

PooledBuffer BufferPool::take(size_t bytes) {
  // A backup of nothing (a broadcast's receiver reads no input) holds no
  // block: 1-byte blocks would pile up in the free list, never an exact fit,
  // and every take would scan past them.
  if (bytes == 0) return PooledBuffer();
  // Smallest free block that fits; the newest of those that fit exactly
  // (back to front: ops of one size recycle in O(1), and the block last given
  // back is the likeliest to be in cache).
  size_t best = free_.size();
  for (size_t i = free_.size(); i-- > 0;) {
    if (free_[i].second < bytes || (best != free_.size() && free_[i].second >= free_[best].second)) continue;
    best = i;
    if (free_[i].second == bytes) break;
  }
  if (best < free_.size()) {
    // Order does not matter: the last block fills the gap.
    auto block = std::move(free_[best]);
    if (best + 1 != free_.size()) free_[best] = std::move(free_.back());
    free_.pop_back();
    free_bytes_ -= block.second;
    return PooledBuffer(this, std::move(block.first), block.second, bytes);
  }
  const size_t capacity = std::max<size_t>(bytes, 1);
  return PooledBuffer(this, std::make_unique_for_overwrite<char[]>(capacity), capacity, bytes);
}

void BufferPool::give(std::unique_ptr<char[]> data, size_t capacity) {
  if (free_bytes_ + capacity > keep_) return;  // over what we keep: free it
  free_bytes_ += capacity;
  free_.emplace_back(std::move(data), capacity);
}

size_t BufferPool::trim() {
  const size_t freed = free_bytes_;
  free_.clear();
  free_.shrink_to_fit();
  free_bytes_ = 0;
  return freed;
}

size_t OpRecord::backup_bytes() const {
  size_t n = 0;
  for (const auto& b : backups) n += b.data.size();
  return n;
}

bool OpRecord::covers(size_t first, size_t end) const {
  // Backups are kept sorted by slice_first and never overlap.
  size_t next = first;
  for (const auto& b : backups) {
    if (b.slice_first <= next && b.slice_end > next) next = b.slice_end;
  }
  return next >= end;
}

void OpRecord::back_up(int rank, int size, size_t first, size_t end) {
  // Copy only the slices no backup holds yet, as maximal runs of consecutive
  // slices: an existing backup may be the only copy of an input the op has
  // since overwritten, so it must never be shadowed by a newer one.
  auto covered = [this](size_t k) {
    for (const auto& b : backups)
      if (b.slice_first <= k && k < b.slice_end) return true;
    return false;
  };
  const size_t es = size_of(op.in.dtype);
  size_t k = first;
  while (k < end) {
    if (covered(k)) {
      ++k;
      continue;
    }
    size_t run_end = k + 1;
    while (run_end < end && !covered(run_end)) ++run_end;
    SlicePlan plan = plan_slices(op, rank, size, tuning, k, run_end);
    size_t bytes = 0;
    for (const auto& r : plan.inputs) bytes += (r.end - r.begin) * es;
    // Built in place: no move of its ranges.
    InputBackup& b = backups.emplace_back();
    b.data = pool ? pool->take(bytes) : PooledBuffer(nullptr, std::make_unique_for_overwrite<char[]>(std::max<size_t>(bytes, 1)), bytes, bytes);
    b.slice_first = k;
    b.slice_end = run_end;
    size_t at = 0;
    for (const auto& r : plan.inputs) {
      const size_t n = (r.end - r.begin) * es;
      if (n > 0) std::memcpy(b.data.data() + at, static_cast<const char*>(op.in.data) + r.begin * es, n);
      at += n;
      b.ranges.push_back(r);
    }
    k = run_end;
  }
  // Usually appended in order already (a completed op's one tail, the next window).
  auto by_first = [](const InputBackup& x, const InputBackup& y) {
    return x.slice_first < y.slice_first;
  };
  if (!std::is_sorted(backups.begin(), backups.end(), by_first))
    std::sort(backups.begin(), backups.end(), by_first);
}

void OpRecord::release_before(size_t keep_from) {
  backups.erase(std::remove_if(backups.begin(), backups.end(), [keep_from](const InputBackup& b) { return b.slice_end <= keep_from; }),
                backups.end());
}

void OpRecord::restore_inputs() const {
  const size_t es = size_of(op.in.dtype);
  for (const auto& b : backups) {
    size_t at = 0;
    for (const auto& r : b.ranges) {
      const size_t n = (r.end - r.begin) * es;
      if (n > 0) std::memcpy(static_cast<char*>(op.in.data) + r.begin * es, b.data.data() + at, n);
      at += n;
    }
  }
}

void OpRecord::map_inputs(RangeMap* in) const {
  const size_t es = size_of(op.in.dtype);
  for (const auto& b : backups) {
    size_t at = 0;
    for (const auto& r : b.ranges) {
      in->redirect(r.begin, r.end, const_cast<char*>(b.data.data()) + at);
      at += (r.end - r.begin) * es;
    }
  }
}

void ReplayLog::push(OpRecord&& record) {
  const bool synchronizing = record.op.kind != OpKind::kSendRecv && !broadcast_is_eager(record.op, record.tuning);
  const uint64_t seq = record.op.match_seq;
  bytes_ += record.backup_bytes();
  if (spare_.empty()) {
    records_.push_back(std::move(record));
  } else {
    records_.splice(records_.end(), spare_, spare_.begin());
    records_.back() = std::move(record);
  }
  const Slot it = std::prev(records_.end());
  if (it->op.kind == OpKind::kSendRecv) {
    const auto peer = static_cast<size_t>(it->op.peer);
    if (peer >= sends_.size()) sends_.resize(peer + 1);
    PeerSends& s = sends_[peer];
    s.bytes += it->op.in.bytes();
    s.queue.push_back({it, s.bytes});
    // Only this peer's sends can have become evictable.
    while (!s.queue.empty() && s.bytes - s.queue.front().through > in_flight_capacity_) {
      drop(s.queue.front().record);
      s.queue.pop_front();
    }
  } else {
    collectives_.push_back(it);
  }
  if (synchronizing) note_synchronized(seq);
  evict();
}

void ReplayLog::synchronized(uint64_t match_seq) {
  note_synchronized(match_seq);
  evict();
}

void ReplayLog::done_everywhere(uint64_t match_seq) {
  everywhere_ = std::max(everywhere_, match_seq);
  evict();
}

void ReplayLog::note_synchronized(uint64_t match_seq) {
  if (match_seq <= synced_[0]) return;
  synced_[1] = synced_[0];
  synced_[0] = match_seq;
}

// The backups go back to the pool now, the node waits in spare_.
void ReplayLog::drop(Slot it) {
  bytes_ -= it->backup_bytes();
  it->backups.clear();
  it->op = Op{};
  spare_.splice(spare_.end(), records_, it);
}

void ReplayLog::evict() {
  // A collective that needs every rank can only finish here once every rank
  // has started it, and so finished every op before it: a peer is never more
  // than one such collective behind, and an op followed by two of them is
  // done everywhere. (An eager broadcast is not one: its root runs ahead, and
  // what lets go of those is the completion credits, done_everywhere.) A send
  // can be ahead of its receiver by what the sockets hold: push() keeps sends
  // until later sends to the same peer have pushed more than that through.
  while (!collectives_.empty()) {
    const uint64_t seq = collectives_.front()->op.match_seq;
    if (!(synced_[1] > seq || seq <= everywhere_)) break;
    drop(collectives_.front());
    collectives_.pop_front();
  }
  // Over budget: mark the oldest records unreplayable rather than dropping
  // them silently; a recovery that needs one then fails with a clear error.
  for (auto& r : records_) {
    if (bytes_ <= budget_) break;
    const size_t held = r.backup_bytes();
    if (held == 0) continue;  // a receiver's record: dropping it frees nothing
    bytes_ -= held;
    r.backups.clear();
    r.replayable = false;
  }
}

size_t ReplayLog::trim() {
  spare_.clear();
  return pool_.trim();
}

namespace {

// (kind letter, peer, seq) identifies an op across ranks: 'C' collectives by
// their sequence, 'S'/'R' sends/receives by peer and per-peer sequence.
using OpKey = std::tuple<char, int, uint64_t>;

OpKey key_of(const Op& op) {
  if (op.kind == OpKind::kSendRecv) return {op.is_send ? 'S' : 'R', op.peer, op.match_seq};
  return {'C', -1, op.match_seq};
}

// Ops that one rank can only have finished once every rank has the whole
// result: an acknowledged broadcast (it completes down an acknowledgement
// chain) and an op on NCCL confirmed on its own (it ends with a confirmation
// all-reduce). Nobody re-runs them for a peer. One that settles later does
// not: a rank can complete it while a peer's last slices are still pending.
bool completes_everywhere(const OpRecord& r) {
  return (r.op.kind == OpKind::kBroadcast && !broadcast_is_eager(r.op, r.tuning)) ||
         (r.nccl && !r.settles_later);
}

void write_record(std::ostringstream& out, const OpRecord& r) {
  auto [kind, peer, seq] = key_of(r.op);
  out << "op " << kind << ' ' << peer << ' ' << seq << ' ' << r.total << ' ' << r.done << ' '
      << static_cast<int>(r.op.kind) << ' ' << (completes_everywhere(r) ? 1 : 0) << '\n';
}

struct ParsedEntry {
  size_t total = 0;
  size_t done = 0;
  int kind = 0;  // OpKind
  int everywhere = 0;
};

struct ParsedLedger {
  uint64_t collective_through = 0;
  std::map<std::pair<char, int>, uint64_t> p2p_through;  // ('S'|'R', peer) -> seq
  std::map<OpKey, ParsedEntry> done;
  bool valid = false;
};

ParsedLedger parse(const std::string& text) {
  ParsedLedger p;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    if (word == "through") {
      char kind;
      int peer;
      uint64_t seq;
      in >> kind >> peer >> seq;
      if (kind == 'C') p.collective_through = seq;
      else p.p2p_through[{kind, peer}] = seq;
    } else if (word == "op") {
      char kind;
      int peer;
      uint64_t seq;
      ParsedEntry e;
      in >> kind >> peer >> seq >> e.total >> e.done >> e.kind >> e.everywhere;
      p.done[{kind, peer, seq}] = e;
    } else if (word == "end") {
      p.valid = true;
    }
  }
  return p;
}

}  // namespace

std::string serialize_ledger(const ReplayLog& log, std::span<const OpRecord> current, int size) {
  std::ostringstream out;
  out << "through C -1 " << log.collective_through << '\n';
  for (int peer = 0; peer < size; ++peer) {
    if (peer < static_cast<int>(log.send_through.size()) && log.send_through[peer] > 0)
      out << "through S " << peer << ' ' << log.send_through[peer] << '\n';
    if (peer < static_cast<int>(log.recv_through.size()) && log.recv_through[peer] > 0)
      out << "through R " << peer << ' ' << log.recv_through[peer] << '\n';
  }
  for (const auto& r : log.records()) write_record(out, r);
  for (const auto& r : current) write_record(out, r);
  out << "end\n";
  return out.str();
}

namespace {

// Every rank's ledger, as one rank reads them in a recovery: each distinct
// ledger parsed once, and worked through once, however many ranks wrote it
// (a job of collectives at 16,384 ranks has a handful).
struct Ledgers {
  int rank = 0;
  int size = 0;
  const DistinctValues* texts = nullptr;  // which ledger each rank wrote
  std::vector<ParsedLedger> parsed;       // by distinct ledger

  const ParsedLedger& of(int q) const { return parsed[static_cast<size_t>(texts->index_of(q))]; }
  // Distinct ledger d is another rank's (not this rank's alone).
  bool others(int d) const { return texts->index_of(rank) != d || texts->ranks_with(d) > 1; }
  // A rank other than this one that wrote ledger d (for messages).
  int other_rank(int d) const {
    for (int q = texts->first_rank(d); q < size; ++q)
      if (q != rank && texts->index_of(q) == d) return q;
    return -1;
  }

  // How far the rank that wrote `l` got in the op that `mine` names (seen
  // from its side).
  size_t done_on(const ParsedLedger& l, const OpKey& mine, size_t total) const {
    auto [kind, peer, seq] = mine;
    OpKey theirs = mine;
    if (kind == 'S') theirs = {'R', rank, seq};
    if (kind == 'R') theirs = {'S', rank, seq};
    if (auto it = l.done.find(theirs); it != l.done.end()) return it->second.done;
    uint64_t through = 0;
    if (std::get<0>(theirs) == 'C') {
      through = l.collective_through;
    } else if (auto t = l.p2p_through.find({std::get<0>(theirs), std::get<1>(theirs)}); t != l.p2p_through.end()) {
      through = t->second;
    }
    return seq <= through ? total : 0;
  }

  // Whether the rank that wrote `l` completed the op it calls `theirs` and
  // no longer holds it (past its through count, not in its ledger).
  static bool completed_on(const ParsedLedger& l, const OpKey& theirs) {
    if (l.done.count(theirs) != 0) return false;
    auto [kind, peer, seq] = theirs;
    if (kind == 'C') return seq <= l.collective_through;
    const auto t = l.p2p_through.find({kind, peer});
    return t != l.p2p_through.end() && seq <= t->second;
  }

  // The slice this rank's op `r` resumes at: the same on every rank in it.
  size_t resume_point(const OpRecord& r) const {
    const OpKey key = key_of(r.op);
    if (std::get<0>(key) == 'S') {
      // The receiver's count is the truth for a send: the sender's own may lag
      // (bytes in the peer's socket before the write completion was seen), and
      // both sides must resume at the same slice.
      return done_on(of(r.op.peer), key, r.total);
    }
    if (std::get<0>(key) == 'R') {
      // A receive: its own count, which the sender adopts too. On NCCL a
      // send completes only once the pair's confirmation is through, which
      // the receiver queued behind the receive: a sender that completed it
      // (and so logs it no more) means the bytes landed here, even where
      // this rank was stopped before it saw its own receive end (the sender
      // would never send them again).
      if (r.nccl && completed_on(of(r.op.peer), {'S', rank, std::get<2>(key)})) return r.total;
      return r.done;
    }
    size_t resume = r.done;
    for (int d = 0; d < texts->distinct(); ++d)
      if (others(d))
        resume = std::min(resume, done_on(parsed[static_cast<size_t>(d)], key, r.total));
    // A broadcast completes on a rank only when every rank after it has the
    // whole buffer (the ack chain), and every rank before it forwarded it;
    // an op on NCCL only once its confirmation all-reduce is through: one
    // completed rank means every rank has the data.
    if (completes_everywhere(r)) {
      for (int d = 0; d < texts->distinct(); ++d) {
        const ParsedLedger& l = parsed[static_cast<size_t>(d)];
        if (others(d) && !l.done.count(key) && std::get<2>(key) <= l.collective_through)
          resume = r.total;
      }
    }
    return resume;
  }

  // Does a peer still need an op this rank finished but no longer holds? Then
  // nobody can finish it: say so, rather than resend the wrong data or hang.
  Status inputs_still_held(const ReplayLog& log, std::span<const OpRecord> current) const {
    auto holds = [&](const OpKey& key) {
      for (const auto& r : log.records())
        if (key_of(r.op) == key) return true;
      for (const auto& r : current)
        if (key_of(r.op) == key) return true;
      return false;
    };
    const auto needed = [&](int q, const OpKey& key, const ParsedEntry& e) {
      return Status(ErrorCode::kInternal, ErrorContext{rank, q, 0, -1, ""},
                    "rank " + std::to_string(q) + " still needs slices " + std::to_string(e.done) +
                        ".." + std::to_string(e.total) + " of " +
                        (std::get<0>(key) == 'C' ? "collective" : "send") + " seq " +
                        std::to_string(std::get<2>(key)) +
                        " from this rank, which finished it and no longer holds its inputs "
                        "(replay log too short or backup budget too small)");
    };
    for (int d = 0; d < texts->distinct(); ++d) {
      if (!others(d)) continue;
      for (const auto& [key, e] : parsed[static_cast<size_t>(d)].done) {
        if (e.done >= e.total || e.everywhere) continue;
        auto [kind, peer, seq] = key;
        if (kind == 'C') {
          if (seq <= log.collective_through && !holds({'C', -1, seq}))
            return needed(other_rank(d), key, e);
        } else if (kind == 'R' && peer == rank) {
          // Every rank that wrote this ledger still receives what this rank
          // sent it (rare: the scan of the ranks is for those ledgers only).
          for (int q = texts->first_rank(d); q < size; ++q) {
            if (q == rank || texts->index_of(q) != d) continue;
            const bool finished_here = static_cast<size_t>(q) < log.send_through.size() &&
                                       seq <= log.send_through[static_cast<size_t>(q)];
            if (finished_here && !holds({'S', q, seq})) return needed(q, key, e);
          }
        }
      }
    }
    return Status();
  }
};

}  // namespace

Result<ResumePlan> agree_resume(int rank, int size, const ReplayLog& log,
                                std::span<const OpRecord> current, const DistinctValues& ledgers) {
  if (ledgers.size() != size) {
    return Status(
        ErrorCode::kInternal, ErrorContext{rank, -1, 0, -1, ""},
        std::to_string(ledgers.size()) + " ledgers for " + std::to_string(size) + " ranks");
  }
  Ledgers all{rank, size, &ledgers, {}};
  for (int d = 0; d < ledgers.distinct(); ++d) {
    all.parsed.push_back(parse(ledgers.value(d)));
    if (!all.parsed.back().valid) {
      return Status(ErrorCode::kInternal, "rank " + std::to_string(ledgers.first_rank(d)) +
                                              " published a malformed ledger");
    }
  }
  ResumePlan plan;
  for (const auto& l : all.parsed) {
    plan.collectives_started = std::max(plan.collectives_started, l.collective_through);
    for (const auto& [key, entry] : l.done)
      if (std::get<0>(key) == 'C') plan.collectives_started = std::max(plan.collectives_started, std::get<2>(key));
  }
  auto consider = [&](const OpRecord& r) -> Status {
    const size_t resume = all.resume_point(r);
    if (r.complete && resume >= r.total) return Status();
    // (One on NCCL keeps its input on the device, not in host backups:
    // replay_nccl says so if it is gone.)
    if (r.complete && !r.nccl && (!r.replayable || !r.covers(resume, r.total))) {
      return Status(ErrorCode::kInternal, ErrorContext{rank, -1, r.op.seq, -1, ""},
                    r.op.describe() + " must run again from slice " + std::to_string(resume) +
                        " but this rank no longer holds its inputs (backup budget too small)");
    }
    plan.entries.push_back({r.op.seq, resume});
    return Status();
  };
  for (const auto& r : log.records()) {
    if (Status s = consider(r); !s.ok()) return s;
  }
  if (Status s = all.inputs_still_held(log, current); !s.ok()) return s;
  for (const auto& r : current) {
    if (Status s = consider(r); !s.ok()) return s;
  }
  return plan;
}

Bytes pack_ledgers(const std::vector<Bytes>& values) {
  std::vector<Bytes> ledgers, links;
  ledgers.reserve(values.size());
  links.reserve(values.size());
  for (const Bytes& v : values) {
    std::vector<Bytes> parts;
    if (decode_values(v, 4, &parts)) {
      ledgers.push_back(encode_values({parts[0], parts[1], parts[2]}));
      links.push_back(std::move(parts[3]));
    } else {
      ledgers.push_back(v);  // malformed: whole to the ledger check, which names it
      links.emplace_back();
    }
  }
  // Every rank's, or none: a rank without one (it was late connecting
  // ahead) has every rank connect the epoch after the exchange.
  const bool every_link =
      std::none_of(links.begin(), links.end(), [](const Bytes& l) { return l.empty(); });
  return encode_values({pack_distinct(ledgers), every_link ? reduce_link_values(links) : Bytes{}});
}

bool unpack_ledgers(const Bytes& packed, int size, DistinctValues* ledgers, Bytes* links) {
  std::vector<Bytes> parts;
  if (!decode_values(packed, 2, &parts)) return false;
  if (!DistinctValues::decode(parts[0], size, ledgers)) return false;
  *links = std::move(parts[1]);
  return true;
}

}  // namespace rcoll
