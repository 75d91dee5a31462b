// Every key rcoll writes in the rendezvous store, in one place. All live under
// the communicator's namespace "rcoll/<name>/<instance>/" (and, after a
// shrink, "g<generation>/" below that): several communicators share a store.
//
//   settings/<rank>                          what every rank must set alike (creation)
//   connect/<epoch>/<transport>/<rank>       the link timing this rank measured on epoch's data
//                                            plane, or that it did not connect (link_model.h)
//   connect/<epoch>/<transport>/failed       the first rank's reason it did not
//   tcp/<epoch>/<rank>, ucx/<epoch>/<rank>   a transport's address for the epoch (TCP: kept, with
//                                            its listener, while every rank keeps its own)
//   tune/<epoch>/again/<rank>                timed again, bandwidth too (a link's latency moved)
//   liveness/<rank>                          the heartbeat channel's address
//   epoch/<epoch>/failed                     someone failed the epoch (why): peers abort at once
//   epoch/<epoch>/fatal                      a failure no recovery fixes (store::FatalNotice)
//   epoch/<epoch>/where/<rank>               where this rank was when the epoch failed for good
//   recovery/<epoch>/ledger/<rank>           this rank's ballot for the next epoch (store::Ballot),
//                                            its ledger (runtime/ledger.h) and the TCP exchange
//                                            whose listener it keeps, as three values
//   nccl/<epoch>/id, arrived/<rank>, outcome/<rank>, gave-up
//                                            the epoch's NCCL communicator (runtime/nccl_ops.cc)
//   shrink/<generation>/alive/<rank>         a survivor of a shrink
//   shrink/<generation>/outcome/<rank>       where its collectives stood
//   (CommunicatorImpl::ShrinkStand)
#pragma once

#include <cstdint>
#include <string>

namespace rcoll::keys {

inline std::string of_rank(const std::string& prefix, int rank) { return prefix + std::to_string(rank); }

inline std::string settings() { return "settings/"; }
inline std::string connect(uint32_t epoch, const std::string& transport) {
  return "connect/" + std::to_string(epoch) + "/" + transport + "/";
}
inline std::string connect_failed(uint32_t epoch, const std::string& transport) { return connect(epoch, transport) + "failed"; }
inline std::string transport_addresses(const std::string& transport, uint32_t epoch) {
  return transport + "/" + std::to_string(epoch) + "/";
}
inline std::string tune(uint32_t epoch) { return "tune/" + std::to_string(epoch) + "/"; }
inline std::string tune_again(uint32_t epoch) { return tune(epoch) + "again/"; }
inline std::string liveness() { return "liveness/"; }

inline std::string epoch_failed(uint32_t epoch) { return "epoch/" + std::to_string(epoch) + "/failed"; }
inline std::string epoch_fatal(uint32_t epoch) { return "epoch/" + std::to_string(epoch) + "/fatal"; }
inline std::string epoch_where(uint32_t epoch) { return "epoch/" + std::to_string(epoch) + "/where/"; }

inline std::string recovery_ledgers(uint32_t epoch) { return "recovery/" + std::to_string(epoch) + "/ledger/"; }

inline std::string nccl(uint32_t epoch) { return "nccl/" + std::to_string(epoch) + "/"; }
inline std::string nccl_id(uint32_t epoch) { return nccl(epoch) + "id"; }
inline std::string nccl_arrived(uint32_t epoch) { return nccl(epoch) + "arrived/"; }
inline std::string nccl_outcomes(uint32_t epoch) { return nccl(epoch) + "outcome/"; }
inline std::string nccl_gave_up(uint32_t epoch) { return nccl(epoch) + "gave-up"; }

inline std::string shrink_alive(int generation) { return "shrink/" + std::to_string(generation) + "/alive/"; }
inline std::string shrink_outcome(int generation) {
  return "shrink/" + std::to_string(generation) + "/outcome/";
}

}  // namespace rcoll::keys
