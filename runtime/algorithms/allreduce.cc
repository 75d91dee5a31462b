// Allreduce.
//
// Ring (large data): the buffer is cut into slices of size x piece elements;
// each slice is a complete reduce-scatter + allgather around the ring, so a
// slice is the unit the ledger records and a retry re-runs. A window of slices
// moves in lockstep: at every ring step all slices of the window post their
// receive and send, and each received piece is reduced as soon as it lands
// while the others are still on the wire. Bytes sent per rank: 2(p-1)/p x N.
//
// Halving-doubling (power-of-two groups): the same slices, each reduced by
// recursive halving (log2 p pairwise exchanges of a half, a quarter, ... of the
// slice with rank r^d, keeping the half this rank will own) and gathered by
// recursive doubling (the same exchanges in reverse). The same bytes as the
// ring in 2 log2 p steps instead of 2(p-1); rank r ends up reducing segment r.
//
// Direct (small data): every rank sends its whole input to every other rank and
// reduces all p inputs locally in rank order. One round of latency, and every
// rank computes the same sequence of operations, so results are bitwise equal.
//
// Recursive doubling (small data, power-of-two groups of 4 or more): log2 p
// exchanges of the whole buffer with rank r ^ 1, r ^ 2, ..., each followed by
// a reduction. The lower ranks' partial is always the left operand, so both
// partners of an exchange compute the same operation and every rank ends with
// the same bits ((a0 + a1) + (a2 + a3) at 4 ranks). p log2 p messages where
// direct sends p (p - 1): on a host whose cores the ranks share, every message
// is a send and a receive through the kernel, and that count sets the time.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu_reduce.h"
#include "runtime/algorithms/context.h"

