// What the recovery writes in the store besides ledgers (runtime/ledger.h), as
// types with one encoding each: a rank's ballot for the next epoch, and the
// notice of a failure no recovery fixes. Decoding never trusts the bytes: a
// malformed value is nullopt, which callers treat as "not readable".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "rcoll/status.h"
#include "rcoll/store.h"

namespace rcoll::store {

// A rank's vote in a recovery (with its ledger: keys::recovery_ledgers): the transport chain
// index it wants for the next epoch, and whether (and why) every rank should
// stop using NCCL for device collectives.
struct Ballot {
  uint8_t transport = 0;
  bool drop_nccl = false;
  std::string why;  // the reason to drop NCCL
};
Bytes encode(const Ballot& b);
std::optional<Ballot> decode_ballot(const Bytes& bytes);

// A failure no recovery can fix (keys::epoch_fatal): its code, the other
// party of the failure as the reporter saw it, the reporter, and the message.
struct FatalNotice {
  ErrorCode code = ErrorCode::kInternal;
  int peer = -1;
  int reporter = -1;
  std::string message;
};
std::string encode(const FatalNotice& f);
std::optional<FatalNotice> decode_fatal(const std::string& text);

}  // namespace rcoll::store
