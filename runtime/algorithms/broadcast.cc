// Pipelined chain broadcast. Ranks form a chain starting at the root; the
// buffer is cut into pieces (slices), and every rank forwards piece k to the
// next rank as soon as it has arrived, while pieces k+1... are still coming in.
// Time is about (p - 2 + pieces) piece transfers, close to one full-buffer
// transfer for large data, plus one acknowledgement back up the chain.
//
// Direct broadcast (one piece, more than 2 ranks): the root sends the piece to
// every rank, every rank acknowledges to the root, and the root then tells
// every rank that all have it. Three message latencies whatever the group
// size, where the chain takes 2(p-1).
//
// Either way a rank finishes only once every rank has the whole buffer, so a
// finished broadcast never has to be re-run for a peer (the ledger relies on
// it); except an eager broadcast (broadcast_is_eager), which skips the
// acknowledgements and is kept in the root's replay log instead.
#include <algorithm>
#include <vector>

#include "runtime/algorithms/context.h"

namespace rcoll {

namespace {

Status direct_broadcast(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank(), root = op.root;
  const size_t bytes = op.out.count * op.element_size();
  std::vector<Request> reqs(static_cast<size_t>(p));
  if (ctx.first_slice() < ctx.end_slice(1)) {
    ctx.before_window(0, 1);
    if (r == root) {
      size_t k = 0;
      for (int q = 0; q < p; ++q)
        if (q != root) ctx.send(q, 0, 0, ctx.in(0), bytes, &reqs[k++]);
      if (Status st = ctx.wait_all({reqs.data(), k}); !st.ok()) return st;
    } else {
      ctx.recv(root, 0, 0, ctx.out(0), bytes, &reqs[0]);
      if (Status st = ctx.wait(reqs[0]); !st.ok()) return st;
    }
    ctx.slices_done(1);
  }
  if (broadcast_is_eager(op)) return Status();
  constexpr uint16_t kAck = 1, kAllHaveIt = 2;
  if (r == root) {
    size_t k = 0;
    for (int q = 0; q < p; ++q)
      if (q != root) ctx.recv(q, 1, kAck, nullptr, 0, &reqs[k++]);
    if (Status st = ctx.wait_all({reqs.data(), k}); !st.ok()) return st;
    k = 0;
    for (int q = 0; q < p; ++q)
      if (q != root) ctx.send(q, 1, kAllHaveIt, nullptr, 0, &reqs[k++]);
    return ctx.wait_all({reqs.data(), k});
  }
  ctx.send(root, 1, kAck, nullptr, 0, &reqs[0]);
  ctx.recv(root, 1, kAllHaveIt, nullptr, 0, &reqs[1]);
  return ctx.wait_all({reqs.data(), 2});
}

}  // namespace

bool broadcast_is_eager(const Op& op) {
  return op.kind == OpKind::kBroadcast && op.out.count * op.element_size() <= kEagerBroadcastBytes &&
         op.match_seq % kEagerBroadcastRun != 0;
}

size_t broadcast_piece_bytes(int size, const Tuning& tuning) {
  return size == 2 ? std::max(tuning.piece_bytes, tuning.stream_piece_bytes) : tuning.piece_bytes;
}

bool broadcast_is_direct(const Op& op, int size, const Tuning& tuning) {
  const size_t piece = std::max<size_t>(1, tuning.piece_bytes / op.element_size());
  return size > 2 && op.out.count > 0 && op.out.count <= piece;
}

Status run_broadcast(AlgoContext& ctx) {
  const Op& op = ctx.op();
  const int p = ctx.size(), r = ctx.rank();
  const size_t es = op.element_size(), n = op.out.count;
  const size_t piece = std::max<size_t>(1, broadcast_piece_bytes(p, ctx.tuning()) / es);
  const size_t pieces = std::max<size_t>(1, (n + piece - 1) / piece);
  if (p == 1 || n == 0) {
    ctx.slices_done(pieces);
    return Status();
  }
  if (broadcast_is_direct(op, p, ctx.tuning())) return direct_broadcast(ctx);
  const int pos = (r - op.root + p) % p;
  const int prev = (r - 1 + p) % p, next = (r + 1) % p;
  const bool first_in_chain = pos == 0, last = pos == p - 1;
  const size_t window = ctx.window();
  std::vector<Request> sends(window), recvs(window);
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
  if (broadcast_is_eager(op)) return Status();
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
