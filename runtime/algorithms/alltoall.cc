// Pairwise-exchange alltoall. Block q of a rank's input goes to rank q and
// lands in block r of q's output. In step s (1 .. p-1) rank r sends to r + s
// and receives from r - s, so every step is a perfect matching and no rank
// waits on a peer that is busy with someone else; the own block is a local
// copy. Each block is cut into pieces; slice k is piece k of every block, and
// a window of slices goes through all p - 1 steps before the next window
// starts. Every slice needs every rank, so (as in a ring) no rank is more than
// a window ahead of the slowest, which is what the ledger's resume relies on.
#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/algorithms/context.h"

namespace rcoll {

Status run_alltoall(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const size_t es = op.element_size();
  const size_t n = op.out.count / static_cast<size_t>(p);  // elements per block
  const size_t piece = ctx.piece_elements();
  const size_t slices = std::max<size_t>(1, (n + piece - 1) / piece);
  if (n == 0) {
    ctx.slices_done(slices);
    return Status();
  }
  const size_t window = ctx.window();
  const size_t mine = n * static_cast<size_t>(r);
  std::span<Request> sends = ctx.requests(window), recvs = ctx.requests(window);
  for (size_t first = ctx.first_slice(); first < ctx.end_slice(slices); first += window) {
    const size_t w = std::min(window, ctx.end_slice(slices) - first);
    ctx.before_window(first, first + w);
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (first + k) * piece, len = std::min(piece, n - off);
      std::memcpy(ctx.out(mine + off), ctx.in(mine + off), len * es);
    }
    for (int s = 1; s < p; ++s) {
      const int to = (r + s) % p, from = (r - s + p) % p;
      const size_t send_block = static_cast<size_t>(to) * n, recv_block = static_cast<size_t>(from) * n;
      for (size_t k = 0; k < w; ++k) {
        const size_t off = (first + k) * piece, len = std::min(piece, n - off);
        const auto chunk = static_cast<uint32_t>(first + k);
        ctx.recv(from, chunk, static_cast<uint16_t>(s), ctx.out(recv_block + off), len * es, &recvs[k]);
        ctx.send(to, chunk, static_cast<uint16_t>(s), ctx.in(send_block + off), len * es, &sends[k]);
      }
      if (Status st = ctx.wait_all({recvs.data(), w}); !st.ok()) return st;
      if (Status st = ctx.wait_all({sends.data(), w}); !st.ok()) return st;
    }
    ctx.slices_done(first + w);
  }
  return Status();
}

}  // namespace rcoll