namespace rcoll {
namespace {

Status ring_allreduce(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  const size_t es = op.element_size();
  const size_t n = op.out.count;
  const size_t piece = ctx.piece_elements();
  const size_t slice = piece * static_cast<size_t>(p);
  const size_t slices = (n + slice - 1) / slice;
  const size_t window = ctx.window();
  const ReduceOp red = op.reduce == ReduceOp::kAvg ? ReduceOp::kSum : op.reduce;
  // A slot holds one received segment: at most a piece, and never more than the op.
  const size_t stride = std::min(piece, n);
  char* tmp = static_cast<char*>(ctx.scratch(std::min(window, slices) * stride * es));

  std::span<Request> sends = ctx.requests(window), recvs = ctx.requests(window);
  for (size_t first = ctx.first_slice(); first < ctx.end_slice(slices); first += window) {
    const size_t w = std::min(window, ctx.end_slice(slices) - first);
    ctx.before_window(first, first + w);
    auto seg = [&](size_t k, int i, size_t* off, size_t* len) {
      size_t base = (first + k) * slice, sl = std::min(slice, n - base);
      *off = base + segment_begin(sl, p, i);
      *len = base + segment_begin(sl, p, i + 1) - *off;
    };
    // Reduce-scatter: after p-1 steps this rank holds segment (r+1) of each slice.
    for (int s = 0; s < p - 1; ++s) {
      const int send_seg = ((r - s) % p + p) % p, recv_seg = ((r - s - 1) % p + p) % p;
      for (size_t k = 0; k < w; ++k) {
        size_t off, len;
        seg(k, recv_seg, &off, &len);
        ctx.recv(left, static_cast<uint32_t>(first + k), static_cast<uint16_t>(s),
                 tmp + k * stride * es, len * es, &recvs[k]);
        seg(k, send_seg, &off, &len);
        ctx.send(right, static_cast<uint32_t>(first + k), static_cast<uint16_t>(s), s == 0 ? ctx.in(off) : ctx.out(off),
                 len * es, &sends[k]);
      }
      for (size_t k = 0; k < w; ++k) {
        if (Status st = ctx.wait(recvs[k]); !st.ok()) return st;
        size_t off, len;
        seg(k, recv_seg, &off, &len);
        kernels::reduce(op.out.dtype, red, ctx.out(off), ctx.in(off), tmp + k * stride * es, len);
      }
      if (Status st = ctx.wait_all({sends.data(), w}); !st.ok()) return st;
    }
    if (op.reduce == ReduceOp::kAvg) {
      for (size_t k = 0; k < w; ++k) {
        size_t off, len;
        seg(k, (r + 1) % p, &off, &len);
        kernels::scale_avg(op.out.dtype, ctx.out(off), len, p);
      }
    }
    // Allgather: pass the reduced segments around, straight into the output.
    for (int s = 0; s < p - 1; ++s) {
      const int send_seg = ((r + 1 - s) % p + p) % p, recv_seg = ((r - s) % p + p) % p;
      const auto step = static_cast<uint16_t>(p - 1 + s);
      for (size_t k = 0; k < w; ++k) {
        size_t off, len;
        seg(k, recv_seg, &off, &len);
        ctx.recv(left, static_cast<uint32_t>(first + k), step, ctx.out(off), len * es, &recvs[k]);
        seg(k, send_seg, &off, &len);
        ctx.send(right, static_cast<uint32_t>(first + k), step, ctx.out(off), len * es, &sends[k]);
      }
      if (Status st = ctx.wait_all({recvs.data(), w}); !st.ok()) return st;
      if (Status st = ctx.wait_all({sends.data(), w}); !st.ok()) return st;
    }
    ctx.slices_done(first + w);
  }
  return Status();
}

Status halving_doubling_allreduce(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const size_t es = op.element_size();
  const size_t n = op.out.count;
  const size_t piece = ctx.piece_elements();
  const size_t slice = piece * static_cast<size_t>(p);
  const size_t slices = (n + slice - 1) / slice;
  const size_t window = ctx.window();
  const ReduceOp red = op.reduce == ReduceOp::kAvg ? ReduceOp::kSum : op.reduce;
  const size_t half = static_cast<size_t>(p / 2);
  // The most one exchange receives per slot: half the slice (segments hold at
  // most a piece), and never more than the op.
  const size_t stride = std::min(half * piece, n);
  char* tmp = static_cast<char*>(ctx.scratch(std::min(window, slices) * stride * es));
  int steps = 0;
  while ((1 << steps) < p) ++steps;

  // One frame per segment, so no frame is larger than the tuning's piece.
  std::span<Request> sends = ctx.requests(window * half), recvs = ctx.requests(window * half);
  for (size_t first = ctx.first_slice(); first < ctx.end_slice(slices); first += window) {
    const size_t w = std::min(window, ctx.end_slice(slices) - first);
    ctx.before_window(first, first + w);
    // Element range of segments [lo, hi) of slice k.
    auto segs = [&](size_t k, int lo, int hi, size_t* off, size_t* len) {
      const size_t base = (first + k) * slice, sl = std::min(slice, n - base);
      *off = base + segment_begin(sl, p, lo);
      *len = base + segment_begin(sl, p, hi) - *off;
    };
    // Reduce-scatter by recursive halving: this rank holds partials of segments [lo, lo + 2d).
    int lo = 0;
    for (int s = 0; s < steps; ++s) {
      const int d = p >> (s + 1), partner = r ^ d;
      const int keep = (r & d) ? lo + d : lo, give = (r & d) ? lo : lo + d;
      size_t q = 0;
      for (size_t k = 0; k < w; ++k) {
        size_t keep_off, unused;
        segs(k, keep, keep + d, &keep_off, &unused);
        for (int j = 0; j < d; ++j, ++q) {
          size_t off, len;
          segs(k, keep + j, keep + j + 1, &off, &len);  // lands at its place in the kept range
          ctx.recv(partner, static_cast<uint32_t>(first + k), static_cast<uint16_t>(s),
                   tmp + (k * stride + (off - keep_off)) * es, len * es, &recvs[q]);
          segs(k, give + j, give + j + 1, &off, &len);
          ctx.send(partner, static_cast<uint32_t>(first + k), static_cast<uint16_t>(s), s == 0 ? ctx.in(off) : ctx.out(off),
                   len * es, &sends[q]);
        }
      }
      if (Status st = ctx.wait_all({recvs.data(), q}); !st.ok()) return st;
      for (size_t k = 0; k < w; ++k) {
        size_t off, len;
        segs(k, keep, keep + d, &off, &len);
        kernels::reduce(op.out.dtype, red, ctx.out(off), s == 0 ? ctx.in(off) : ctx.out(off),
                        tmp + k * stride * es, len);
      }
      if (Status st = ctx.wait_all({sends.data(), q}); !st.ok()) return st;
      lo = keep;
    }
    if (op.reduce == ReduceOp::kAvg) {
      for (size_t k = 0; k < w; ++k) {
        size_t off, len;
        segs(k, r, r + 1, &off, &len);
        kernels::scale_avg(op.out.dtype, ctx.out(off), len, p);
      }
    }
    // Allgather by recursive doubling, straight into the output: this rank has [lo, lo + len).
    int len_segs = 1;
    for (int s = 0; s < steps; ++s) {
      const int d = 1 << s, partner = r ^ d;
      const int theirs = (r & d) ? lo - len_segs : lo + len_segs;
      const auto step = static_cast<uint16_t>(steps + s);
      size_t q = 0;
      for (size_t k = 0; k < w; ++k) {
        for (int j = 0; j < len_segs; ++j, ++q) {
          size_t off, len;
          segs(k, theirs + j, theirs + j + 1, &off, &len);
          ctx.recv(partner, static_cast<uint32_t>(first + k), step, ctx.out(off), len * es, &recvs[q]);
          segs(k, lo + j, lo + j + 1, &off, &len);
          ctx.send(partner, static_cast<uint32_t>(first + k), step, ctx.out(off), len * es, &sends[q]);
        }
      }
      if (Status st = ctx.wait_all({recvs.data(), q}); !st.ok()) return st;
      if (Status st = ctx.wait_all({sends.data(), q}); !st.ok()) return st;
      lo = std::min(lo, theirs);
      len_segs *= 2;
    }
    ctx.slices_done(first + w);
  }
  return Status();
}

// Direct and recursive doubling move the whole buffer as one slice, in frames
// of at most a piece. begin() is false when that slice is done here already.
struct OneSlice {
  size_t es = 0, n = 0, bytes = 0, piece = 0, pieces = 0;
  bool begin(AlgoContext& ctx) {
    es = ctx.op().element_size();
    n = ctx.op().out.count;
    bytes = n * es;
    piece = ctx.piece_elements();
    pieces = std::max<size_t>(1, (n + piece - 1) / piece);
    if (ctx.first_slice() >= ctx.end_slice(1)) return false;
    ctx.before_window(0, 1);
    return true;
  }
};

Status direct_allreduce(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  OneSlice one;
  if (!one.begin(ctx)) return Status();
  const auto [es, n, bytes, piece, pieces] = one;
  char* others = static_cast<char*>(ctx.scratch(bytes * static_cast<size_t>(p)));
  // The input may be the output (in place): keep a copy of this rank's own
  // contribution so the rank-order reduction below reads the original.
  char* mine = others + bytes * static_cast<size_t>(r);
  if (bytes > 0) std::memcpy(mine, ctx.in(0), bytes);

  std::span<Request> reqs = ctx.requests(2 * static_cast<size_t>(p - 1) * pieces);
  size_t q = 0;
  for (int d = 1; d < p; ++d) {
    const int to = (r + d) % p, from = (r - d + p) % p;
    for (size_t k = 0; k < pieces; ++k) {
      const size_t off = k * piece, len = std::min(piece, n - std::min(n, off));
      ctx.recv(from, static_cast<uint32_t>(k), 0, others + bytes * static_cast<size_t>(from) + off * es, len * es, &reqs[q++]);
      ctx.send(to, static_cast<uint32_t>(k), 0, mine + off * es, len * es, &reqs[q++]);
    }
  }
  if (Status st = ctx.wait_all(reqs); !st.ok()) return st;
  const ReduceOp red = op.reduce == ReduceOp::kAvg ? ReduceOp::kSum : op.reduce;
  char* out = ctx.out(0);
  kernels::reduce(op.out.dtype, red, out, others, others + bytes, n);
  for (int j = 2; j < p; ++j) kernels::reduce_inplace(op.out.dtype, red, out, others + bytes * static_cast<size_t>(j), n);
  if (op.reduce == ReduceOp::kAvg) kernels::scale_avg(op.out.dtype, out, n, p);
  ctx.slices_done(1);
  return Status();
}

Status recursive_doubling_allreduce(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  OneSlice one;
  if (!one.begin(ctx)) return Status();
  const auto [es, n, bytes, piece, pieces] = one;
  // The partner's partial, and this rank's (the input until the first reduction).
  char* theirs = static_cast<char*>(ctx.scratch(2 * bytes));
  char* partial = theirs + bytes;
  const char* mine = ctx.in(0);
  const ReduceOp red = op.reduce == ReduceOp::kAvg ? ReduceOp::kSum : op.reduce;
  std::span<Request> reqs = ctx.requests(2 * pieces);
  for (int d = 1, step = 0; d < p; d *= 2, ++step) {
    const int partner = r ^ d;
    size_t q = 0;
    for (size_t k = 0; k < pieces; ++k) {
      const size_t off = k * piece, len = std::min(piece, n - std::min(n, off));
      ctx.recv(partner, static_cast<uint32_t>(k), static_cast<uint16_t>(step), theirs + off * es, len * es, &reqs[q++]);
      ctx.send(partner, static_cast<uint32_t>(k), static_cast<uint16_t>(step), mine + off * es, len * es, &reqs[q++]);
    }
    // Both directions done: what this rank sent may now be overwritten.
    if (Status st = ctx.wait_all({reqs.data(), q}); !st.ok()) return st;
    // Partials go to scratch; the last reduction writes straight to the output.
    char* dst = 2 * d >= p ? ctx.out(0) : partial;
    const char* low = partner < r ? theirs : mine;
    const char* high = partner < r ? mine : theirs;
    kernels::reduce(op.out.dtype, red, dst, low, high, n);
    mine = dst;
  }
  if (op.reduce == ReduceOp::kAvg) kernels::scale_avg(op.out.dtype, ctx.out(0), n, p);
  ctx.slices_done(1);
  return Status();
}

}  // namespace

// Measured on 2 and 4 ranks (2 cores, TCP and UCX; README "Where the time
// goes"): above the small-data range, halving-doubling beats the ring at every
// size for power-of-two groups (1.15-3.2x at 4 ranks). In that range, power-of-
// two groups of 4 or more run recursive doubling: against direct 1.2-2.8x at
// 1-256 KiB on 4 ranks (TCP and UCX), 2.2-2.8x at 1-16 KiB on 8; against
// halving-doubling at 4 ranks, TCP 2.0-4.0x up to 32 KiB, 0.84-1.34x at 64 KiB,
// 0.48-0.66x from 128 KiB; UCX 0.81-1.6x up to 32 KiB, 1.3-2.0x at 64 KiB,
// 0.73-0.86x at 256 KiB. Its bytes per rank, log2(p) x N against halving-
// doubling's 2(p-1)/p x N, grow with the group, so its range shrinks:
// small_allreduce_bytes x 4/p, i.e. 64 KiB at 4 ranks, 32 KiB at 8. Other
// groups run direct up to small_allreduce_bytes (2 ranks: the same single
// exchange).
AllreduceAlgorithm allreduce_algorithm(const Op& op, int size, const Tuning& tuning) {
  const bool power_of_two = size > 1 && (size & (size - 1)) == 0;
  switch (tuning.allreduce) {
    case AllreduceAlgorithm::kAuto: {
      const size_t p = static_cast<size_t>(size), bytes = op.out.bytes();
      if (power_of_two && p > 2) {
        if (bytes <= tuning.small_allreduce_bytes * 4 / p) return AllreduceAlgorithm::kRecursiveDoubling;
      } else if (bytes <= tuning.small_allreduce_bytes) {
        return AllreduceAlgorithm::kDirect;
      }
      // Staging is p/2 pieces per window slot (the ring's is one): up to 16 ranks.
      return power_of_two && p <= 16 ? AllreduceAlgorithm::kHalvingDoubling : AllreduceAlgorithm::kRing;
    }
    case AllreduceAlgorithm::kHalvingDoubling:
      return power_of_two ? AllreduceAlgorithm::kHalvingDoubling : AllreduceAlgorithm::kRing;  // same slices
    case AllreduceAlgorithm::kRecursiveDoubling:
      return power_of_two ? AllreduceAlgorithm::kRecursiveDoubling : AllreduceAlgorithm::kDirect;  // one slice
    default:
      return tuning.allreduce;
  }
}

// Measured at 4 ranks (README): on TCP 1.04-1.99x the ring for allgather and
// up to 1.67x for reduce-scatter; on UCX mixed (0.59-1.48x), so there the ring
// stays. Above 16 ranks the halving reduce-scatter's staging (p/2 pieces per
// window slot) grows past what it saves.
bool blocks_by_doubling(int size, const Tuning& tuning) {
  const bool power_of_two = size > 1 && (size & (size - 1)) == 0;
  if (!power_of_two || size < 4 || tuning.allreduce == AllreduceAlgorithm::kRing) return false;
  if (tuning.allreduce == AllreduceAlgorithm::kHalvingDoubling) return true;
  return size <= 16 && tuning.doubling_blocks;
}

Status run_allreduce(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size();
  if (p == 1 || op.out.count == 0) {
    if (!op.in_place() && op.out.bytes() > 0) std::memcpy(ctx.out(0), ctx.in(0), op.out.bytes());
    ctx.slices_done(1);
    return Status();
  }
  switch (allreduce_algorithm(op, p, ctx.tuning())) {
    case AllreduceAlgorithm::kDirect: return direct_allreduce(ctx);
    case AllreduceAlgorithm::kHalvingDoubling: return halving_doubling_allreduce(ctx);
    case AllreduceAlgorithm::kRecursiveDoubling: return recursive_doubling_allreduce(ctx);
    default: return ring_allreduce(ctx);
  }
}

}  // namespace rcoll
