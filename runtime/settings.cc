// At creation, before any transport: the settings every rank must share,
// compared across the ranks (CommunicatorImpl::agree_settings).
#include <algorithm>
#include <string>

#include "base/log.h"
#include "base/store_exchange.h"
#include "runtime/communicator_impl.h"
#include "runtime/store/call_deadline.h"
#include "runtime/store/keys.h"
#include "transports/tcp/mesh.h"

namespace rcoll {

namespace {

// Between a rank's settings and its liveness address in the exchanged value
// (settings are text lines: no NUL).
const std::string kLivenessMark("\0liveness ", 10);

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

}  // namespace

Status CommunicatorImpl::agree_settings(Deadline deadline) {
  const std::string mine = settings_every_rank_shares(
      options_, chain_,
      options_.socket_buffer_bytes > 0 ? options_.socket_buffer_bytes : kSocketBufferBytes);
  const ErrorContext ctx{rank_, -1, 0, 0, ""};
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
  const std::string value = mine + kLivenessMark + listener.value().address();
  const StoreExchange exchange(*store_, keys::settings(), size_);
  if (Status s = exchange.publish(rank_, Bytes(value.begin(), value.end())); !s.ok()) {
    return Status(s.code(), ctx,
                  "could not publish this rank's settings in the store: " + s.message());
  }
  Result<std::vector<std::string>> gathered = gather_settings(exchange, deadline);
  if (!gathered.ok()) return gathered.status();
  std::vector<std::string> theirs = std::move(gathered).value();
  std::vector<std::string> addresses;
  for (size_t q = 0; q < theirs.size(); ++q) {
    const size_t mark = theirs[q].rfind(kLivenessMark);
    if (mark == std::string::npos) {
      return Status(ErrorCode::kInvalidArgument, ErrorContext{rank_, static_cast<int>(q), 0, 0, ""},
                    "rank " + std::to_string(q) +
                        "'s settings carry no liveness address: it runs another rcoll build; "
                        "every rank must run the same one");
    }
    addresses.push_back(theirs[q].substr(mark + kLivenessMark.size()));
    theirs[q].resize(mark);
  }
  liveness_listener_ = std::move(listener).value();
  liveness_addresses_ = std::move(addresses);
  // Every rank reads every rank's, so all find the same first difference.
  int differing = 0, first = -1;
  for (int q = 1; q < size_; ++q) {
    if (theirs[static_cast<size_t>(q)] == theirs[0]) continue;
    ++differing;
    if (first < 0) first = q;
  }
  if (first < 0) return Status();
  return Status(ErrorCode::kInvalidArgument, ctx,
                "the ranks' settings differ: " +
                    describe_difference(theirs[0], theirs[static_cast<size_t>(first)], first) +
                    " (" + std::to_string(differing) + " of " + std::to_string(size_) +
                    " ranks differ from rank 0); every rank must set these alike (they decide "
                    "which frames a rank sends and expects), so no rank creates the communicator");
}

// Every rank's settings, by rank. This is where a rank that starts late is
// first missed: it is waited for up to the join timeout, and said so, as a
// straggler is.
Result<std::vector<std::string>> CommunicatorImpl::gather_settings(const StoreExchange& exchange,
                                                                   Deadline deadline) {
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
  const StoreExchange::Gathered gathered = exchange.gather(deadline, waiting, Millis(100));
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
    return Status(
        gathered.status.code(), ErrorContext{rank_, -1, 0, 0, ""},
        "could not read the ranks' settings from the store: " + gathered.status.message());
  }
  std::vector<std::string> theirs;
  for (const Bytes& b : gathered.values) theirs.emplace_back(b.begin(), b.end());
  return theirs;
}

}  // namespace rcoll
