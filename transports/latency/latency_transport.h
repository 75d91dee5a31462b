// A transport that delivers every received frame a fixed time after it
// arrived: a long link (one-way propagation delay, bandwidth unchanged) on a
// host whose kernel has no netem. Fault injection only (RCOLL_INJECT
// "link-latency:us=N"): it is how adaptive chunking is tested and measured.
#pragma once

#include <memory>

#include "base/deadline.h"
#include "transports/transport.h"

namespace rcoll {

std::unique_ptr<Transport> with_link_latency(std::unique_ptr<Transport> inner, Clock::duration one_way);

}  // namespace rcoll
