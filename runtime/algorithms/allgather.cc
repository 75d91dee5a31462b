// Ring allgather. Each rank's block is cut into pieces; slice k is piece k of
// every block. At step s a rank forwards block (r - s) to its right neighbour
// and receives block (r - s - 1) from its left one, straight into the output
// (no staging copy). A window of slices moves in lockstep.
#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/algorithms/context.h"

namespace rcoll {

Status run_allgather(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  const size_t es = op.element_size();
  const size_t n = op.in.count;  // per-rank block
  char* out = static_cast<char*>(op.out.data);
  char* mine = out + n * es * static_cast<size_t>(r);
  if (n > 0 && op.in.data != mine) std::memcpy(mine, op.in.data, n * es);
  if (p == 1 || n == 0) return Status();

  const size_t piece = ctx.piece_elements();
  const size_t slices = (n + piece - 1) / piece;
  const size_t window = static_cast<size_t>(std::max(1, ctx.tuning().window));
  std::vector<Request> sends(window), recvs(window);
  for (size_t first = 0; first < slices; first += window) {
    const size_t w = std::min(window, slices - first);
    for (int s = 0; s < p - 1; ++s) {
      const int send_block = ((r - s) % p + p) % p, recv_block = ((r - s - 1) % p + p) % p;
      for (size_t k = 0; k < w; ++k) {
        const size_t off = (first + k) * piece, len = std::min(piece, n - off);
        const auto chunk = static_cast<uint32_t>(first + k);
        ctx.recv(left, chunk, static_cast<uint16_t>(s), out + (static_cast<size_t>(recv_block) * n + off) * es, len * es, &recvs[k]);
        ctx.send(right, chunk, static_cast<uint16_t>(s), out + (static_cast<size_t>(send_block) * n + off) * es, len * es, &sends[k]);
      }
      if (Status st = ctx.wait_all({recvs.data(), w}); !st.ok()) return st;
      if (Status st = ctx.wait_all({sends.data(), w}); !st.ok()) return st;
    }
  }
  return Status();
}

}  // namespace rcoll
