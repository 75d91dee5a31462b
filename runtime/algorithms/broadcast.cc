// Pipelined chain broadcast. Ranks form a chain starting at the root; the
// buffer is cut into pieces, and every rank forwards piece k to the next rank
// as soon as it has arrived, while pieces k+1... are still coming in. Time is
// about (p - 2 + pieces) piece transfers, close to one full-buffer transfer for
// large data.
#include <algorithm>
#include <vector>

#include "runtime/algorithms/context.h"

namespace rcoll {

Status run_broadcast(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const size_t es = op.element_size(), n = op.out.count;
  if (p == 1 || n == 0) return Status();
  const int pos = (r - op.root + p) % p;
  const int prev = (r - 1 + p) % p, next = (r + 1) % p;
  const bool first = pos == 0, last = pos == p - 1;
  char* buf = static_cast<char*>(op.out.data);

  const size_t piece = ctx.piece_elements();
  const size_t pieces = (n + piece - 1) / piece;
  const size_t window = static_cast<size_t>(std::max(1, ctx.tuning().window)) * 2;
  std::vector<Request> sends(window), recvs(window);
  for (size_t start = 0; start < pieces; start += window) {
    const size_t w = std::min(window, pieces - start);
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (start + k) * piece, len = std::min(piece, n - off);
      if (!first) ctx.recv(prev, static_cast<uint32_t>(start + k), 0, buf + off * es, len * es, &recvs[k]);
    }
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (start + k) * piece, len = std::min(piece, n - off);
      if (!first) {
        if (Status st = ctx.wait(recvs[k]); !st.ok()) return st;
      }
      if (!last) ctx.send(next, static_cast<uint32_t>(start + k), 0, buf + off * es, len * es, &sends[k]);
    }
    if (!last) {
      if (Status st = ctx.wait_all({sends.data(), w}); !st.ok()) return st;
    }
  }
  return Status();
}

}  // namespace rcoll
