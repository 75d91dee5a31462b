// Links against an installed rcoll and runs one single-rank allreduce.
#include <rcoll/rcoll.h>

#include <cstdio>
#include <vector>

int main() {
  rcoll::Options options;
  options.rank = 0;
  options.world_size = 1;
  rcoll::Communicator comm = rcoll::Communicator::create(options);
  std::vector<int32_t> v{1, 2, 3};
  comm.allreduce(rcoll::Buffer::of(v), rcoll::ReduceOp::kSum);
  std::printf("rcoll %s: consumer ok, sum of one rank = %d %d %d\n", rcoll::version_string(), v[0], v[1], v[2]);
  return v == std::vector<int32_t>{1, 2, 3} ? 0 : 1;
}
