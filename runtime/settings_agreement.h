// The settings exchange at creation, as a unit: what each rank publishes (the
// settings every rank must share, and its liveness channel's address), the
// reductions the combiner makes of every rank's (do they agree; every
// liveness address, packed, read on first use only), and what a rank reads.
// Pure: the store is the caller's (CommunicatorImpl::agree_settings), and the
// scale harness runs the same code (bench/scale_harness.cc).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/address_book.h"
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
// agree, or the first rank that differs (worded), or one whose value carries
// no liveness address. The settings themselves are read once, by the combiner.
Bytes reduce_settings(const std::vector<Bytes>& values);

// What `rank` reads of that reduction: OK when every rank agrees, else
// kInvalidArgument naming how the ranks' settings differ (no rank creates the
// communicator), or kStore for a reduction that does not decode.
Status read_settings(const Bytes& reduced, int rank, int size);

// The liveness address a rank's value carries ("" where none).
std::string liveness_address(const Bytes& value);

// The exchange's second reduction (StoreExchange's `more`): every rank's
// liveness address, packed (about 7 bytes each), read only by a rank whose
// liveness channel dials a rank that is not one of its overlay partners.
Bytes pack_liveness_addresses(const std::vector<Bytes>& values);

// Those reads, each within `within`: every rank's liveness address from the
// store (one request), or one rank's (its settings value).
AddressBook::FetchAll fetch_liveness_addresses(std::shared_ptr<Store> store, int size,
                                               std::chrono::milliseconds within);
AddressBook::FetchOne fetch_liveness_address(std::shared_ptr<Store> store, int size,
                                             std::chrono::milliseconds within);

// The ranks' liveness addresses as a rank knows them after the exchange: its
// own, its overlay `partners`' (their `values`, picked with the verdict, in
// the same order), the rest through the fetches on first use.
AddressBook liveness_book(int rank, int size, const std::string& mine,
                          const std::vector<int>& partners, const std::vector<Bytes>& values,
                          AddressBook::FetchAll fetch_all,
                          AddressBook::FetchOne fetch_one = nullptr);

}  // namespace rcoll
