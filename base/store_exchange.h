// The exchange that setup and recovery repeat: every rank publishes a value
// under a key prefix and reads every rank's (an all-gather through the
// store): the settings every rank must share, link timings, ledgers and
// ballots, NCCL init outcomes, where ranks were when an epoch failed, the
// transports' addresses.
//
// Combined, so that the store serves O(P) requests, not P reads of P keys:
// each rank sets its key and counts itself in (`set_and_add`, one request);
// the rank that brings the count to P reads the P values (`multi_get`, one
// request) and writes them as one ("<prefix>all"); every rank reads that one
// key. Per exchange: 2P + 2 requests, in two rounds per rank (four for the
// combiner); P + 3 with publish_and_gather on a store that publishes and
// waits in one request (the TCP store). A store without those calls
// (Store's defaults) serves 4P + 1. Where the combined value
// never comes (a rank published twice, the combiner died), a gather that
// has found every key there for 2 s + 20 ms x P (at most half its deadline)
// reads them one by one, as before; a combiner that cannot read or write
// them all writes an empty value, which sends every gather there at once.
//
// Reduced, where the consumers need less than every value: the combiner
// writes what a reduction makes of the P values (the settings' agreement and
// the packed addresses, the link timings' worst link, whether every rank
// connected), and each rank reads that, O(1) or a few bytes per rank, not
// every rank's value. Reductions are pure functions of the values in rank
// order: a gather that falls back to reading the keys makes the same one.
//
// Bounded by a deadline. Between polls a judge, given the ranks not heard
// from yet, may end the wait at once with its own diagnosis (a rank seen
// dead, one that said goodbye, a failure notice no recovery fixes); its
// callers name the missing ranks in their errors.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "rcoll/store.h"

namespace rcoll {

class StoreExchange {
 public:
  // Keys are `prefix` + rank (runtime/store/keys.h), `prefix` + "n" (the
  // count) and `prefix` + "all" (the combined values).
  // `reduce`, if given, makes the combined value from every rank's, in rank
  // order; the gather returns it (Gathered::reduced), not the values.
  // `more`, if given, is a second reduction the combiner writes beside the
  // combined value ("<prefix>more"), which a rank reads only when it needs
  // it (read_more): every rank's address, say, where a rank dials its few
  // partners at once (their values picked with the combined value: gather's
  // `pick`) and any other rank only on first use, if ever.
  using Reduce = std::function<Bytes(const std::vector<Bytes>& values)>;
  StoreExchange(Store& store, std::string prefix, int size, Reduce reduce = {}, Reduce more = {})
      : store_(store),
        prefix_(std::move(prefix)),
        size_(size),
        reduce_(std::move(reduce)),
        more_(std::move(more)) {}

  std::string key(int rank) const { return prefix_ + std::to_string(rank); }
  std::string count_key() const { return prefix_ + "n"; }
  std::string combined_key() const { return prefix_ + "all"; }
  std::string more_key() const { return prefix_ + "more"; }

  // Publishes this rank's value once per exchange (a second publish costs the
  // combined read). The last rank in combines (P reads, best effort: a
  // failure there leaves the gather to read key by key).
  Status publish(int rank, const Bytes& mine) const;

  // Called between polls with the ranks not heard from yet (never empty; as
  // of the last look: at most a second old up to 512 ranks; above, looked
  // up again once the count of ranks in stops moving, or every 5 s while it
  // moves); a non-OK status ends the gather.
  using Judge = std::function<Status(const std::vector<int>& missing)>;

  // How a gather ended: every rank's value (in rank order), or why not.
  struct Gathered {
    enum class Ended : uint8_t { kAll, kJudged, kTimedOut, kStoreFailed };
    Ended ended = Ended::kAll;
    std::vector<Bytes> values;  // without a reduction
    Bytes reduced;              // with one: what it made of the values
    std::vector<Bytes> picked;  // the values of the ranks in `pick`, in its order
    // kJudged: the judge's verdict, as it gave it. kTimedOut: kTimeout,
    // context.peer the first missing rank, the message naming them all.
    // kStoreFailed: the store's own error (it did not answer, or a read failed).
    Status status;
    // Who was not heard from: kTimedOut, kJudged; kStoreFailed when the
    // store failed while asked who is missing, else empty.
    std::vector<int> missing;
    bool ok() const { return ended == Ended::kAll; }
  };

