// rcoll-scale-harness: what creation and one recovery cost the rendezvous
// store at thousands of ranks (#37), on one machine. Each rank is a thread
// with its own client of one real TCP store server (in a child process: each
// side holds one descriptor per rank), and runs the store protocol's own
// code in the order creation and recovery run it:
//
//   creation: the instance ticket; the settings exchange (reduce_settings:
//   the agreement, read back with read_settings, and the liveness overlay
//   partners' values picked with it, their addresses checked); the data
//   plane's addresses (address_exchange, the partners' picked, its 20 ms
//   slices); one exchange of the link timings and whether every rank
//   connected (reduce_link_values, adopted by a LinkTuner);
//
//   recovery: the epoch's failed key (set by the closed link's two ends;
//   the others, told of it by a peer, set nothing); epoch 1 connected ahead
//   of the exchange on epoch 0's listeners and addresses (nothing at the
//   store) and its links timed, latency only; the one exchange: every
//   rank's ledger (serialize_ledger of an all-reduce in flight, two ranks
//   behind) with its ballot, the listener it keeps and its link value
//   (pack_ledgers: the distinct ledgers and the link timings reduced),
//   agreed by agree_resume (checked: every rank resumes at the slowest
//   rank's slice; every rank kept its TCP listener; every rank connected,
//   the worst link the slowest rank's); the key janitor.
//
// Not in it: sockets between ranks, the liveness channel, the epoch watch's
// parked request (a second connection per rank: P more descriptors at the
// store), the ops themselves. It counts every request each rank makes (a
// rank's repeat of a question while it waits counted apart), the bytes both
// ways, and each rank's sequential rounds; wall time from every rank
// starting at once to the last one done.
//
//   rcoll-scale-harness [--check] [--server-among-ranks] 1024 4096 16384
//
// --check fails the run (exit 1) unless each phase asks the store at most
// 10 P requests (repeats aside), no rank asks more than 2 log2 P + 10
// distinct questions (its rounds: a rank's requests are sequential), and the
// ranks read at most 16 bytes per rank from it on average (the packed
// addresses; every rank's whole value, as before the reductions, is about
// 200): the bounds of #37, tested in CI (scale_harness_np1024). Bytes sent
// to the store and the repeats of a waiting rank are reported, not bounded.
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/packed_values.h"
#include "base/store_exchange.h"
#include "rcoll/rcoll.h"
#include "runtime/ledger.h"
#include "runtime/link_model.h"
#include "runtime/link_tuning.h"
#include "runtime/settings_agreement.h"
#include "runtime/store/janitor.h"
#include "runtime/store/keys.h"
#include "runtime/transport_chain.h"
#include "transports/tcp/on_demand_links.h"

