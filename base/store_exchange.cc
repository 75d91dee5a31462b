#include "base/store_exchange.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace rcoll {

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int q : ranks) out += (out.empty() ? "" : ", ") + std::to_string(q);
  return out;
}

Bytes reduce_all_ok(const std::vector<Bytes>& values) {
  const bool all =
      std::all_of(values.begin(), values.end(), [](const Bytes& v) { return v == Bytes{1}; });
  return Bytes{static_cast<uint8_t>(all ? 1 : 0)};
}

Bytes encode_values(const std::vector<Bytes>& values) {
  size_t total = 0;
  for (const Bytes& v : values) total += 4 + v.size();
  Bytes out;
  out.reserve(total);
  for (const Bytes& v : values) append_value(out, v);
  return out;
}

void append_value(Bytes& out, const Bytes& value) {
  const auto n = static_cast<uint32_t>(value.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), value.begin(), value.end());
}

bool decode_values(const Bytes& combined, int size, std::vector<Bytes>* values) {
  std::vector<Bytes> out;
  size_t at = 0;
  while (at < combined.size()) {
    if (combined.size() - at < 4) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= static_cast<uint32_t>(combined[at + static_cast<size_t>(i)]) << (8 * i);
    at += 4;
    if (combined.size() - at < n) return false;
    out.emplace_back(combined.begin() + static_cast<std::ptrdiff_t>(at),
                     combined.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  if (out.size() != static_cast<size_t>(size)) return false;
  *values = std::move(out);
  return true;
}

namespace {

StoreExchange::Gathered ended_by(Status why, const std::vector<int>& missing) {
  StoreExchange::Gathered out;
  out.ended = StoreExchange::Gathered::Ended::kJudged;
  out.status = std::move(why);
  out.missing = missing;
  return out;
}

}  // namespace

Status StoreExchange::publish(int rank, const Bytes& mine) const {
  auto in = store_.set_and_add(key(rank), mine, count_key(), 1);
  if (!in.ok()) return in.status().code() == ErrorCode::kUnsupported ? Status() : in.status();
  if (in.value() == size_) combine();
  return Status();
}

void StoreExchange::combine() const {
  const std::vector<std::string> keys = rank_keys();
  // Every rank set its key before counting itself in: quick, unless a rank
  // counted twice and another is not in yet (then the gathers read each).
  auto values = store_.multi_get(keys, Millis(1000));
  // An empty value decodes as no rank's: every gather reads key by key at
  // once instead of waiting for a combined value that will not come.
  if (values.ok()) {
    // The second reduction first: once the combined value is there, so is it.
    if (more_) {
      Bytes more = more_(values.value());
      more.insert(more.begin(), kReducedMark);
      (void)store_.set(more_key(), more);  // else read_more reads the keys
    }
    Bytes combined = reduce_ ? reduce_(values.value()) : encode_values(values.value());
    if (reduce_) combined.insert(combined.begin(), kReducedMark);
    if (store_.set(combined_key(), combined).ok()) return;
  }
  (void)store_.set(combined_key(), Bytes{});
}

StoreExchange::Gathered StoreExchange::reduced_here(Gathered read,
                                                    const std::vector<int>& pick) const {
  if (!read.ok()) return read;
  read.picked.clear();
  for (int q : pick) read.picked.push_back(read.values.at(static_cast<size_t>(q)));
  if (!reduce_) return read;
  read.reduced = reduce_(read.values);
  read.values.clear();
  return read;
}

std::vector<std::string> StoreExchange::read_keys(const std::vector<int>& pick) const {
  std::vector<std::string> keys{combined_key()};
  for (int q : pick) keys.push_back(key(q));
  return keys;
}

// A wait parked at the store costs it nothing until it runs out, and each
// time it runs out every waiting rank asks again (and every other time looks
// at the count): P requests a round, which the one store serves in turn. So
// a waiting rank asks again every 150 us a rank (2.5 s at 16,384 ranks, at
// most 3 s; the caller's poll where that is longer), and all waiting ranks
// together ask at most about 10,000 times a second, a fraction of what the
// store serves. (16,384 ranks asking every 0.8 s and looking every second kept
// a store sharing 2 CPUs with them saturated: the settings' combiner read the
// values 4 s late, and creation took 12-18 s.) A completed exchange wakes
// every parked wait at once, so a long slice costs nothing when all goes
// well; it bounds how soon a waiting rank hears the judge. A gather that must
// be interrupted (a cancelled connect, accepts to serve) keeps the caller's
// poll.
Millis StoreExchange::repeat_every(Millis poll) const {
  return std::max<Millis>(poll, std::min<Millis>(Millis(size_ * 3 / 20), Millis(3000)));
}

Millis StoreExchange::wait_slice(Deadline deadline, Millis poll, bool interruptible) const {
  const Millis wait = interruptible ? poll : repeat_every(poll);
  return deadline.is_never() ? wait : std::clamp<Millis>(deadline.remaining_ms(), Millis(1), wait);
}

bool StoreExchange::take_combined(Bytes& c, Gathered& out) const {
  if (reduce_ && !c.empty() && c.front() == kReducedMark) {
    c.erase(c.begin());  // in place: at 16,384 ranks a copy each is gigabytes
    out.reduced = std::move(c);
    return true;
  }
  return !reduce_ && decode_values(c, size_, &out.values);
}

StoreExchange::Gathered StoreExchange::publish_and_gather(int rank, const Bytes& mine,
                                                          Deadline deadline, const Judge& judge,
                                                          Millis poll, const Interrupt& interrupted,
                                                          const std::vector<int>& pick) const {
  const Clock::time_point began = Clock::now();
  auto p = store_.publish_and_wait(key(rank), mine, count_key(), size_, read_keys(pick),
                                   wait_slice(deadline, poll, static_cast<bool>(interrupted)));
  if (!p.ok()) {
    // A store without add: the key is set, and the gather reads the keys.
    if (p.status().code() == ErrorCode::kUnsupported)
      return gather(deadline, judge, poll, interrupted, pick);
    Gathered out;
    out.ended = Gathered::Ended::kStoreFailed;  // who is missing is not known
    out.status = p.status();
    return out;
  }
  Store::Published& got = p.value();
  if (got.completed) {
    if (got.count == size_) combine();  // past P: a rank published twice (the gather sees to it)
  } else if (!got.timed_out && got.values.size() == pick.size() + 1) {
    Gathered out;
    out.picked.assign(std::make_move_iterator(got.values.begin() + 1),
                      std::make_move_iterator(got.values.end()));
    if (take_combined(got.values.front(), out)) return out;
    return reduced_here(read_each(deadline, judge, poll, interrupted), pick);
  }
  // Its wait ran out: a gather's first slice, after which the judge is
  // asked (a fatal notice, a rank dead) without waiting another.
  if (got.timed_out) return gather_from(deadline, judge, poll, interrupted, pick, began);
  return gather(deadline, judge, poll, interrupted, pick);
}

Result<Bytes> StoreExchange::read_more(Deadline deadline) const {
  if (!more_) return Bytes{};
  // The combiner wrote it before the combined value: there already, unless
  // it could not (then not coming: no wait).
  auto more = store_.get(more_key(), Millis(0));
  if (more.ok() && !more.value().empty() && more.value().front() == kReducedMark) {
    Bytes& m = more.value();
    m.erase(m.begin());
    return std::move(m);
  }
  if (!more.ok() && more.status().code() != ErrorCode::kTimeout) return more.status();
  auto values = store_.multi_get(rank_keys(), std::max<Millis>(deadline.remaining_ms(), Millis(1)));
  if (!values.ok()) return values.status();
  return more_(values.value());
}

std::vector<std::string> StoreExchange::rank_keys() const {
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(size_) + 2);
  for (int q = 0; q < size_; ++q) keys.push_back(key(q));
  return keys;
}

std::vector<std::string> StoreExchange::all_keys() const {
  std::vector<std::string> keys = rank_keys();
  keys.push_back(count_key());
  keys.push_back(combined_key());
  if (more_) keys.push_back(more_key());
  return keys;
}

std::vector<int> StoreExchange::look_up(const std::vector<int>& waiting, bool* answered,
                                        Status* store_status) const {
  std::vector<std::string> keys;
  keys.reserve(waiting.size());
  for (int q : waiting) keys.push_back(key(q));
  auto absent = store_.absent(keys);  // one request with the TCP store
  *answered = absent.ok();
  if (!absent.ok()) {
    *store_status = absent.status();
    return waiting;
  }
  std::vector<int> missing;
  size_t at = 0;  // absent keys come in the order asked
  for (size_t i = 0; i < keys.size() && at < absent.value().size(); ++i) {
    if (keys[i] != absent.value()[at]) continue;
    missing.push_back(waiting[i]);
    ++at;
  }
  return missing;
}

// The deadline passed with `waiting` not heard from: kTimedOut naming them,
// or kStoreFailed when the store answered none of the last look's questions.
StoreExchange::Gathered StoreExchange::ended_at_deadline(const std::vector<int>& waiting,
                                                         bool answered, const Status& store_status,
                                                         const Status& last) const {
  Gathered out;
  out.missing = waiting;
  if (!answered) {
    out.ended = Gathered::Ended::kStoreFailed;
    out.status = store_status;
    return out;
  }
  out.ended = Gathered::Ended::kTimedOut;
  out.status = Status(ErrorCode::kTimeout, ErrorContext{-1, waiting.front(), 0, -1, ""},
                      "rank(s) " + rank_list(waiting) + " did not publish " + prefix_ +
                          "<rank> in time (" + last.message() + ")");
  return out;
}

StoreExchange::Gathered StoreExchange::gather(Deadline deadline, const Judge& judge, Millis poll,
                                              const Interrupt& interrupted,
                                              const std::vector<int>& pick) const {
  return gather_from(deadline, judge, poll, interrupted, pick, std::nullopt);
}

StoreExchange::Gathered StoreExchange::gather_from(
    Deadline deadline, const Judge& judge, Millis poll, const Interrupt& interrupted,
    const std::vector<int>& pick, std::optional<Clock::time_point> waited_since) const {
  using Ended = Gathered::Ended;
  // A look (the count, and at times who is missing) once a second, or every
  // other slice at scale (repeat_every: the looks are P requests a round too).
  const Clock::duration look_every =
      std::max<Clock::duration>(std::chrono::seconds(1), 2 * repeat_every(poll));
  // The first look waits longer with more ranks: every rank looking costs the
  // store O(P^2) calls, which the combined value exists to avoid.
  const Clock::duration first_look =
      std::max<Clock::duration>(poll, std::min<Clock::duration>(size_ * Millis(2), look_every));
  Gathered out;
  std::vector<int> waiting(static_cast<size_t>(size_));
  for (int q = 0; q < size_; ++q) waiting[static_cast<size_t>(q)] = q;
  // A caller whose own first wait ran out (publish_and_gather) had this
  // gather's first slice: its first look is as due as after that slice.
  Clock::time_point looked = waited_since.value_or(Clock::now()) - look_every + first_look;
  bool read_ran_out = waited_since.has_value();
  bool known = false;    // `waiting` is what a look found (else: everyone, unknown)
  bool answered = true;  // the store answered a question of the last look
  // Everyone in and no combined value: the combiner's P reads may be slow
  // (128 ranks on 2 CPUs: seconds), and every rank reading P keys instead is
  // the load the combined value exists to avoid. Only after this long, and
  // at most half of what the deadline leaves, so that the reads still fit.
  Clock::duration read_each_after = std::chrono::seconds(2) + size_ * Millis(20);
  if (!deadline.is_never())
    read_each_after = std::min<Clock::duration>(read_each_after, deadline.remaining_ms() / 2);
  Clock::time_point all_in{};                        // when a look first found every rank in
  int64_t last_count = -1;                           // the count at the last look
  Clock::time_point looked_for_whom = Clock::now();  // the last look at which ranks are missing
  Status store_status;
  // The combined value, and the picked ranks' keys with it (they are there
  // once it is): one request a slice either way.
  const std::vector<std::string> keys = read_keys(pick);
  auto read = [&](Millis slice) -> Result<Bytes> {
    if (pick.empty()) return store_.get(combined_key(), slice);
    auto got = store_.multi_get(keys, slice);
    if (!got.ok()) return got.status();
    std::vector<Bytes>& v = got.value();
    if (v.size() != keys.size())
      return Status(ErrorCode::kStore, "multi_get of " + std::to_string(keys.size()) + " keys of " +
                                           prefix_ + " answered " + std::to_string(v.size()));
    out.picked.assign(std::make_move_iterator(v.begin() + 1), std::make_move_iterator(v.end()));
    return std::move(v.front());
  };
  for (;;) {
    Result<Bytes> combined = Status(ErrorCode::kTimeout, "the publish's wait ran out");
    if (!std::exchange(read_ran_out, false))
      combined = read(wait_slice(deadline, poll, static_cast<bool>(interrupted)));
    if (combined.ok()) {
      if (take_combined(combined.value(), out)) return out;
      // Not ours to trust: the keys themselves.
      return reduced_here(read_each(deadline, judge, poll, interrupted), pick);
    }
    if (combined.status().code() != ErrorCode::kTimeout) {
      out.ended = Ended::kStoreFailed;  // who is missing is not known
      out.status = combined.status();
      return out;
    }
    if (interrupted) {
      if (Status why = interrupted(); !why.ok()) return ended_by(std::move(why), waiting);
    }
    const bool expired = deadline.expired();
    if (expired || Clock::now() - looked >= look_every) {
      looked = Clock::now();
      auto in = store_.add(count_key(), 0);
      if (!in.ok() && in.status().code() == ErrorCode::kUnsupported)
        return reduced_here(read_each(deadline, judge, poll, interrupted), pick);
      bool everyone = in.ok() && in.value() >= size_;
      // Above kLookFreely ranks, which ranks are missing is asked only once
      // the count stopped moving, at most every kLookAnyway while it moves,
      // and at the deadline: a look names up to P keys, and while ranks are
      // still arriving every waiting rank asking each second would cost the
      // store O(P^2) (16,384 ranks arriving over more than a second: 268
      // million keys a second). Below it, a look is cheap.
      constexpr int kLookFreely = 512;
      constexpr Clock::duration kLookAnyway = std::chrono::seconds(5);
      const bool stalled = size_ <= kLookFreely || !in.ok() || in.value() == last_count ||
                           Clock::now() - looked_for_whom >= kLookAnyway;
      if (in.ok()) last_count = in.value();
      if (!everyone && ((judge && stalled) || expired)) {
        looked_for_whom = Clock::now();
        waiting = look_up(waiting, &answered, &store_status);
        known = true;
        everyone = waiting.empty();
      }
      if (everyone) {
        // Everyone is in and the combined value did not come: given time for
        // the combiner's reads, then read key by key.
        if (all_in == Clock::time_point{}) all_in = Clock::now();
        if (Clock::now() - all_in >= read_each_after || expired)
          return reduced_here(read_each(deadline, judge, poll, interrupted), pick);
        continue;
      }
    }
    if (judge && known) {
      if (Status verdict = judge(waiting); !verdict.ok())
        return ended_by(std::move(verdict), waiting);
    }
    if (expired) return ended_at_deadline(waiting, answered, store_status, combined.status());
  }
}

// Without the combined value: P reads of P keys, as the exchange did first.
StoreExchange::Gathered StoreExchange::read_each(Deadline deadline, const Judge& judge, Millis poll,
                                                 const Interrupt& interrupted) const {
  using Ended = Gathered::Ended;
  constexpr Clock::duration kLookEvery = std::chrono::seconds(1);
  Gathered out;
  std::vector<int> waiting(static_cast<size_t>(size_));
  for (int q = 0; q < size_; ++q) waiting[static_cast<size_t>(q)] = q;
  Clock::time_point looked{};  // the last look key by key (never yet)
  bool answered = true;        // the store answered a question of the last look
  Status store_status;
  for (;;) {
    std::vector<std::string> keys;
    for (int q : waiting) keys.push_back(key(q));
    const Millis slice =
        deadline.is_never() ? poll : std::clamp<Millis>(deadline.remaining_ms(), Millis(1), poll);
    // A wait names at most kMaxWaitKeys keys: with more, the first of them,
    // and once they are in, a look for the rest.
    const size_t part = std::min(keys.size(), kMaxWaitKeys);
    Status s = store_.wait(
        std::vector<std::string>(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(part)),
        slice);
    if (s.ok() && part == keys.size()) break;
    if (!s.ok() && s.code() != ErrorCode::kTimeout) {
      out.ended = Ended::kStoreFailed;  // who is missing is not known
      out.status = s;
      return out;
    }
    if (interrupted) {
      if (Status why = interrupted(); !why.ok()) return ended_by(std::move(why), waiting);
    }
    const bool part_in = s.ok();
    const bool expired = deadline.expired();
    if (!judge && !expired && !part_in) continue;  // nobody asks who is missing yet
    if (expired || part_in || Clock::now() - looked >= kLookEvery) {
      // Only those still missing: the next wait asks the store for fewer keys.
      looked = Clock::now();
      waiting = look_up(waiting, &answered, &store_status);
      if (waiting.empty()) break;
    }
    if (judge) {
      if (Status verdict = judge(waiting); !verdict.ok())
        return ended_by(std::move(verdict), waiting);
    }
    if (expired) return ended_at_deadline(waiting, answered, store_status, s);
  }
  for (int q = 0; q < size_; ++q) {
    // Every key is there: a read is quick (the store's own bound if it is not).
    auto v = store_.get(
        key(q), std::max<Millis>(Millis(1000),
                                 deadline.is_never() ? Millis(1000) : deadline.remaining_ms()));
    if (!v.ok()) {
      out.ended = Ended::kStoreFailed;
      out.status = Status(v.status().code(), ErrorContext{-1, q, 0, -1, ""},
                          "reading " + key(q) + ": " + v.status().message());
      out.values.clear();  // q did publish: nobody is missing
      return out;
    }
    out.values.push_back(std::move(v).value());
  }
  return out;
}

}  // namespace rcoll
