// Ring reduce-scatter. Input block j is what this rank contributes to rank j's
// result. At step s a rank sends its running partial sum of block (r - s - 1)
// to the right and receives the left neighbour's partial of block (r - s - 2),
// adds its own input block to it, and passes it on; after p-1 steps the partial
// that arrives is block r, complete, and is written straight to the output.
// Partials live in a double-buffered staging area (the input is never written).
//
// Recursive halving (power-of-two groups, blocks_by_doubling()): at step s a
// rank holds partials of 2d blocks (d = p / 2^(s+1)), sends the half it will
// not own to rank r ^ d and adds the partner's partials of the other half to
// its own. After log2 p steps (the ring takes p-1) it holds block r.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu_reduce.h"
#include "runtime/algorithms/context.h"

namespace rcoll {

namespace {

Status halving_reduce_scatter(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const size_t es = op.element_size();
  const size_t n = op.out.count;
  const ReduceOp red = op.reduce == ReduceOp::kAvg ? ReduceOp::kSum : op.reduce;
  const size_t piece = ctx.piece_elements();
  const size_t slices = std::max<size_t>(1, (n + piece - 1) / piece);
  const size_t window = ctx.window();
  const size_t half = static_cast<size_t>(p / 2);
  // Per window slot: the partials of the half kept at step 0, and receive
  // buffers, each at most a piece and never more than the op's block.
  const size_t stride = std::min(piece, n);
  char* scratch =
      static_cast<char*>(ctx.scratch(std::min(window, slices) * 2 * half * stride * es));
  const int kept0 = (r & (p / 2)) ? p / 2 : 0;  // first block of the half kept at step 0
  auto partial = [&](size_t k, int b) {
    return scratch + ((k * 2) * half + static_cast<size_t>(b - kept0)) * stride * es;
  };
  auto recv_buf = [&](size_t k, int j) {
    return scratch + ((k * 2 + 1) * half + static_cast<size_t>(j)) * stride * es;
  };
  auto block = [&](int b, size_t off) { return ctx.in(static_cast<size_t>(b) * n + off); };
  std::span<Request> sends = ctx.requests(window * half), recvs = ctx.requests(window * half);
  for (size_t first = ctx.first_slice(); first < ctx.end_slice(slices); first += window) {
    const size_t w = std::min(window, ctx.end_slice(slices) - first);
    ctx.before_window(first, first + w);
    int lo = 0;  // this rank holds partials of blocks [lo, lo + 2d)
    for (int s = 0; (p >> (s + 1)) >= 1; ++s) {
      const int d = p >> (s + 1), partner = r ^ d;
      const int keep = (r & d) ? lo + d : lo, give = (r & d) ? lo : lo + d;
      const bool last = d == 1;
      size_t q = 0;
      for (size_t k = 0; k < w; ++k) {
        const size_t off = (first + k) * piece, len = std::min(piece, n - off);
        const auto chunk = static_cast<uint32_t>(first + k);
        for (int j = 0; j < d; ++j) {
          ctx.recv(partner, chunk, static_cast<uint16_t>(s), recv_buf(k, j), len * es, &recvs[q]);
          const char* src = s == 0 ? block(give + j, off) : partial(k, give + j);
          ctx.send(partner, chunk, static_cast<uint16_t>(s), src, len * es, &sends[q]);
          ++q;
        }
      }
      q = 0;
      for (size_t k = 0; k < w; ++k) {
        const size_t off = (first + k) * piece, len = std::min(piece, n - off);
        for (int j = 0; j < d; ++j, ++q) {
          if (Status st = ctx.wait(recvs[q]); !st.ok()) return st;
          const int b = keep + j;
          char* dst = last ? ctx.out(off) : partial(k, b);
          const char* mine = s == 0 ? block(b, off) : partial(k, b);
          kernels::reduce(op.out.dtype, red, dst, mine, recv_buf(k, j), len);
          if (last && op.reduce == ReduceOp::kAvg) kernels::scale_avg(op.out.dtype, dst, len, p);
        }
      }
      if (Status st = ctx.wait_all({sends.data(), q}); !st.ok()) return st;
      lo = keep;
    }
    ctx.slices_done(first + w);
  }
  return Status();
}

}  // namespace

Status run_reduce_scatter(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  const size_t es = op.element_size();
  const size_t n = op.out.count;  // per-rank block
  const ReduceOp red = op.reduce == ReduceOp::kAvg ? ReduceOp::kSum : op.reduce;
  const size_t piece = ctx.piece_elements();
  const size_t slices = std::max<size_t>(1, (n + piece - 1) / piece);
  const size_t window = ctx.window();
  if (n == 0 || p == 1) {
    if (n > 0 && ctx.first_slice() < slices) {
      const size_t off = ctx.first_slice() * piece;
      std::memcpy(ctx.out(off), ctx.in(off), (n - off) * es);
    }
    ctx.slices_done(slices);
    return Status();
  }
  if (blocks_by_doubling(p, ctx.tuning())) return halving_reduce_scatter(ctx);
  // Per window slot: one receive buffer and two partial-sum buffers, each at
  // most a piece and never more than the op's block.
  const size_t stride = std::min(piece, n);
  char* scratch = static_cast<char*>(ctx.scratch(std::min(window, slices) * 3 * stride * es));
  auto recv_buf = [&](size_t k) { return scratch + (k * 3) * stride * es; };
  auto partial = [&](size_t k, int s) { return scratch + (k * 3 + 1 + (s & 1)) * stride * es; };
  auto block = [&](int b, size_t off) { return ctx.in(static_cast<size_t>(b) * n + off); };

  std::span<Request> sends = ctx.requests(window), recvs = ctx.requests(window);
  for (size_t first = ctx.first_slice(); first < ctx.end_slice(slices); first += window) {
    const size_t w = std::min(window, ctx.end_slice(slices) - first);
    ctx.before_window(first, first + w);
    for (int s = 0; s < p - 1; ++s) {
      const int send_block = ((r - s - 1) % p + p) % p, recv_block = ((r - s - 2) % p + p) % p;
      for (size_t k = 0; k < w; ++k) {
        const size_t off = (first + k) * piece, len = std::min(piece, n - off);
        const auto chunk = static_cast<uint32_t>(first + k);
        ctx.recv(left, chunk, static_cast<uint16_t>(s), recv_buf(k), len * es, &recvs[k]);
        const char* src = s == 0 ? block(send_block, off) : partial(k, s - 1);
        ctx.send(right, chunk, static_cast<uint16_t>(s), src, len * es, &sends[k]);
      }
      for (size_t k = 0; k < w; ++k) {
        if (Status st = ctx.wait(recvs[k]); !st.ok()) return st;
        const size_t off = (first + k) * piece, len = std::min(piece, n - off);
        char* dst = s == p - 2 ? ctx.out(off) : partial(k, s);
        kernels::reduce(op.out.dtype, red, dst, block(recv_block, off), recv_buf(k), len);
        if (s == p - 2 && op.reduce == ReduceOp::kAvg) kernels::scale_avg(op.out.dtype, dst, len, p);
      }
      if (Status st = ctx.wait_all({sends.data(), w}); !st.ok()) return st;
    }
    ctx.slices_done(first + w);
  }
  return Status();
}

}  // namespace rcoll
