// At creation, before any transport: the settings every rank must share,
// compared across the ranks (CommunicatorImpl::agree_settings).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "base/log.h"
#include "base/store_exchange.h"
#include "runtime/communicator_impl.h"
#include "runtime/settings_agreement.h"
#include "runtime/store/call_deadline.h"
#include "runtime/store/keys.h"
#include "transports/tcp/mesh.h"
#include "transports/tcp/on_demand_links.h"

namespace rcoll {

namespace {

// Between a rank's settings and its liveness address in the exchanged value
// (settings are text lines: no NUL).
const std::string kLivenessMark("\0liveness ", 10);

}  // namespace

// What every rank must set alike, as "name=value" lines. Each of these decides
// which frames a rank sends or expects (chunk size, window, algorithms, the
// transports and their order), how long a sent frame is kept for a replay
// (socket buffers), or whether every rank takes part in a recovery or a
// shrink. Options a rank may set for itself (timeouts, backup memory, the
// interface, congestion control) are not here.
// `socket_buffer_bytes`: as used (the default where the option is 0).
std::string settings_every_rank_shares(const Options& o, const TransportChain& chain,
                                       size_t socket_buffer_bytes) {
  std::string order;
  for (const std::string& t : chain.order()) order += (order.empty() ? "" : ",") + t;
  return "chunk_bytes (RCOLL_CHUNK_BYTES)=" + std::to_string(o.chunk_bytes) +
         "\npipeline_depth (RCOLL_PIPELINE_DEPTH)=" + std::to_string(o.pipeline_depth) +
         "\nsocket_buffer_bytes (RCOLL_SOCKET_BUFFER_BYTES)=" +
         std::to_string(socket_buffer_bytes) +
         "\nallreduce_algorithm (RCOLL_ALLREDUCE_ALGO)=" + algorithm_name(o.allreduce_algorithm) +
         "\nbroadcast_algorithm (RCOLL_BROADCAST_ALGO)=" + algorithm_name(o.broadcast_algorithm) +
         "\nsmall_allreduce_bytes=" + std::to_string(o.small_allreduce_bytes) +
         "\nrecovery (RCOLL_RECOVERY)=" + std::to_string(o.recovery ? 1 : 0) +
         "\nshrink_on_death (RCOLL_SHRINK)=" + std::to_string(o.shrink_on_death ? 1 : 0) +
         "\nnccl_confirm_every (RCOLL_NCCL_CONFIRM_EVERY)=" + std::to_string(o.nccl_confirm_every) +
         "\nheartbeats_to_all (RCOLL_HEARTBEATS_TO_ALL)=" +
         std::to_string(o.heartbeats_to_all ? 1 : 0) +
         // A neighbour judges silence by its own budget and tells every rank:
         // a rank heartbeating at a longer budget's interval would be called
         // silent by its neighbours, everywhere.
         "\nliveness_budget (RCOLL_LIVENESS_MS)=" + std::to_string(o.liveness_budget.count()) +
         "\ntransports (RCOLL_TRANSPORT, RCOLL_TRANSPORTS)=" + order +
         (chain.nccl() ? ",nccl for device buffers" : "");
}

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
    out.push_back(text.substr(start, end - start));
  out.push_back(text.substr(start));
  return out;
}

// Every setting in which rank `first`'s settings (`other`) differ from rank
// 0's (`zero`), worded for the error.
std::string describe_difference(const std::string& zero, const std::string& other, int first) {
  const std::vector<std::string> a = lines_of(zero), b = lines_of(other);
  std::string what;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "", y = i < b.size() ? b[i] : "";
    if (x == y) continue;
    const size_t eq = x.rfind('=');
    const std::string name = eq == std::string::npos ? x : x.substr(0, eq);
    what += what.empty() ? "" : "; ";
    if (eq != std::string::npos && y.compare(0, name.size() + 1, name + "=") == 0) {
      what += name + " is " + x.substr(eq + 1) + " on rank 0 but " + y.substr(name.size() + 1) +
              " on rank " + std::to_string(first);
    } else {
      what += "rank 0 has '" + x + "' where rank " + std::to_string(first) + " has '" + y +
              "' (another rcoll version?)";
    }
  }
  return what;
}

