// The wire protocol of the built-in TCP store: one request, one response, in
// lock step on a connection (no pipelining). Every message is a fixed 12-byte
// header followed by `body_length` bytes of body (all integers little-endian):
//
//   header: 0 magic u32 | 4 kind u8 | 5 version u8 | 6 reserved u16 (0) | 8 body_length u32
//   body:   key_count u32 | key_count x (length u32, bytes) | value_length u32, bytes | integer i64
//
// Requests carry magic "RCSQ" and an Op as kind; responses carry "RCSR" and a
// Reply as kind. Every op uses the same body layout (unused parts are empty or
// zero), so there is one decoder to harden. What each op means:
//
//   kHello  value = job token                      -> kOk, or kRefused and the server closes
//   kSet    keys = {key}, value                    -> kOk
//   kGet    keys = {key}, integer = timeout ms     -> kOk + value, or kTimeout
//   kAdd    keys = {key}, integer = delta          -> kOk + integer = new value
//   kWait   keys = {k1..kn}, integer = timeout ms  -> kOk, or kTimeout + keys = the missing ones
//   kCheck  keys = {key}                           -> kOk + integer = 1 if the key exists, else 0
//   kErase  keys = {key}                           -> kOk + integer = 1 if it existed
//   kSetAdd keys = {key, counter}, value,
//           integer = delta                        -> kOk + integer = the counter's new value
//                                                     (sets key, then adds, in one request;
//                                                     a refused add leaves the key set)
//   kMultiGet keys = {k1..kn}, integer = timeout ms -> kOk + value = the n values, each a u32
//                                                     length and its bytes, in key order; or
//                                                     kTimeout + keys = the missing ones
//   kEraseMany keys = {k1..kn}                      -> kOk + integer = how many existed
//   kPublish keys = {key, counter, k1..kn}, value,
//           integer = until << 32 | timeout ms      -> sets key and adds 1 to counter (as
//                                                     kSetAdd); if the count is now below
//                                                     `until`, waits as kMultiGet does for
//                                                     k1..kn: kOk + their values, or kTimeout +
//                                                     the missing keys; at `until` or above
//                                                     (this request completed the count) kOk
//                                                     and no value at once. integer = the
//                                                     counter's new value in every answer.
//                                                     An exchange's publish and its wait for
//                                                     the combined value in one request.
//
// Decoding is a pure function of the bytes (fuzzable): it checks every length
// against what remains and against the limits below before it allocates, and
// returns kInvalidArgument naming what was wrong. A peer that sends a bad
// message gets its connection closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rcoll/status.h"
#include "rcoll/store.h"

namespace rcoll::store_wire {

inline constexpr uint32_t kRequestMagic = 0x51534352;   // "RCSQ"
inline constexpr uint32_t kResponseMagic = 0x52534352;  // "RCSR"
// 2: set_and_add, multi_get, erase_many. 3: publish. A server of another
// version refuses this client's hello by its version, not by closing on its
// first new op.
inline constexpr uint8_t kVersion = 3;
inline constexpr size_t kHeaderBytes = 12;

inline constexpr size_t kMaxKeyLength = 4096;
inline constexpr size_t kMaxValueLength = size_t{64} << 20;  // 64 MiB
inline constexpr size_t kMaxKeys = 4096;  // per wait(), multi_get(), erase_many()
// Keys and value together: room for the largest value plus a key, or for
// kMaxKeys long keys.
inline constexpr size_t kMaxBodyLength = kMaxValueLength + (size_t{20} << 20);
// A get/wait timeout above this is clamped (a week; keeps timers from overflowing).
inline constexpr int64_t kMaxTimeoutMs = int64_t{7} * 24 * 3600 * 1000;

enum class Op : uint8_t {
  kHello = 1,
  kSet,
  kGet,
  kAdd,
  kWait,
  kCheck,
  kErase,
  kSetAdd,
  kMultiGet,
  kEraseMany,
  kPublish
};

// kPublish's integer: the count it completes, and its wait's timeout.
inline int64_t publish_integer(int64_t until, int64_t timeout_ms) {
  return (until << 32) | (timeout_ms & 0xffffffffLL);
}
inline int64_t publish_until(int64_t integer) { return integer >> 32; }
inline int64_t publish_timeout_ms(int64_t integer) { return integer & 0xffffffffLL; }
enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kRefused = 2, kBadRequest = 3, kError = 4 };

const char* to_string(Op op);
const char* to_string(Reply reply);

struct Request {
  Op op = Op::kHello;
  std::vector<std::string> keys;
  Bytes value;
  int64_t integer = 0;
};

struct Response {
  Reply reply = Reply::kOk;
  std::vector<std::string> keys;
  Bytes value;  // kOk: the payload; otherwise a human-readable reason
  int64_t integer = 0;
};

struct FrameHeader {
  uint8_t kind = 0;
  uint32_t body_length = 0;
};

// Checks magic, version, the reserved bits and body_length <= kMaxBodyLength.
// `size` must be at least kHeaderBytes.
Result<FrameHeader> decode_header(std::span<const uint8_t> bytes, uint32_t expected_magic);

// The shape rules of each op (key count, key and value sizes, timeout range).
Status validate(const Request& request);

// Whole frames (header + body, nothing after it).
Result<Request> decode_request(std::span<const uint8_t> frame);
Result<Response> decode_response(std::span<const uint8_t> frame);
// Bodies, once the header has been read and checked.
Result<Request> decode_request_body(uint8_t kind, std::span<const uint8_t> body);
Result<Response> decode_response_body(uint8_t kind, std::span<const uint8_t> body);

// add() counters are stored as decimal ASCII ("-12"), in every store, so get()
// on a counter key reads the same everywhere. parse_counter accepts exactly
// that form (optional '-', 1..19 digits, no overflow); an empty value is 0.
bool parse_counter(const Bytes& value, int64_t& out);
Bytes format_counter(int64_t v);

// Encoders trust their input; call validate() first on anything a user supplied.
Bytes encode_request(const Request& request);
Bytes encode_response(const Response& response);

}  // namespace rcoll::store_wire
