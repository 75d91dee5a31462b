// Send and receive: the buffer travels as a stream of pieces that the receiver
// lands directly in its buffer. Completion of a send means the bytes were handed
// to the transport, as with MPI_Send's buffered case.
#include <algorithm>
#include <vector>

#include "runtime/algorithms/context.h"

namespace rcoll {
namespace {

Status transfer(AlgoContext& ctx, bool sending) {
  const Op& op = ctx.op();
  const size_t es = op.element_size(), n = op.out.count;
  char* buf = static_cast<char*>(op.out.data);
  const size_t piece = ctx.piece_elements();
  const size_t pieces = std::max<size_t>(1, (n + piece - 1) / piece);  // an empty message is one frame
  std::vector<Request> reqs(pieces);
  for (size_t k = 0; k < pieces; ++k) {
    const size_t off = k * piece, len = std::min(piece, n - std::min(n, off));
    if (sending) {
      ctx.send(op.peer, static_cast<uint32_t>(k), 0, buf + off * es, len * es, &reqs[k]);
    } else {
      ctx.recv(op.peer, static_cast<uint32_t>(k), 0, buf + off * es, len * es, &reqs[k]);
    }
  }
  return ctx.wait_all(reqs);
}

}  // namespace

Status run_send(AlgoContext& ctx) { return transfer(ctx, true); }
Status run_recv(AlgoContext& ctx) { return transfer(ctx, false); }

}  // namespace rcoll