// The reduction: a mark (this build's form: before stop 52 the verdict was
// the first of two values, the addresses the second), the verdict's byte,
// then "<peer> <text>".
constexpr uint8_t kVerdictMark = 0x56;  // 'V'
enum class Verdict : uint8_t { kAgree = 0, kDiffer = 1, kNoAddress = 2 };

Bytes verdict(Verdict v, int peer, const std::string& text) {
  const std::string out = std::to_string(peer) + " " + text;
  Bytes b;
  b.reserve(2 + out.size());
  b.push_back(kVerdictMark);
  b.push_back(static_cast<uint8_t>(v));
  b.insert(b.end(), out.begin(), out.end());
  return b;
}

}  // namespace

Bytes settings_value(const std::string& settings, const std::string& liveness_address) {
  const std::string value = settings + kLivenessMark + liveness_address;
  return Bytes(value.begin(), value.end());
}

std::string liveness_address(const Bytes& value) {
  const std::string text(value.begin(), value.end());
  const size_t mark = text.rfind(kLivenessMark);
  return mark == std::string::npos ? "" : text.substr(mark + kLivenessMark.size());
}

Bytes pack_liveness_addresses(const std::vector<Bytes>& values) {
  std::vector<Bytes> addresses;
  addresses.reserve(values.size());
  for (const Bytes& v : values) {
    const std::string a = liveness_address(v);
    addresses.emplace_back(a.begin(), a.end());
  }
  return pack_values(addresses);
}

Bytes reduce_settings(const std::vector<Bytes>& values) {
  const int size = static_cast<int>(values.size());
  std::vector<std::string> settings;
  settings.reserve(values.size());
  for (int q = 0; q < size; ++q) {
    const std::string text(values[static_cast<size_t>(q)].begin(),
                           values[static_cast<size_t>(q)].end());
    const size_t mark = text.rfind(kLivenessMark);
    if (mark == std::string::npos) {
      return verdict(Verdict::kNoAddress, q,
                     "rank " + std::to_string(q) +
                         "'s settings carry no liveness address: it runs another rcoll build; "
                         "every rank must run the same one");
    }
    settings.push_back(text.substr(0, mark));
  }
  // The combiner reads every rank's, so all find the same first difference.
  int differing = 0, first = -1;
  for (int q = 1; q < size; ++q) {
    if (settings[static_cast<size_t>(q)] == settings[0]) continue;
    ++differing;
    if (first < 0) first = q;
  }
  if (first >= 0) {
    return verdict(
        Verdict::kDiffer, first,
        "the ranks' settings differ: " +
            describe_difference(settings[0], settings[static_cast<size_t>(first)], first) + " (" +
            std::to_string(differing) + " of " + std::to_string(size) +
            " ranks differ from rank 0); every rank must set these alike (they decide "
            "which frames a rank sends and expects), so no rank creates the "
            "communicator");
  }
  return verdict(Verdict::kAgree, -1, "");
}

Status read_settings(const Bytes& reduced, int rank, int size) {
  if (reduced.size() < 2) {
    return Status(ErrorCode::kStore, ErrorContext{rank, -1, 0, 0, ""},
                  "the ranks' settings as combined in the store are " +
                      std::to_string(reduced.size()) + " bytes (" + std::to_string(size) +
                      " ranks): is another program using the store's keys?");
  }
  if (reduced[0] != kVerdictMark) {
    return Status(ErrorCode::kInvalidArgument, ErrorContext{rank, -1, 0, 0, ""},
                  "the ranks' settings were combined by another rcoll build (its verdict's form "
                  "is not this build's): every rank must run the same one, so no rank creates "
                  "the communicator");
  }
  const auto v = static_cast<Verdict>(reduced[1]);
  const std::string text(reduced.begin() + 2, reduced.end());
  const size_t space = text.find(' ');
  const int peer = space == std::string::npos ? -1 : std::atoi(text.c_str());
  const std::string message = space == std::string::npos ? text : text.substr(space + 1);
  if (v == Verdict::kDiffer || v == Verdict::kNoAddress)
    return Status(ErrorCode::kInvalidArgument, ErrorContext{rank, peer, 0, 0, ""}, message);
  if (v != Verdict::kAgree) {
    return Status(ErrorCode::kStore, ErrorContext{rank, -1, 0, 0, ""},
                  "the ranks' settings as combined in the store do not decode (verdict " +
                      std::to_string(static_cast<int>(v)) + ", " + std::to_string(size) +
                      " ranks): is another program using the store's keys?");
  }
  return Status();
}