namespace rcoll {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// One rank's requests in one phase.
struct Totals {
  long requests = 0;
  long repeats = 0;  // the same question again while it waits
  long bytes_out = 0;
  long bytes_in = 0;
  Clock::time_point done{};  // when the rank finished the phase
  // When the rank finished each step of the phase, in order.
  std::vector<std::pair<const char*, Clock::time_point>> steps;
};

// One rank's count of the phase at hand.
struct RankCount {
  Totals now;
  std::set<std::string> asked;
  void start_phase() {
    now = Totals{};
    asked.clear();
  }
};

// A rank's client, counted (one thread per rank: no locks).
class CountingStore final : public Store {
 public:
  CountingStore(std::shared_ptr<Store> inner, RankCount* count)
      : inner_(std::move(inner)), c_(count) {}
  Status set(const std::string& key, const Bytes& value) override {
    note("set " + key, key.size() + value.size(), 0);
    return inner_->set(key, value);
  }
  Result<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
    auto v = inner_->get(key, timeout);
    note("get " + key, key.size(), v.ok() ? v.value().size() : 0);
    return v;
  }
  Result<int64_t> add(const std::string& key, int64_t delta) override {
    note("add " + key + " " + std::to_string(delta), key.size() + 8, 8);
    return inner_->add(key, delta);
  }
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    note("wait " + first(keys), total(keys), 0);
    return inner_->wait(keys, timeout);
  }
  Result<bool> check(const std::string& key) override {
    note("check " + key, key.size(), 1);
    return inner_->check(key);
  }
  Status erase(const std::string& key) override {
    note("erase " + key, key.size(), 0);
    return inner_->erase(key);
  }
  Result<int64_t> set_and_add(const std::string& key, const Bytes& value,
                              const std::string& counter, int64_t delta) override {
    note("set_and_add " + key, key.size() + value.size() + counter.size() + 8, 8);
    return inner_->set_and_add(key, value, counter, delta);
  }
  Result<std::vector<Bytes>> multi_get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) override {
    auto v = inner_->multi_get(keys, timeout);
    size_t in = 0;
    if (v.ok())
      for (const Bytes& b : v.value()) in += b.size();
    note("multi_get " + first(keys), total(keys), in);
    return v;
  }
  Result<Published> publish_and_wait(const std::string& key, const Bytes& value,
                                     const std::string& counter, int64_t until,
                                     const std::vector<std::string>& wait_keys,
                                     std::chrono::milliseconds timeout) override {
    auto p = inner_->publish_and_wait(key, value, counter, until, wait_keys, timeout);
    size_t in = 8;
    if (p.ok())
      for (const Bytes& b : p.value().values) in += b.size();
    note("publish " + key, key.size() + value.size() + counter.size() + total(wait_keys), in);
    return p;
  }
  Status erase_many(const std::vector<std::string>& keys) override {
    note("erase_many " + first(keys), total(keys), 0);
    return inner_->erase_many(keys);
  }
  Result<std::vector<std::string>> absent(const std::vector<std::string>& keys) override {
    auto v = inner_->absent(keys);
    note("absent " + first(keys), total(keys), v.ok() ? total(v.value()) : 0);
    return v;
  }

 private:
  static std::string first(const std::vector<std::string>& keys) {
    return keys.empty() ? "" : keys.front() + " +" + std::to_string(keys.size());
  }
  static size_t total(const std::vector<std::string>& keys) {
    size_t n = 0;
    for (const auto& k : keys) n += k.size();
    return n;
  }
  void note(const std::string& question, size_t out, size_t in) {
    ++c_->now.requests;
    if (!c_->asked.insert(question).second) ++c_->now.repeats;
    c_->now.bytes_out += static_cast<long>(out);
    c_->now.bytes_in += static_cast<long>(in);
  }
  std::shared_ptr<Store> inner_;
  RankCount* c_;
};

// What every rank shares of one run.
struct Run {
  int size = 0;
  uint16_t port = 0;
  std::string settings;  // settings_every_rank_shares of the defaults
  // Every rank (and the main thread) starts a phase at once; the phase's
  // clock starts when the last one arrives (the completion step, before any
  // is let go): the main thread, woken among 16,384 others, saw it up to
  // half a second late.
  struct Released {
    Run* run;
    void operator()() noexcept { run->released[run->rounds++] = Clock::now(); }
  };
  std::unique_ptr<std::barrier<Released>> start;
  Clock::time_point released[3];
  int rounds = 0;                 // changed in the completion step only
  std::vector<RankCount> counts;  // by rank
  std::vector<Totals> totals[2];  // by phase, by rank: read once every rank is through
  std::atomic<int> failures{0};
  std::mutex mu;
  std::string first_failure;
  void fail(int rank, const std::string& why) {
    if (failures++ == 0) {
      std::lock_guard<std::mutex> lock(mu);
      first_failure = "rank " + std::to_string(rank) + ": " + why;
    }
  }
};

std::string address_of(int rank, int epoch, const char* what) {
  return "127.0.0.1 " +
         std::to_string(20000 + (rank * 7 + epoch * 13 + (what[0] == 'l' ? 5 : 0)) % 40000) + " lo";
}