  // Waits on the store for the combined value in slices of `poll`. Who is
  // missing is looked up only when someone asks (a judge, or the deadline
  // passing), and then at most once a second: first the count (one call),
  // and which keys are absent (Store::absent: one call with the TCP store)
  // only while someone is. kTimedOut once
  // `deadline` passed; a rank the store could not be asked about counts as
  // missing, unless the store answered none of the last look's questions
  // (kStoreFailed: its host stalled, say). Callers that bound store calls by
  // the same deadline give them a little more, so the store can still be
  // asked who is missing.
  //
  // `interrupted`, unlike the judge, is asked after every slice, with no look
  // (a connect the runtime gave up on); a non-OK status ends the gather as
  // the judge's would (kJudged, `missing` as far as known).
  //
  // `pick`: ranks whose own values the gather returns as well
  // (Gathered::picked), read with the combined value in the same request
  // (Store::multi_get): a rank's partners' addresses. Ranks in [0, size).
  using Interrupt = std::function<Status()>;
  Gathered gather(Deadline deadline, const Judge& judge = {}, Millis poll = Millis(100),
                  const Interrupt& interrupted = {}, const std::vector<int>& pick = {}) const;

  // publish() and gather() in one: with a store that does both in one
  // request (Store::publish_and_wait: the TCP store), a rank whose combined
  // value comes within the first slice asks the store once, not twice.
  Gathered publish_and_gather(int rank, const Bytes& mine, Deadline deadline,
                              const Judge& judge = {}, Millis poll = Millis(100),
                              const Interrupt& interrupted = {},
                              const std::vector<int>& pick = {}) const;

  // The second reduction (`more`) of an exchange every rank is known to have
  // published in (after a gather): one read. Where the combiner could not
  // write it, every rank's value is read (one multi_get) and reduced here.
  // Empty without `more`.
  Result<Bytes> read_more(Deadline deadline) const;

  // Every key of the exchange (every rank's, the count, the combined values):
  // what is erased once every rank has read it (keys of finished epochs).
  std::vector<std::string> all_keys() const;

  // A reduced combined value starts with this byte: an empty one still
  // sends every gather to read the keys.
  static constexpr uint8_t kReducedMark = 0x52;  // 'R'

 private:
  // gather(), where a caller's own wait since `waited_since` (if any) was
  // its first slice, and ran out.
  Gathered gather_from(Deadline deadline, const Judge& judge, Millis poll,
                       const Interrupt& interrupted, const std::vector<int>& pick,
                       std::optional<std::chrono::steady_clock::time_point> waited_since) const;
  std::vector<std::string> rank_keys() const;  // every rank's key, in rank order
  void combine() const;
  // A gather's read: the combined key, then the picked ranks' keys.
  std::vector<std::string> read_keys(const std::vector<int>& pick) const;
  // How often a waiting rank asks the store again: the caller's poll, or
  // 150 us a rank at scale (at most 3 s).
  Millis repeat_every(Millis poll) const;
  // How long a gather waits at the store at a time (repeat_every, or the
  // caller's poll if `interruptible`), within the deadline.
  Millis wait_slice(Deadline deadline, Millis poll, bool interruptible) const;
  // A combined value read: true and `out` complete when it is one (the
  // reduction, or every value), false when the keys must be read instead.
  bool take_combined(Bytes& combined, Gathered& out) const;
  Gathered ended_at_deadline(const std::vector<int>& waiting, bool answered,
                             const Status& store_status, const Status& last) const;
  Gathered read_each(Deadline deadline, const Judge& judge, Millis poll,
                     const Interrupt& interrupted) const;
  // The most keys one Store::wait may name (the TCP store's limit).
  static constexpr size_t kMaxWaitKeys = 4096;
  // The ranks whose keys are not there (Store::absent: a key the store could
  // not be asked about counts as missing; `*answered`: it answered at all).
  std::vector<int> look_up(const std::vector<int>& waiting, bool* answered,
                           Status* store_status) const;

  // The values read key by key, reduced here when the exchange has a
  // reduction, the picked ones taken from them.
  Gathered reduced_here(Gathered read, const std::vector<int>& pick) const;

  Store& store_;
  std::string prefix_;
  int size_;
  Reduce reduce_;
  Reduce more_;
};

// A reduction: {1} when every rank published {1} (it connected), else {0}.
Bytes reduce_all_ok(const std::vector<Bytes>& values);

// "1, 3, 7": ranks for a message.
std::string rank_list(const std::vector<int>& ranks);

// The combined value: each rank's, length-prefixed, in rank order. Decoding
// refuses (false) anything that is not exactly `size` values.
Bytes encode_values(const std::vector<Bytes>& values);
// Appends one value as encode_values writes it (for an encoder that does not
// hold the values in a vector: the store server's multi_get answer).
void append_value(Bytes& out, const Bytes& value);
bool decode_values(const Bytes& combined, int size, std::vector<Bytes>* values);

}  // namespace rcoll