AddressBook::FetchAll fetch_liveness_addresses(std::shared_ptr<Store> store, int size,
                                               Millis within) {
  return [store = std::move(store), size, within]() -> Result<PackedValues> {
    const StoreExchange x(*store, keys::settings(), size, {}, pack_liveness_addresses);
    auto packed = x.read_more(Deadline::after(within));
    if (!packed.ok()) return packed.status();
    PackedValues all;
    if (!PackedValues::decode(std::move(packed).value(), size, &all)) {
      return Status(ErrorCode::kStore,
                    "every rank's liveness address, as packed in the store, does not decode: is "
                    "another program using the store's keys?");
    }
    return all;
  };
}

AddressBook::FetchOne fetch_liveness_address(std::shared_ptr<Store> store, int size,
                                             Millis within) {
  return [store = std::move(store), size, within](int q) -> Result<std::string> {
    const StoreExchange x(*store, keys::settings(), size);
    auto v = store->get(x.key(q), within);
    if (!v.ok()) return v.status();
    const std::string a = liveness_address(v.value());
    if (a.empty()) {
      return Status(ErrorCode::kStore, "rank " + std::to_string(q) +
                                           "'s settings in the store carry no liveness address");
    }
    return a;
  };
}

AddressBook liveness_book(int rank, int size, const std::string& mine,
                          const std::vector<int>& partners, const std::vector<Bytes>& values,
                          AddressBook::FetchAll fetch_all, AddressBook::FetchOne fetch_one) {
  std::vector<std::pair<int, std::string>> known{{rank, mine}};
  for (size_t i = 0; i < partners.size() && i < values.size(); ++i)
    known.emplace_back(partners[i], liveness_address(values[i]));
  return AddressBook(size, std::move(known), std::move(fetch_all), std::move(fetch_one));
}

Status CommunicatorImpl::agree_settings(Deadline deadline) {
  const std::string mine = settings_every_rank_shares(
      options_, chain_,
      options_.socket_buffer_bytes > 0 ? options_.socket_buffer_bytes : kSocketBufferBytes);
  // The set takes no deadline of its own (the TCP store client's is 30 s).
  // A second past the deadline, so that once it passed the store can still
  // be asked who is missing.
  const ScopedStoreDeadline store_bound(deadline.is_never() ? deadline : Deadline::at(deadline.time() + std::chrono::seconds(1)));
  // The liveness channel listens now and its address rides on the settings,
  // so that its mesh needs no store exchange of its own (2P requests less).
  MeshParams live;
  live.rank = rank_;
  live.size = size_;
  live.ifname_spec = options_.socket_ifname;
  live.prefer_loopback = prefer_loopback();
  live.route_address = route_address_;
  live.purpose = "liveness";
  live.transport = "liveness";
  auto listener = listen_for_mesh(live);
  if (!listener.ok()) {
    ErrorContext c = listener.status().context();
    c.epoch = -1;
    return Status(listener.status().code(), c, "liveness channel: " + listener.status().message());
  }
  const StoreExchange exchange(*store_, keys::settings(), size_, reduce_settings,
                               pack_liveness_addresses);
  // The liveness overlay's partners' addresses come with the verdict; any
  // other rank's only if the liveness channel ever dials it (one by one for
  // the first few, then everyone's at once).
  std::vector<int> partners;
  if (!options_.heartbeats_to_all) {
    const std::vector<bool> overlay = eager_partners(rank_, size_);
    for (int q = 0; q < size_; ++q)
      if (overlay[static_cast<size_t>(q)]) partners.push_back(q);
  }
  std::vector<Bytes> picked;
  Result<Bytes> gathered = gather_settings(
      exchange, settings_value(mine, listener.value().address()), deadline, partners, &picked);
  if (!gathered.ok()) return gathered.status();
  if (Status agreed = read_settings(gathered.value(), rank_, size_); !agreed.ok()) return agreed;
  // Read on the liveness channel's thread, on a first dial to a rank that is
  // not an overlay partner: within a heartbeat interval (a store slower than
  // that fails the dial, tried again at a later tick), so heartbeats go on.
  const Millis within = std::max<Millis>(Millis(10), options_.liveness_budget / 15);
  liveness_addresses_ = liveness_book(rank_, size_, listener.value().address(), partners, picked,
                                      fetch_liveness_addresses(store_, size_, within),
                                      fetch_liveness_address(store_, size_, within));
  liveness_listener_ = std::move(listener).value();
  return Status();
}

