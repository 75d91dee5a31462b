// Communicator's alltoall entry points (kept apart from communicator.cc so the
// op can be added without touching the facade of the other collectives).
#include "rcoll/communicator.h"
#include "runtime/communicator_impl.h"

namespace rcoll {

namespace {

Op alltoall_op(Buffer in, Buffer out, OpOptions o) {
  Op op;
  op.kind = OpKind::kAlltoall;
  op.in = in;
  op.out = out;
  op.options = o;
  return op;
}

}  // namespace

Work Communicator::alltoall_async(Buffer in, Buffer out, OpOptions o) { return impl_->submit(alltoall_op(in, out, o)); }

void Communicator::alltoall(Buffer in, Buffer out, OpOptions o) {
  throw_if_error(impl_->submit(alltoall_op(in, out, o), CommunicatorImpl::Issue::kHereIfIdle).wait());
}

}  // namespace rcoll