// An exchange as the runtime's: publish and gather (one request where the
// store can) within `deadline`, in slices of `poll`. The judges the runtime gives look at its own
// state, not the store, except the connect's (a failure key, asked as it asks it); a judge makes
// the gather look up who is missing once the count stalls. `judged`: the runtime gives one (every
// gather but the data plane's addresses).
Result<Bytes> exchange(Store& s, const StoreExchange& x, int rank, const Bytes& mine,
                       Deadline deadline, Millis poll, const std::string& failed_key = "",
                       bool judged = true, const std::vector<int>& pick = {},
                       std::vector<Bytes>* picked = nullptr) {
  StoreExchange::Judge judge;
  if (judged) judge = [](const std::vector<int>&) { return Status(); };
  if (!failed_key.empty()) {
    judge = [&s, failed_key](const std::vector<int>&) {
      auto failed = s.check(failed_key);
      if (failed.ok() && failed.value())
        return Status(ErrorCode::kPeerUnreachable, "a rank failed to connect");
      return Status();
    };
  }
  auto got = x.publish_and_gather(rank, mine, deadline, judge, poll, {}, pick);
  if (!got.ok()) return got.status;
  if (picked != nullptr) *picked = std::move(got.picked);
  return std::move(got.reduced);
}

// The ranks set in `partners`, in rank order.
std::vector<int> ranks_of(const std::vector<bool>& partners) {
  std::vector<int> out;
  for (size_t q = 0; q < partners.size(); ++q)
    if (partners[q]) out.push_back(static_cast<int>(q));
  return out;
}

struct RankState {
  RankCount* count = nullptr;
  void step(const char* name) { count->now.steps.emplace_back(name, Clock::now()); }
  std::shared_ptr<Store> store;
  LinkTuner tuner{Options{}};
  KeyJanitor janitor;
  LinkSample sample;
};

// The data plane's addresses of `epoch`, as the TCP mesh exchanges them
// (address_exchange, its slices, no judge): the partners' read with the
// combined value, and checked. (A real rank reads everyone's only on a first
// dial to a rank that is not a partner: no op here does.)
Status exchange_addresses(RankState& st, int rank, int size, int epoch,
                          const std::vector<int>& partners, Deadline deadline) {
  Store& s = *st.store;
  // Not noted for the janitor: the ranks keep these listeners and addresses
  // for the epochs to come.
  const std::string prefix = keys::transport_addresses("tcp", static_cast<uint32_t>(epoch));
  const StoreExchange addresses = address_exchange(s, prefix, size);
  const std::string mine = address_of(rank, epoch, "tcp");
  std::vector<Bytes> theirs;
  auto got = exchange(s, addresses, rank, Bytes(mine.begin(), mine.end()), deadline,
                      address_wait_slice(size),
                      /*failed_key=*/"", /*judged=*/false, partners, &theirs);
  if (!got.ok()) return got.status();
  if (theirs.size() != partners.size()) return Status(ErrorCode::kStore, "addresses");
  for (size_t i = 0; i < partners.size(); ++i) {
    const int q = partners[i];
    if (std::string(theirs[i].begin(), theirs[i].end()) != address_of(q, epoch, "tcp"))
      return Status(ErrorCode::kInternal,
                    "rank " + std::to_string(q) + "'s address came back wrong");
  }
  return Status();
}

// Every rank's link values as reduced (reduce_link_values), checked (every
// rank connected and timed its links, no latency moved, the worst link the
// slowest rank's: a latency-only timing keeps the bandwidth) and adopted.
Status adopt_links(RankState& st, const Bytes& reduced, int size, uint32_t epoch,
                   const LinkSample& mine) {
  LinkSummary links;
  if (!decode_link_summary(reduced, &links) || links.moved)
    return Status(ErrorCode::kStore, "link summary");
  if (!links.not_connected.empty() || !links.unmeasured.empty())
    return Status(ErrorCode::kInternal, "not every rank connected and timed its links");
  if (links.worst.latency_s < 20e-6 + 1e-9 * (size - 1) - 1e-12 ||
      links.worst.bandwidth != 3e9 - 1e3 * (size - 1))
    return Status(ErrorCode::kInternal,
                  "the worst link is not the slowest rank's (a latency-only timing keeps the "
                  "bandwidth)");
  st.tuner.adopt(epoch, links, mine, "tcp", size, 1.0);
  return Status();
}