// Every rank's settings, by rank. This is where a rank that starts late is
// first missed: it is waited for up to the join timeout, and said so, as a
// straggler is.
Result<Bytes> CommunicatorImpl::gather_settings(const StoreExchange& exchange, const Bytes& mine,
                                                Deadline deadline, const std::vector<int>& pick,
                                                std::vector<Bytes>* picked) {
  const Clock::time_point arrived = Clock::now();
  Clock::time_point next_note = arrived + std::chrono::seconds(5);
  std::vector<int> late;
  const auto waiting = [&](const std::vector<int>& missing) {
    if (!missing.empty())
      late = missing;  // the last look's: who was late, not who was a moment behind
    if (Clock::now() >= next_note) {
      next_note = Clock::now() + std::chrono::seconds(30);
      RCOLL_LOG(
          kWarn,
          "creating communicator '%s': rank(s) %s not here yet after %.0f s (starting late?); "
          "waiting up to "
          "%.0f s more (the join timeout: RCOLL_JOIN_TIMEOUT_MS, or the process group's timeout)",
          options_.name.c_str(), rank_list(missing).c_str(),
          std::chrono::duration<double>(Clock::now() - arrived).count(),
          std::chrono::duration<double>(deadline.remaining_ms()).count());
    }
    return Status();
  };
  // Published and waited for in one request where the store can.
  StoreExchange::Gathered gathered =
      exchange.publish_and_gather(rank_, mine, deadline, waiting, Millis(100), {}, pick);
  if (gathered.ended == StoreExchange::Gathered::Ended::kTimedOut) {
    const int q = gathered.missing.front();
    return Status(
        ErrorCode::kPeerUnreachable, ErrorContext{rank_, q, 0, 0, ""},
        "rank(s) " + rank_list(gathered.missing) + " did not join within the join timeout (" +
            std::to_string(std::chrono::duration_cast<Millis>(Clock::now() - arrived).count()) +
            " ms; RCOLL_JOIN_TIMEOUT_MS, or the process group's timeout): not started, "
            "crashed, or its communicator failed to be created (see its log), or the store is "
            "not answering: " +
            gathered.status.message());
  }
  const double waited = std::chrono::duration<double>(Clock::now() - arrived).count();
  if (!late.empty() && waited >= 2.0) {
    RCOLL_LOG(kWarn,
              "creating communicator '%s': rank(s) %s joined %.1f s after this rank (started late: "
              "waited, no "
              "error)",
              options_.name.c_str(), rank_list(late).c_str(), waited);
  }
  if (!gathered.ok()) {
    return Status(gathered.status.code(), ErrorContext{rank_, -1, 0, 0, ""},
                  "could not publish this rank's settings and read every rank's from the store: " +
                      gathered.status.message());
  }
  *picked = std::move(gathered.picked);
  return std::move(gathered.reduced);
}

}  // namespace rcoll
