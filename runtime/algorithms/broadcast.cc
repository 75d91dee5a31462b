// Pipelined chain broadcast. Ranks form a chain starting at the root; the
// buffer is cut into pieces (slices), and every rank forwards piece k to the
// next rank as soon as it has arrived, while pieces k+1... are still coming in.
// Time is about (p - 2 + pieces) piece transfers, close to one full-buffer
// transfer for large data, plus one acknowledgement back up the chain.
//
// Star broadcast (more than 2 ranks, not eager): the root sends every piece
// to every rank, every rank acknowledges to the root, and the root then tells
// every rank that all have it. Three message latencies whatever the group
// size, where the chain takes 2(p-1), so it runs wherever the buffer is one
// piece. For larger buffers it depends on what bounds the copies. Across a
// network the root's link carries (p - 1) x N bytes against N in the chain,
// and on a host with many CPUs the chain's ranks forward in parallel: the
// chain is up to p - 1 times faster. But every byte sent is copied twice
// (into the socket, out of it), 2(p - 1) x N bytes either way, and when the
// ranks share c CPUs the fair share of that is 2(p - 1) x N / c: the root's
// (p - 1) x N is within it when c <= 2. There the star saves the chain's
// hand-offs between ranks that take turns on the CPUs, and its frames are as
// large as the link allows (nothing is forwarded, nothing to pipeline).
// Measured on 2 CPUs, busbw star / chain at 512 KiB-64 MiB
// (bench/broadcast_algo.sh): TCP 4 ranks 1.06-1.23x, 3 ranks 0.95-1.22x,
// 8 ranks 1.10-1.32x; UCX 4 ranks 1.58-1.93x. Every rank must choose alike, so
// the ranks' CPUs come from the link samples all agreed on at connect
// (shared_cpus, Tuning::few_shared_cpus).
//
// Either way a rank finishes only once every rank has the whole buffer, so a
// finished broadcast never has to be re-run for a peer (the ledger relies on
// it); except an eager broadcast (broadcast_is_eager), which skips the
// acknowledgements and is kept in the root's replay log instead.
//
// Eager broadcasts (more than 2 ranks) run down a tree with no acknowledgement:
// a rank receives each piece from its parent and passes it on to its children.
// Back-to-back eager broadcasts are then paced by the busiest sender, so the
// tree is the chain (one send per rank) up to kEagerChainRanks, and a binomial
// tree above (the root sends log2 p frames, and the last rank has the data
// after log2 p hops where the chain takes p - 1). Against the direct broadcast
// (p - 1 sends at the root), 1-8 KiB, 5 alternating rounds, busbw: TCP 4 ranks
// 2.1-2.6x, 8 ranks 4.0-5.3x, 9 ranks (the binomial tree) 2.0-2.1x; UCX 4 ranks
// 1.2-2.2x. At 4 and 8 ranks the binomial tree was 1.4-2.3x slower than the
// chain (TCP, 4 KiB, 3 rounds); where the chain's p - 1 hops start to cost
// more than it saves was not measured (this host has 2 cores).
#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/algorithms/context.h"

namespace rcoll {

namespace {

Status star_broadcast(AlgoContext& ctx, size_t piece, size_t pieces) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank(), root = op.root;
  const size_t es = op.element_size(), n = op.out.count, window = ctx.window();
  std::span<Request> reqs = ctx.requests(std::max(window * static_cast<size_t>(p - 1), static_cast<size_t>(p)));
  for (size_t start = ctx.first_slice(); start < ctx.end_slice(pieces); start += window) {
    const size_t w = std::min(window, ctx.end_slice(pieces) - start);
    ctx.before_window(start, start + w);
    size_t q = 0;
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (start + k) * piece, len = std::min(piece, n - off);
      const auto chunk = static_cast<uint32_t>(start + k);
      if (r != root) {
        ctx.recv(root, chunk, 0, ctx.out(off), len * es, &reqs[q++]);
        continue;
      }
      // Piece k to every rank before piece k + 1 to any: all receivers move
      // together, as they would down the chain.
      for (int d = 1; d < p; ++d) ctx.send((root + d) % p, chunk, 0, ctx.in(off), len * es, &reqs[q++]);
    }
    if (Status st = ctx.wait_all({reqs.data(), q}); !st.ok()) return st;
    ctx.slices_done(start + w);
  }
  // Every rank acknowledges to the root, which then tells every rank that all
  // have it. Chunk `pieces` (after every data chunk), as the chain's.
  constexpr uint16_t kAck = 1, kAllHaveIt = 2;
  const auto done_chunk = static_cast<uint32_t>(pieces);
  if (r == root) {
    size_t k = 0;
    for (int q = 0; q < p; ++q)
      if (q != root) ctx.recv(q, done_chunk, kAck, nullptr, 0, &reqs[k++]);
    if (Status st = ctx.wait_all({reqs.data(), k}); !st.ok()) return st;
    k = 0;
    for (int q = 0; q < p; ++q)
      if (q != root) ctx.send(q, done_chunk, kAllHaveIt, nullptr, 0, &reqs[k++]);
    return ctx.wait_all({reqs.data(), k});
  }
  ctx.send(root, done_chunk, kAck, nullptr, 0, &reqs[0]);
  ctx.recv(root, done_chunk, kAllHaveIt, nullptr, 0, &reqs[1]);
  return ctx.wait_all({reqs.data(), 2});
}