// An epoch's one exchange after its connect, as the runtime's agree_epoch:
// every rank connected and timed its links (`mine`; latency only after
// epoch 0, the bandwidth kept), reduced to the worst link and who did not
// connect, judged by the connect's failure key; adopted by the tuner.
Status connect_and_time(RankState& st, int rank, int size, uint32_t epoch, const LinkSample& mine,
                        bool moved) {
  Store& s = *st.store;
  st.janitor.note_exchange(keys::connect(epoch, "tcp"));
  const StoreExchange agreement(s, keys::connect(epoch, "tcp"), size, reduce_link_values);
  auto got = exchange(s, agreement, rank, encode_link_value(mine, moved, true),
                      Deadline::after(120s), Millis(50), keys::connect_failed(epoch, "tcp"));
  if (!got.ok()) return got.status();
  return adopt_links(st, got.value(), size, epoch, mine);
}

Status create(Run& run, int rank, RankState& st) {
  Store& s = *st.store;
  const int size = run.size;
  const Deadline deadline = Deadline::after(120s);
  if (auto ticket = s.add("instances", 1); !ticket.ok()) return ticket.status();
  st.step("ticket");
  // The settings, and the liveness channel's partners' addresses with them.
  const StoreExchange settings(s, keys::settings(), size, reduce_settings, pack_liveness_addresses);
  const std::vector<int> partners = ranks_of(eager_partners(rank, size));
  std::vector<Bytes> theirs;
  auto got =
      exchange(s, settings, rank, settings_value(run.settings, address_of(rank, 0, "liveness")),
               deadline, Millis(100), "", true, partners, &theirs);
  if (!got.ok()) return got.status();
  if (Status agreed = read_settings(got.value(), rank, size); !agreed.ok()) return agreed;
  {
    AddressBook live = liveness_book(rank, size, address_of(rank, 0, "liveness"), partners, theirs,
                                     fetch_liveness_addresses(st.store, size, Millis(1000)));
    for (int q : partners) {
      auto a = live.at(q);
      if (!a.ok()) return a.status();
      if (a.value() != address_of(q, 0, "liveness"))
        return Status(ErrorCode::kInternal,
                      "rank " + std::to_string(q) + "'s liveness address came back wrong");
    }
  }
  st.step("settings");
  // The data plane: addresses, then the connect outcome and link timing.
  if (Status a = exchange_addresses(st, rank, size, 0, partners, deadline); !a.ok()) return a;
  st.step("addresses");
  st.sample.valid = true;
  st.sample.latency_s = 20e-6 + 1e-9 * rank;
  st.sample.bandwidth = 3e9 - 1e3 * rank;
  if (Status c = connect_and_time(st, rank, size, 0, st.sample, false); !c.ok()) return c;
  st.step("connect, link timing");
  return Status();
}

constexpr uint64_t kInFlight = 5;  // the all-reduce that failed
// The exchange whose TCP listener every rank keeps, as its ledger says.
const std::string kKept = keys::transport_addresses("tcp", 0);
constexpr size_t kSlices = 8;

