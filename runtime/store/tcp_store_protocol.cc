#include "runtime/store/tcp_store_protocol.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

namespace rcoll::store_wire {
namespace {

Status bad(std::string what) {
  return Status(ErrorCode::kInvalidArgument, "malformed store message: " + std::move(what));
}

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// A cursor over untrusted bytes: every read checks what remains first.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t remaining() const { return bytes_.size() - pos_; }

  bool u32(uint32_t& v) {
    if (remaining() < 4) return false;
    v = get_u32(bytes_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool i64(int64_t& v) {
    if (remaining() < 8) return false;
    v = static_cast<int64_t>(get_u64(bytes_.data() + pos_));
    pos_ += 8;
    return true;
  }
  // Copies n bytes; the caller has checked n against its limit.
  template <typename Out>
  bool take(size_t n, Out& out) {
    if (remaining() < n) return false;
    out.assign(bytes_.data() + pos_, bytes_.data() + pos_ + n);
    pos_ += n;
    return true;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

struct Body {
  std::vector<std::string> keys;
  Bytes value;
  int64_t integer = 0;
};

Result<Body> decode_body(std::span<const uint8_t> body) {
  if (body.size() > kMaxBodyLength) {
    return bad("body of " + std::to_string(body.size()) + " bytes exceeds the limit of " +
               std::to_string(kMaxBodyLength));
  }
  Reader r(body);
  Body out;
  uint32_t key_count = 0;
  if (!r.u32(key_count)) return bad("truncated before the key count");
  if (key_count > kMaxKeys) {
    return bad("declares " + std::to_string(key_count) + " keys (limit " +
               std::to_string(kMaxKeys) + ")");
  }
  // Each key needs at least its 4-byte length: reject impossible counts before reserving.
  if (size_t{key_count} * 4 > r.remaining()) {
    return bad("declares " + std::to_string(key_count) + " keys but only " +
               std::to_string(r.remaining()) + " bytes follow");
  }
  out.keys.reserve(key_count);
  for (uint32_t i = 0; i < key_count; ++i) {
    uint32_t len = 0;
    if (!r.u32(len)) return bad("truncated in the length of key " + std::to_string(i));
    if (len > kMaxKeyLength) {
      return bad("key " + std::to_string(i) + " declares " + std::to_string(len) +
                 " bytes (limit " + std::to_string(kMaxKeyLength) + ")");
    }
    std::string key;
    if (!r.take(len, key)) {
      return bad("key " + std::to_string(i) + " declares " + std::to_string(len) +
                 " bytes but only " + std::to_string(r.remaining()) + " remain");
    }
    out.keys.push_back(std::move(key));
  }
  uint32_t value_len = 0;
  if (!r.u32(value_len)) return bad("truncated before the value length");
  if (value_len > kMaxValueLength) {
    return bad("value declares " + std::to_string(value_len) + " bytes (limit " +
               std::to_string(kMaxValueLength) + ")");
  }
  if (!r.take(value_len, out.value)) {
    return bad("value declares " + std::to_string(value_len) + " bytes but only " +
               std::to_string(r.remaining()) + " remain");
  }
  if (!r.i64(out.integer)) return bad("truncated before the integer field");
  if (r.remaining() != 0) {
    return bad(std::to_string(r.remaining()) + " unexpected bytes after the body");
  }
  return out;
}

Bytes encode(uint32_t magic, uint8_t kind, const std::vector<std::string>& keys, const Bytes& value,
             int64_t integer) {
  size_t body = 4 + 4 + value.size() + 8;
  for (const auto& k : keys) body += 4 + k.size();
  Bytes out;
  out.reserve(kHeaderBytes + body);
  put_u32(out, magic);
  out.push_back(kind);
  out.push_back(kVersion);
  out.push_back(0);
  out.push_back(0);
  put_u32(out, static_cast<uint32_t>(body));
  put_u32(out, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    put_u32(out, static_cast<uint32_t>(k.size()));
    out.insert(out.end(), k.begin(), k.end());
  }
  put_u32(out, static_cast<uint32_t>(value.size()));
  out.insert(out.end(), value.begin(), value.end());
  put_u64(out, static_cast<uint64_t>(integer));
  return out;
}

// Splits a whole frame into a checked header and its body.
Result<std::span<const uint8_t>> frame_body(std::span<const uint8_t> frame, uint32_t magic,
                                            uint8_t& kind) {
  auto header = decode_header(frame, magic);
  if (!header.ok()) return header.status();
  size_t have = frame.size() - kHeaderBytes;
  if (have != header.value().body_length) {
    return bad("header declares a body of " + std::to_string(header.value().body_length) +
               " bytes but the frame carries " + std::to_string(have));
  }
  kind = header.value().kind;
  return frame.subspan(kHeaderBytes);
}

}  // namespace

const char* to_string(Op op) {
  switch (op) {
    case Op::kHello:
      return "hello";
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kAdd:
      return "add";
    case Op::kWait:
      return "wait";
    case Op::kCheck:
      return "check";
    case Op::kErase:
      return "erase";
    case Op::kSetAdd:
      return "set_and_add";
    case Op::kMultiGet:
      return "multi_get";
    case Op::kEraseMany:
      return "erase_many";
    case Op::kPublish:
      return "publish";
  }
  return "unknown op";
}

const char* to_string(Reply reply) {
  switch (reply) {
    case Reply::kOk:
      return "ok";
    case Reply::kTimeout:
      return "timeout";
    case Reply::kRefused:
      return "refused";
    case Reply::kBadRequest:
      return "bad request";
    case Reply::kError:
      return "error";
  }
  return "unknown reply";
}

Result<FrameHeader> decode_header(std::span<const uint8_t> bytes, uint32_t expected_magic) {
  if (bytes.size() < kHeaderBytes) {
    return bad("header truncated at " + std::to_string(bytes.size()) + " of " +
               std::to_string(kHeaderBytes) + " bytes");
  }
  const uint8_t* p = bytes.data();
  uint32_t magic = get_u32(p);
  if (magic != expected_magic) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "bad magic 0x%08x (expected 0x%08x)", magic, expected_magic);
    return bad(buf);
  }
  if (p[5] != kVersion) {
    return bad("protocol version " + std::to_string(p[5]) + " (this build speaks " +
               std::to_string(kVersion) + ")");
  }
  if (p[6] != 0 || p[7] != 0) return bad("reserved header bits are set");
  FrameHeader h;
  h.kind = p[4];
  h.body_length = get_u32(p + 8);
  if (h.body_length > kMaxBodyLength) {
    return bad("header declares a body of " + std::to_string(h.body_length) + " bytes (limit " +
               std::to_string(kMaxBodyLength) + ")");
  }
  if (h.body_length < 16) {
    return bad("header declares a body of " + std::to_string(h.body_length) +
               " bytes, less than the 16-byte minimum");
  }
  return h;
}

Status validate(const Request& q) {
  auto need_keys = [&](size_t lo, size_t hi) -> Status {
    if (q.keys.size() < lo || q.keys.size() > hi) {
      return Status(
          ErrorCode::kInvalidArgument,
          std::string("store ") + to_string(q.op) + " takes " +
              (lo == hi ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi)) +
              " keys, got " + std::to_string(q.keys.size()));
    }
    return Status();
  };
  Status s;
  switch (q.op) {
    case Op::kHello:
      s = need_keys(0, 0);
      break;
    case Op::kSet:
    case Op::kGet:
    case Op::kAdd:
    case Op::kCheck:
    case Op::kErase:
      s = need_keys(1, 1);
      break;
    case Op::kSetAdd:
      s = need_keys(2, 2);
      break;
    case Op::kWait:
    case Op::kMultiGet:
    case Op::kEraseMany:
      s = need_keys(1, kMaxKeys);
      break;
    case Op::kPublish:
      s = need_keys(3, kMaxKeys);
      break;
    default:
      return Status(ErrorCode::kInvalidArgument,
                    "unknown store op " + std::to_string(static_cast<int>(q.op)));
  }
  if (!s.ok()) return s;
  for (const auto& k : q.keys) {
    if (k.size() > kMaxKeyLength) {
      return Status(ErrorCode::kInvalidArgument, "store key of " + std::to_string(k.size()) +
                                                     " bytes exceeds the limit of " +
                                                     std::to_string(kMaxKeyLength) +
                                                     " (key starts \"" + k.substr(0, 64) + "\")");
    }
  }
  size_t value_limit = 0;
  if (q.op == Op::kSet || q.op == Op::kSetAdd || q.op == Op::kPublish)
    value_limit = kMaxValueLength;
  if (q.op == Op::kHello) value_limit = kMaxKeyLength;  // the token
  if (q.value.size() > value_limit) {
    return Status(ErrorCode::kInvalidArgument, std::string("store ") + to_string(q.op) +
                                                   " value of " + std::to_string(q.value.size()) +
                                                   " bytes exceeds the limit of " +
                                                   std::to_string(value_limit));
  }
  if ((q.op == Op::kGet || q.op == Op::kWait || q.op == Op::kMultiGet) && q.integer < 0) {
    return Status(ErrorCode::kInvalidArgument, std::string("store ") + to_string(q.op) +
                                                   " with a negative timeout (" +
                                                   std::to_string(q.integer) + " ms)");
  }
  if (q.op == Op::kPublish && publish_until(q.integer) < 1) {
    return Status(ErrorCode::kInvalidArgument, "store publish completing a count of " +
                                                   std::to_string(publish_until(q.integer)) +
                                                   " (at least 1)");
  }
  return Status();
}

Result<Request> decode_request_body(uint8_t kind, std::span<const uint8_t> body) {
  if (kind < static_cast<uint8_t>(Op::kHello) || kind > static_cast<uint8_t>(Op::kPublish)) {
    return bad("unknown request op " + std::to_string(kind));
  }
  auto parsed = decode_body(body);
  if (!parsed.ok()) return parsed.status();
  Request q;
  q.op = static_cast<Op>(kind);
  q.keys = std::move(parsed.value().keys);
  q.value = std::move(parsed.value().value);
  q.integer = parsed.value().integer;
  if (Status s = validate(q); !s.ok()) return bad(s.message());
  return q;
}

Result<Response> decode_response_body(uint8_t kind, std::span<const uint8_t> body) {
  if (kind > static_cast<uint8_t>(Reply::kError)) {
    return bad("unknown reply code " + std::to_string(kind));
  }
  auto parsed = decode_body(body);
  if (!parsed.ok()) return parsed.status();
  Response r;
  r.reply = static_cast<Reply>(kind);
  r.keys = std::move(parsed.value().keys);
  r.value = std::move(parsed.value().value);
  r.integer = parsed.value().integer;
  return r;
}

Result<Request> decode_request(std::span<const uint8_t> frame) {
  uint8_t kind = 0;
  auto body = frame_body(frame, kRequestMagic, kind);
  if (!body.ok()) return body.status();
  return decode_request_body(kind, body.value());
}

Result<Response> decode_response(std::span<const uint8_t> frame) {
  uint8_t kind = 0;
  auto body = frame_body(frame, kResponseMagic, kind);
  if (!body.ok()) return body.status();
  return decode_response_body(kind, body.value());
}

bool parse_counter(const Bytes& value, int64_t& out) {
  if (value.empty()) {
    out = 0;
    return true;
  }
  size_t i = 0;
  bool negative = value[0] == '-';
  if (negative) i = 1;
  if (i == value.size() || value.size() - i > 19) return false;
  int64_t v = 0;
  for (; i < value.size(); ++i) {
    uint8_t c = value[i];
    if (c < '0' || c > '9') return false;
    int digit = c - '0';
    if (__builtin_mul_overflow(v, 10, &v)) return false;
    if (__builtin_sub_overflow(v, digit, &v))
      return false;  // accumulate negatively: fits INT64_MIN
  }
  if (!negative) {
    if (v == INT64_MIN) return false;
    v = -v;
  }
  out = v;
  return true;
}

Bytes format_counter(int64_t v) {
  std::string s = std::to_string(v);
  return Bytes(s.begin(), s.end());
}

Bytes encode_request(const Request& q) {
  return encode(kRequestMagic, static_cast<uint8_t>(q.op), q.keys, q.value, q.integer);
}

Bytes encode_response(const Response& r) {
  return encode(kResponseMagic, static_cast<uint8_t>(r.reply), r.keys, r.value, r.integer);
}

}  // namespace rcoll::store_wire
