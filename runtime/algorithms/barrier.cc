// Dissemination barrier: in round k every rank signals rank r + 2^k and waits
// for rank r - 2^k. After ceil(log2 p) rounds every rank has (transitively)
// heard from every other, so none leaves before all have arrived. It moves no
// data, so a retry simply runs it again.
#include "runtime/algorithms/context.h"

namespace rcoll {

Status run_barrier(AlgoContext& ctx) {
  const int p = ctx.size(), r = ctx.rank();
  if (ctx.first_slice() >= ctx.end_slice(1)) return Status();
  uint16_t round = 0;
  for (int dist = 1; dist < p; dist *= 2, ++round) {
    Request send, recv;
    ctx.recv((r - dist + p) % p, 0, round, nullptr, 0, &recv);
    ctx.send((r + dist) % p, 0, round, nullptr, 0, &send);
    if (Status st = ctx.wait(recv); !st.ok()) return st;
    if (Status st = ctx.wait(send); !st.ok()) return st;
  }
  ctx.slices_done(1);
  return Status();
}

}  // namespace rcoll