constexpr int kEagerChainRanks = 8;

struct TreeLinks {
  int parent = -1;  // -1 at the root
  // Largest subtree first; at most log2 p (inline: computed on every op).
  boost::container::small_vector<int, 16> children;
};

// Position v = (rank - root) mod p. In the chain, v - 1 and v + 1. In the
// binomial tree the parent is v with its lowest set bit cleared, and the
// children are v + 2^j for every 2^j below that bit; child v + 2^j heads
// min(2^j, p - v - 2^j) ranks, so when p is not a power of two the largest
// 2^j is not always the largest subtree (at 9 ranks the root's v + 8 is a leaf).
TreeLinks eager_links(int rank, int root, int p) {
  TreeLinks t;
  const int v = (rank - root + p) % p;
  if (p <= kEagerChainRanks) {
    if (v > 0) t.parent = (rank - 1 + p) % p;
    if (v < p - 1) t.children.push_back((rank + 1) % p);
    return t;
  }
  int mask = 1;
  while (mask < p && !(v & mask)) mask <<= 1;
  if (v != 0) t.parent = (v - mask + root) % p;
  boost::container::small_vector<std::pair<int, int>, 16> by_size;  // (ranks in the subtree, child position)
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p) by_size.emplace_back(std::min(mask, p - v - mask), v + mask);
  std::stable_sort(by_size.begin(), by_size.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [ranks, c] : by_size) t.children.push_back((c + root) % p);
  return t;
}

Status eager_broadcast(AlgoContext& ctx, size_t piece, size_t pieces) {
  const Op& op = ctx.op();
  const size_t es = op.element_size(), n = op.out.count;
  const TreeLinks t = eager_links(ctx.rank(), op.root, ctx.size());
  const size_t window = ctx.window(), fanout = t.children.size();
  std::span<Request> sends = ctx.requests(window * fanout), recvs = ctx.requests(window);
  for (size_t start = ctx.first_slice(); start < ctx.end_slice(pieces); start += window) {
    const size_t w = std::min(window, ctx.end_slice(pieces) - start);
    ctx.before_window(start, start + w);
    for (size_t k = 0; k < w && t.parent >= 0; ++k) {
      const size_t off = (start + k) * piece, len = std::min(piece, n - off);
      ctx.recv(t.parent, static_cast<uint32_t>(start + k), 0, ctx.out(off), len * es, &recvs[k]);
    }
    size_t q = 0;
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (start + k) * piece, len = std::min(piece, n - off);
      if (t.parent >= 0) {
        if (Status st = ctx.wait(recvs[k]); !st.ok()) return st;
      }
      const char* src = t.parent < 0 ? ctx.in(off) : ctx.out(off);
      for (int child : t.children) ctx.send(child, static_cast<uint32_t>(start + k), 0, src, len * es, &sends[q++]);
    }
    if (Status st = ctx.wait_all({sends.data(), q}); !st.ok()) return st;
    ctx.slices_done(start + w);
  }
  return Status();
}

}  // namespace

int broadcast_first_peer(const Op& op, int rank, int size, const Tuning& tuning) {
  if (size > 2 && broadcast_is_eager(op, tuning)) {
    const TreeLinks t = eager_links(rank, op.root, size);
    return t.parent >= 0 ? t.parent : t.children.front();
  }
  // A star: every rank but the root talks only to the root.
  if (broadcast_is_star(op, size, tuning) && rank != op.root) return op.root;
  // The last rank of a chain only talks back to its predecessor.
  if ((rank - op.root + size) % size == size - 1) return (rank - 1 + size) % size;
  return (rank + 1) % size;
}