Status recover(Run& run, int rank, RankState& st) {
  Store& s = *st.store;
  const int size = run.size;
  const Deadline deadline = Deadline::after(60s);
  st.janitor.retire();
  // The failed key: the ranks at the closed link's ends (0 and 1) set it;
  // the others were told of the failure by a peer (its abort frame, its
  // notice over the liveness channel, which this harness has no channel
  // for: here they are told as the phase starts) and set nothing (the
  // runtime's announce).
  if (rank <= 1) {
    const std::string why = "rank " + std::to_string(rank) + ": link closed";
    if (Status e = s.set(keys::epoch_failed(0), Bytes(why.begin(), why.end())); !e.ok()) return e;
  }
  st.step("failed key");
  // The ledger: collectives up to 4 done, op 5 in flight, two ranks a slice behind.
  // Without reset(size): its per-peer counters (about 64 bytes a peer, for
  // point-to-point ops this job has none of) are O(P) for a real rank in its
  // own process, but O(P^2) for all of them in this one.
  ReplayLog log(1 << 20, 1 << 20);
  log.collective_through = kInFlight - 1;
  static float buffer[64];
  OpRecord current;
  current.op.kind = OpKind::kAllreduce;
  current.op.in = Buffer::of(buffer, 64);
  current.op.out = Buffer::of(buffer, 64);
  current.op.seq = current.op.match_seq = kInFlight;
  current.total = kSlices;
  const bool behind = rank == size / 3 || rank == size - 1;
  current.done = behind ? 2 : 3;
  current.pool = log.pool();
  const std::string ledger = serialize_ledger(log, std::span<const OpRecord>(&current, 1), size);
  // Epoch 1, connected ahead of the exchange on epoch 0's listeners and
  // addresses (every rank kept its own: nothing at the store; no sockets
  // here), its links timed (latency only, the bandwidth kept): the rank's
  // link value rides on its ledger, the fourth value (runtime/recovery.cc).
  const LinkSample* last = st.tuner.last_sample(1, "tcp", size);
  if (last == nullptr) return Status(ErrorCode::kInternal, "no sample kept from epoch 0");
  LinkSample now = *last;
  now.bandwidth = 1;
  const bool moved = !LinkTuner::keep_bandwidth(*last, now);
  st.janitor.note_exchange(keys::recovery_ledgers(0));
  const StoreExchange ledgers(s, keys::recovery_ledgers(0), size, pack_ledgers);
  auto got = exchange(
      s, ledgers, rank,
      encode_values({Bytes{}, Bytes(ledger.begin(), ledger.end()),
                     Bytes(kKept.begin(), kKept.end()), encode_link_value(now, moved, true)}),
      deadline, Millis(200));
  if (!got.ok()) return got.status();
  DistinctValues values;
  Bytes links;
  if (!unpack_ledgers(got.value(), size, &values, &links))
    return Status(ErrorCode::kStore, "ledgers");
  st.step("ledgers, connect outcome, link timing");
  std::set<std::string> kept;
  const DistinctValues texts = std::move(values).transformed([&kept](const std::string& v) {
    std::vector<Bytes> parts;
    if (!decode_values(Bytes(v.begin(), v.end()), 3, &parts)) return std::string();
    kept.emplace(parts[2].begin(), parts[2].end());
    return std::string(parts[1].begin(), parts[1].end());
  });
  if (kept != std::set<std::string>{kKept})
    return Status(ErrorCode::kInternal,
                  "the ledgers do not agree that every rank kept its listener");
  auto plan = agree_resume(rank, size, log, std::span<const OpRecord>(&current, 1), texts);
  if (!plan.ok()) return plan.status();
  if (plan.value().entries.size() != 1 || plan.value().entries[0].resume != 2)
    return Status(ErrorCode::kInternal, "the agreed resume slice is not the slowest rank's (2)");
  st.tuner.resume_from(plan.value().collectives_started + 1);
  if (Status a = adopt_links(st, links, size, 1, now); !a.ok()) return a;
  st.janitor.erase_retired(s, rank, size);
  st.step("janitor");
  return Status();
}

struct Phase {
  double seconds = 0;
  // Each step's end, at the slowest rank and at the median one (s from the
  // phase's start): where the time goes.
  std::vector<std::string> step_names;
  std::vector<double> step_last, step_median;
  // most_asked: the most distinct questions one rank asked (its sequential
  // requests at the store, repeats aside); most_in: the most bytes one rank
  // read (the combiner's read of every rank's value among them).
  long requests = 0, repeats = 0, most_asked = 0, bytes_out = 0, bytes_in = 0, most_in = 0;
};

Phase tally(const std::vector<Totals>& totals, Clock::time_point started) {
  Phase p;
  Clock::time_point last = started;
  for (const Totals& c : totals) {
    p.requests += c.requests;
    p.repeats += c.repeats;
    p.most_asked = std::max(p.most_asked, c.requests - c.repeats);
    p.most_in = std::max(p.most_in, c.bytes_in);
    p.bytes_out += c.bytes_out;
    p.bytes_in += c.bytes_in;
    last = std::max(last, c.done);
  }
  p.seconds = std::chrono::duration<double>(last - started).count();
  const size_t steps = totals.empty() ? 0 : totals.front().steps.size();
  for (size_t i = 0; i < steps; ++i) {
    std::vector<double> at;
    for (const Totals& c : totals) {
      if (c.steps.size() != steps) continue;
      at.push_back(std::chrono::duration<double>(c.steps[i].second - started).count());
    }
    if (at.empty()) continue;
    std::sort(at.begin(), at.end());
    p.step_names.push_back(totals.front().steps[i].first);
    p.step_last.push_back(at.back());
    p.step_median.push_back(at[at.size() / 2]);
  }
  return p;
}

