// Ring allgather. Each rank's block is cut into pieces; slice k is piece k of
// every block. At step s a rank forwards block (r - s) to its right neighbour
// and receives block (r - s - 1) from its left one, straight into the output
// (no staging copy). A window of slices moves in lockstep.
//
// Recursive doubling (power-of-two groups, blocks_by_doubling()): at step s a
// rank swaps all the blocks it has (2^s of them, piece k of each) with rank
// r ^ 2^s. The same frames as the ring in log2 p steps instead of p-1. When a
// block is one piece, the blocks a rank has lie back to back in the output
// and go as one frame per step: 4 ranks on 2 CPUs (TCP, 5 alternating rounds
// of 500 iterations) 1.20-1.29x at 4-64 KiB against a frame per block.
#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/algorithms/context.h"

namespace rcoll {

namespace {

// Pieces of the op's element size.
size_t allgather_piece(const AlgoContext& ctx) {
  return std::max<size_t>(
      1, allgather_piece_bytes(ctx.size(), ctx.tuning()) / ctx.op().element_size());
}

// Whether output blocks [first, first + count) lie back to back (always,
// unless a replay redirected some of them elsewhere).
bool back_to_back(const AlgoContext& ctx, int first, int count, size_t n, size_t es) {
  const char* base = ctx.out(static_cast<size_t>(first) * n);
  for (int j = 1; j < count; ++j)
    if (ctx.out(static_cast<size_t>(first + j) * n) != base + static_cast<size_t>(j) * n * es) return false;
  return true;
}

// Recursive doubling for blocks of one piece: step s swaps the 2^s blocks
// each side has as one frame (staged through scratch where a replay split
// them).
Status doubling_allgather_whole_blocks(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const size_t es = op.element_size(), n = op.in.count;
  if (ctx.first_slice() >= ctx.end_slice(1)) return Status();
  ctx.before_window(0, 1);
  const size_t mine = n * static_cast<size_t>(r);
  if (ctx.out(mine) != ctx.in(0)) std::memcpy(ctx.out(mine), ctx.in(0), n * es);
  std::span<Request> reqs = ctx.requests(2);
  int lo = r, len = 1;  // the blocks this rank has: [lo, lo + len)
  for (int s = 0; (1 << s) < p; ++s) {
    const int d = 1 << s, partner = r ^ d;
    const int theirs = (r & d) ? lo - len : lo + len;
    const size_t bytes = static_cast<size_t>(len) * n * es;
    const bool send_direct = back_to_back(ctx, lo, len, n, es), recv_direct = back_to_back(ctx, theirs, len, n, es);
    char* stage = send_direct && recv_direct ? nullptr : static_cast<char*>(ctx.scratch(2 * bytes));
    const char* src = ctx.out(static_cast<size_t>(lo) * n);
    if (!send_direct) {
      for (int j = 0; j < len; ++j) std::memcpy(stage + static_cast<size_t>(j) * n * es, ctx.out(static_cast<size_t>(lo + j) * n), n * es);
      src = stage;
    }
    char* dst = recv_direct ? ctx.out(static_cast<size_t>(theirs) * n) : stage + bytes;
    ctx.recv(partner, 0, static_cast<uint16_t>(s), dst, bytes, &reqs[0]);
    ctx.send(partner, 0, static_cast<uint16_t>(s), src, bytes, &reqs[1]);
    if (Status st = ctx.wait_all(reqs); !st.ok()) return st;
    if (!recv_direct) {
      for (int j = 0; j < len; ++j) std::memcpy(ctx.out(static_cast<size_t>(theirs + j) * n), dst + static_cast<size_t>(j) * n * es, n * es);
    }
    lo = std::min(lo, theirs);
    len *= 2;
  }
  ctx.slices_done(1);
  return Status();
}

Status doubling_allgather(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const size_t es = op.element_size();
  const size_t n = op.in.count;
  const size_t piece = allgather_piece(ctx);
  const size_t slices = std::max<size_t>(1, (n + piece - 1) / piece);
  if (slices == 1) return doubling_allgather_whole_blocks(ctx);
  const size_t window = ctx.window();
  const size_t most = window * static_cast<size_t>(p / 2);  // frames each way in one step
  std::span<Request> sends = ctx.requests(most), recvs = ctx.requests(most);
  for (size_t first = ctx.first_slice(); first < ctx.end_slice(slices); first += window) {
    const size_t w = std::min(window, ctx.end_slice(slices) - first);
    ctx.before_window(first, first + w);
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (first + k) * piece, len = std::min(piece, n - off);
      const size_t mine = n * static_cast<size_t>(r);
      if (ctx.out(mine + off) != ctx.in(off)) std::memcpy(ctx.out(mine + off), ctx.in(off), len * es);
    }
    int lo = r, len = 1;  // the blocks this rank has: [lo, lo + len)
    for (int s = 0; (1 << s) < p; ++s) {
      const int d = 1 << s, partner = r ^ d;
      const int theirs = (r & d) ? lo - len : lo + len;
      size_t q = 0;
      for (size_t k = 0; k < w; ++k) {
        const size_t off = (first + k) * piece, count = std::min(piece, n - off);
        const auto chunk = static_cast<uint32_t>(first + k);
        for (int j = 0; j < len; ++j) {
          const size_t in_block = static_cast<size_t>(theirs + j) * n, out_block = static_cast<size_t>(lo + j) * n;
          ctx.recv(partner, chunk, static_cast<uint16_t>(s), ctx.out(in_block + off), count * es, &recvs[q]);
          ctx.send(partner, chunk, static_cast<uint16_t>(s), ctx.out(out_block + off), count * es, &sends[q]);
          ++q;
        }
      }
      if (Status st = ctx.wait_all({recvs.data(), q}); !st.ok()) return st;
      if (Status st = ctx.wait_all({sends.data(), q}); !st.ok()) return st;
      lo = std::min(lo, theirs);
      len *= 2;
    }
    ctx.slices_done(first + w);
  }
  return Status();
}

}  // namespace

