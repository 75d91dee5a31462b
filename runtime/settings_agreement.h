// The settings exchange at creation, as a unit: what each rank publishes (the
// settings every rank must share, and its liveness channel's address), the
// reduction the combiner makes of every rank's (do they agree; the addresses,
// packed), and what a rank reads of it. Pure: the store is the caller's
// (CommunicatorImpl::agree_settings), and the scale harness runs the same
// code (bench/scale_harness.cc).
#pragma once

#include <string>
#include <vector>

#include "base/packed_values.h"
#include "rcoll/communicator.h"
#include "rcoll/status.h"
#include "rcoll/store.h"

namespace rcoll {

class TransportChain;

// What every rank must set alike, as "name=value" lines.
// `socket_buffer_bytes`: as used (the default where the option is 0).
std::string settings_every_rank_shares(const Options& o, const TransportChain& chain,
                                       size_t socket_buffer_bytes);

// One rank's value: its settings and its liveness address.
Bytes settings_value(const std::string& settings, const std::string& liveness_address);

// The combiner's reduction of every rank's value, in rank order: whether they
// agree (or the first rank that differs, worded, or carries no address) and
// every rank's liveness address, packed. O(P) bytes of addresses, about 7
// each; the settings themselves once.
Bytes reduce_settings(const std::vector<Bytes>& values);

// What `rank` reads of the reduction: every rank's liveness address, or
// kInvalidArgument naming how the ranks' settings differ (no rank creates the
// communicator), or kStore for a reduction that does not decode.
Result<PackedValues> read_settings(const Bytes& reduced, int rank, int size);

}  // namespace rcoll