struct ThreadArgs {
  Run* run;
  int rank;
};

void* rank_main(void* arg) {
  auto* a = static_cast<ThreadArgs*>(arg);
  Run& run = *a->run;
  const int rank = a->rank;
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = run.port;
  so.connect_timeout = 120s;
  auto client = connect_tcp_store(so);
  RankState st;
  st.count = &run.counts[static_cast<size_t>(rank)];
  if (!client.ok()) {
    run.fail(rank, client.status().to_string());
  } else {
    st.store = make_prefix_store(
        std::make_shared<CountingStore>(client.value(), &run.counts[static_cast<size_t>(rank)]),
        "harness/0");
  }
  RankCount& mine = run.counts[static_cast<size_t>(rank)];
  for (int phase = 0; phase < 2; ++phase) {
    run.start->arrive_and_wait();  // every rank starts the phase at once
    mine.start_phase();
    if (st.store && run.failures == 0) {
      Status s = phase == 0 ? create(run, rank, st) : recover(run, rank, st);
      if (!s.ok()) run.fail(rank, s.to_string());
    }
    mine.now.done = Clock::now();
    run.totals[phase][static_cast<size_t>(rank)] = mine.now;
  }
  run.start->arrive_and_wait();
  return nullptr;
}

// The store server, in a child process of its own: the ranks' P connections
// and the server's P would not fit in one process's descriptor limit.
struct ServerProcess {
  pid_t pid = -1;
  int hold = -1;  // closing it ends the child
  uint16_t port = 0;
};

void raise_descriptor_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    lim.rlim_cur = lim.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// `own_session`: the server in a session of its own. The kernel's scheduler
// groups the threads of a session (autogroups) and shares the CPUs fairly
// between groups, so the server gets its share as a process of its own, as
// on a store host of its own in a real job. In the ranks' session its one
// thread shared the CPUs with every rank's thread that was runnable, as one
// of up to 16,385, while each exchange waited on it (--server-among-ranks,
// as stops 51-53 measured).
ServerProcess start_server(bool own_session) {
  int port_pipe[2], hold_pipe[2];
  if (::pipe(port_pipe) != 0 || ::pipe(hold_pipe) != 0) std::exit(2);
  ServerProcess sp;
  sp.pid = ::fork();
  if (sp.pid == 0) {
    if (own_session) (void)::setsid();  // ends with the hold pipe, not the terminal
    ::close(port_pipe[0]);
    ::close(hold_pipe[1]);
    raise_descriptor_limit();
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    auto server = start_tcp_store_server(o);
    uint16_t port = server.ok() ? server.value()->port() : 0;
    if (::write(port_pipe[1], &port, sizeof(port)) != sizeof(port)) ::_exit(2);
    char c;
    while (::read(hold_pipe[0], &c, 1) > 0) {
    }
    ::_exit(0);
  }
  ::close(port_pipe[1]);
  ::close(hold_pipe[0]);
  sp.hold = hold_pipe[1];
  if (::read(port_pipe[0], &sp.port, sizeof(sp.port)) != sizeof(sp.port) || sp.port == 0) {
    std::fprintf(stderr, "the store server did not start\n");
    std::exit(2);
  }
  ::close(port_pipe[0]);
  return sp;
}

void stop_server(ServerProcess& sp) {
  ::close(sp.hold);
  int status = 0;
  (void)::waitpid(sp.pid, &status, 0);
}

