// Communicator's alltoall entry points (kept apart from communicator.cc so the
// op can be added without touching the facade of the other collectives).
#include "rcoll/communicator.h"
#include "runtime/communicator_impl.h"

namespace rcoll {

Work Communicator::alltoall_async(Buffer in, Buffer out, OpOptions o) {
  Op op;
  op.kind = OpKind::kAlltoall;
  op.in = in;
  op.out = out;
  op.options = o;
  return impl_->submit(std::move(op));
}

void Communicator::alltoall(Buffer in, Buffer out, OpOptions o) { throw_if_error(alltoall_async(in, out, o).wait()); }

}  // namespace rcoll