bool broadcast_is_eager(const Op& op, const Tuning& tuning) {
  return op.kind == OpKind::kBroadcast && op.out.count * op.element_size() <= tuning.eager_broadcast_bytes;
}

bool large_broadcasts_by_star(int size, const Tuning& tuning) {
  if (size <= 2 || tuning.broadcast == BroadcastAlgorithm::kChain) return false;
  return tuning.broadcast == BroadcastAlgorithm::kStar || tuning.few_shared_cpus;
}

size_t broadcast_piece_bytes(const Op& op, int size, const Tuning& tuning) {
  // Nothing is forwarded: frames as large as the link allows.
  if (size == 2 || broadcast_is_star(op, size, tuning)) return std::max(tuning.piece_bytes, tuning.stream_piece_bytes);
  return tuning.piece_bytes;
}

bool broadcast_is_star(const Op& op, int size, const Tuning& tuning) {
  if (size <= 2 || op.out.count == 0 || broadcast_is_eager(op, tuning)) return false;
  if (large_broadcasts_by_star(size, tuning)) return true;
  const size_t piece = std::max<size_t>(1, tuning.piece_bytes / op.element_size());
  return tuning.broadcast == BroadcastAlgorithm::kAuto && op.out.count <= piece;
}

Status run_broadcast(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const size_t es = op.element_size(), n = op.out.count;
  const size_t piece = std::max<size_t>(1, broadcast_piece_bytes(op, p, ctx.tuning()) / es);
  const size_t pieces = std::max<size_t>(1, (n + piece - 1) / piece);
  if (p == 1 || n == 0) {
    ctx.slices_done(pieces);
    return Status();
  }
  if (p > 2 && broadcast_is_eager(op, ctx.tuning())) return eager_broadcast(ctx, piece, pieces);
  if (broadcast_is_star(op, p, ctx.tuning())) return star_broadcast(ctx, piece, pieces);
  const int pos = (r - op.root + p) % p;
  const int prev = (r - 1 + p) % p, next = (r + 1) % p;
  const bool first_in_chain = pos == 0, last = pos == p - 1;
  const size_t window = ctx.window();
  // No more requests than a window can use (a small op has one piece).
  const size_t slots = std::min(window, pieces);
  std::span<Request> sends = ctx.requests(slots), recvs = ctx.requests(slots);
  for (size_t start = ctx.first_slice(); start < ctx.end_slice(pieces); start += window) {
    const size_t w = std::min(window, ctx.end_slice(pieces) - start);
    ctx.before_window(start, start + w);
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (start + k) * piece, len = std::min(piece, n - off);
      if (!first_in_chain) ctx.recv(prev, static_cast<uint32_t>(start + k), 0, ctx.out(off), len * es, &recvs[k]);
    }
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (start + k) * piece, len = std::min(piece, n - off);
      if (!first_in_chain) {
        if (Status st = ctx.wait(recvs[k]); !st.ok()) return st;
      }
      const char* src = first_in_chain ? ctx.in(off) : ctx.out(off);
      if (!last) ctx.send(next, static_cast<uint32_t>(start + k), 0, src, len * es, &sends[k]);
    }
    if (!last) {
      if (Status st = ctx.wait_all({sends.data(), w}); !st.ok()) return st;
    }
    ctx.slices_done(start + w);
  }
  if (broadcast_is_eager(op, ctx.tuning())) return Status();
  // Completion travels back up the chain: a rank finishes only once every rank
  // after it has the whole buffer, so a finished broadcast never has to be
  // re-run for a peer (and the caller may reuse the buffer at once).
  Request ack_in, ack_out;
  const auto ack_chunk = static_cast<uint32_t>(pieces);
  if (!last) {
    ctx.recv(next, ack_chunk, 1, nullptr, 0, &ack_in);
    if (Status st = ctx.wait(ack_in); !st.ok()) return st;
  }
  if (!first_in_chain) {
    ctx.send(prev, ack_chunk, 1, nullptr, 0, &ack_out);
    if (Status st = ctx.wait(ack_out); !st.ok()) return st;
  }
  return Status();
}

}  // namespace rcoll