int run_at(int size, bool check, bool server_among_ranks) {
  ServerProcess server = start_server(!server_among_ranks);
  Run run;
  run.size = size;
  run.port = server.port;
  std::vector<std::string> notes;
  auto chain = TransportChain::make(Options{}, &notes);
  if (!chain.ok()) {
    std::fprintf(stderr, "%s\n", chain.status().to_string().c_str());
    std::exit(2);
  }
  run.settings = settings_every_rank_shares(Options{}, chain.value(), 4 << 20);
  run.counts.resize(static_cast<size_t>(size));
  run.totals[0].resize(static_cast<size_t>(size));
  run.totals[1].resize(static_cast<size_t>(size));
  run.start = std::make_unique<std::barrier<Run::Released>>(size + 1, Run::Released{&run});
  std::vector<ThreadArgs> args(static_cast<size_t>(size));
  std::vector<pthread_t> threads(static_cast<size_t>(size));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 128 << 10);
  for (int r = 0; r < size; ++r) {
    args[static_cast<size_t>(r)] = ThreadArgs{&run, r};
    if (pthread_create(&threads[static_cast<size_t>(r)], &attr, rank_main,
                       &args[static_cast<size_t>(r)]) != 0) {
      std::fprintf(stderr, "could not start rank %d's thread\n", r);
      std::exit(2);
    }
  }
  for (int phase = 0; phase < 3; ++phase) run.start->arrive_and_wait();
  const Phase phases[2] = {tally(run.totals[0], run.released[0]),
                           tally(run.totals[1], run.released[1])};
  for (pthread_t t : threads) pthread_join(t, nullptr);
  stop_server(server);
  if (run.failures > 0) {
    std::printf("P=%d: %d rank(s) failed; first: %s\n", size, run.failures.load(),
                run.first_failure.c_str());
    return 1;
  }
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const char* names[2] = {"create", "recovery"};
  for (int p = 0; p < 2; ++p) {
    const Phase& ph = phases[p];
    const long protocol = ph.requests - ph.repeats;
    std::printf(
        "P=%d %-8s %7.3f s  requests %ld (%.1f P; %ld more while waiting, %.1f P)  most of one "
        "rank %ld  "
        "bytes to the store %.1f MB, from it %.1f MB (%.0f B a rank on average, %.0f KB the "
        "most)\n",
        size, names[p], ph.seconds, protocol, static_cast<double>(protocol) / size, ph.repeats,
        static_cast<double>(ph.repeats) / size, ph.most_asked, ph.bytes_out / 1e6,
        ph.bytes_in / 1e6, static_cast<double>(ph.bytes_in) / size, ph.most_in / 1e3);
  }
  for (int p = 0; p < 2; ++p) {
    std::printf("P=%d %-8s steps done by (s, median rank / last rank):", size, names[p]);
    for (size_t i = 0; i < phases[p].step_names.size(); ++i)
      std::printf("%s %s %.2f/%.2f", i ? "," : "", phases[p].step_names[i].c_str(),
                  phases[p].step_median[i], phases[p].step_last[i]);
    std::printf("\n");
  }
  std::printf("P=%d harness peak RSS %.0f MB\n", size, ru.ru_maxrss / 1024.0);
  int rc = 0;
  for (int p = 0; p < 2 && check; ++p) {
    const Phase& ph = phases[p];
    const long most_rounds = static_cast<long>(2 * std::ceil(std::log2(size))) + 10;
    const long most_bytes = 16L * size + 8192;
    if (ph.requests - ph.repeats > 10L * size) {
      std::printf("FAIL: %s asked the store %ld requests, more than 10 P = %ld\n", names[p],
                  ph.requests - ph.repeats, 10L * size);
      rc = 1;
    }
    if (ph.most_asked > most_rounds) {
      std::printf(
          "FAIL: a rank asked the store %ld questions in %s, more than 2 log2 P + 10 = %ld\n",
          ph.most_asked, names[p], most_rounds);
      rc = 1;
    }
    if (ph.bytes_in / size > most_bytes) {
      std::printf(
          "FAIL: the ranks read %ld bytes each from the store on average in %s, more than 16 P + "
          "8 KiB = %ld\n",
          ph.bytes_in / size, names[p], most_bytes);
      rc = 1;
    }
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace
}  // namespace rcoll

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s [--check] [--server-among-ranks] P [P...]   (ranks; e.g. 1024 4096 "
                 "16384)\n",
                 argv[0]);
    return 2;
  }
  rcoll::raise_descriptor_limit();
  int rc = 0;
  bool check = false, server_among_ranks = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--check") {
      check = true;
      continue;
    }
    if (std::string(argv[i]) == "--server-among-ranks") {
      server_among_ranks = true;
      continue;
    }
    const int p = std::atoi(argv[i]);
    if (p < 2) {
      std::fprintf(stderr, "%s: P must be at least 2\n", argv[i]);
      return 2;
    }
    rc |= rcoll::run_at(p, check, server_among_ranks);
  }
  return rc;
}