size_t allgather_piece_bytes(int size, const Tuning& tuning) {
  return size == 2 ? std::max(tuning.piece_bytes, tuning.stream_piece_bytes) : tuning.piece_bytes;
}

Status run_allgather(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  const size_t es = op.element_size();
  const size_t n = op.in.count;  // per-rank block
  const size_t mine = n * static_cast<size_t>(r);
  const size_t piece = allgather_piece(ctx);
  const size_t slices = std::max<size_t>(1, (n + piece - 1) / piece);
  const size_t window = ctx.window();
  if (n == 0) {
    ctx.slices_done(slices);
    return Status();
  }
  if (blocks_by_doubling(p, ctx.tuning())) return doubling_allgather(ctx);
  const size_t slots = std::min(window, slices);  // a window uses at most this many
  std::span<Request> sends = ctx.requests(slots), recvs = ctx.requests(slots);
  for (size_t first = ctx.first_slice(); first < ctx.end_slice(slices); first += window) {
    const size_t w = std::min(window, ctx.end_slice(slices) - first);
    ctx.before_window(first, first + w);
    // This rank's own pieces go to its slot of the output (a no-op in place).
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (first + k) * piece, len = std::min(piece, n - off);
      if (ctx.out(mine + off) != ctx.in(off)) std::memcpy(ctx.out(mine + off), ctx.in(off), len * es);
    }
    for (int s = 0; s < p - 1; ++s) {
      const size_t send_block = static_cast<size_t>(((r - s) % p + p) % p) * n;
      const size_t recv_block = static_cast<size_t>(((r - s - 1) % p + p) % p) * n;
      for (size_t k = 0; k < w; ++k) {
        const size_t off = (first + k) * piece, len = std::min(piece, n - off);
        const auto chunk = static_cast<uint32_t>(first + k);
        ctx.recv(left, chunk, static_cast<uint16_t>(s), ctx.out(recv_block + off), len * es, &recvs[k]);
        ctx.send(right, chunk, static_cast<uint16_t>(s), ctx.out(send_block + off), len * es, &sends[k]);
      }
      if (Status st = ctx.wait_all({recvs.data(), w}); !st.ok()) return st;
      if (Status st = ctx.wait_all({sends.data(), w}); !st.ok()) return st;
    }
    ctx.slices_done(first + w);
  }
  return Status();
}

}  // namespace rcoll
