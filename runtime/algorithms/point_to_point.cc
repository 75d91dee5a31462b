// Send and receive: the buffer travels as a stream of pieces (slices) that the
// receiver lands directly in its buffer, a window at a time. A send completes
// when its bytes are handed to the transport (so send-then-recv on both sides
// of a pair works for messages the socket buffers hold, as with MPI); the
// runtime keeps a copy of its tail until a later recovery cannot need it.
#include <algorithm>
#include <vector>

#include "runtime/algorithms/context.h"

namespace rcoll {
namespace {

Status transfer(AlgoContext& ctx, bool sending) {
  const Op& op = ctx.op();
  const size_t es = op.element_size(), n = op.out.count;
  const size_t piece = ctx.piece_elements();
  const size_t pieces = std::max<size_t>(1, (n + piece - 1) / piece);  // an empty message is one frame
  const size_t window = ctx.window() * 2;
  // A window uses at most this many (a small message has one piece).
  std::span<Request> reqs = ctx.requests(std::min(window, pieces));
  for (size_t start = ctx.first_slice(); start < ctx.end_slice(pieces); start += window) {
    const size_t w = std::min(window, ctx.end_slice(pieces) - start);
    ctx.before_window(start, start + w);
    for (size_t k = 0; k < w; ++k) {
      const size_t off = (start + k) * piece, len = std::min(piece, n - std::min(n, off));
      if (sending) {
        ctx.send(op.peer, static_cast<uint32_t>(start + k), 0, ctx.in(off), len * es, &reqs[k]);
      } else {
        ctx.recv(op.peer, static_cast<uint32_t>(start + k), 0, ctx.out(off), len * es, &reqs[k]);
      }
    }
    if (Status st = ctx.wait_all({reqs.data(), w}); !st.ok()) return st;
    ctx.slices_done(start + w);
  }
  return Status();
}

}  // namespace

Status run_send(AlgoContext& ctx) { return transfer(ctx, true); }
Status run_recv(AlgoContext& ctx) { return transfer(ctx, false); }

}  // namespace rcoll
