#include "runtime/store/notices.h"

#include <charconv>

namespace rcoll::store {
namespace {

// The integer at the start of `text` up to the next newline; advances `at`.
std::optional<long long> take_int(const std::string& text, size_t* at) {
  const size_t end = text.find('\n', *at);
  if (end == std::string::npos) return std::nullopt;
  long long v = 0;
  const char* first = text.data() + *at;
  const char* last = text.data() + end;
  auto [p, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || p != last) return std::nullopt;
  *at = end + 1;
  return v;
}

}  // namespace

Bytes encode(const Ballot& b) {
  Bytes out{b.transport, static_cast<uint8_t>(b.drop_nccl ? 1 : 0)};
  out.insert(out.end(), b.why.begin(), b.why.end());
  return out;
}

std::optional<Ballot> decode_ballot(const Bytes& bytes) {
  if (bytes.empty()) return std::nullopt;
  Ballot b;
  b.transport = bytes[0];
  b.drop_nccl = bytes.size() > 1 && bytes[1] != 0;
  if (bytes.size() > 2) b.why.assign(bytes.begin() + 2, bytes.end());
  return b;
}

std::string encode(const FatalNotice& f) {
  return std::to_string(static_cast<int>(f.code)) + "\n" + std::to_string(f.peer) + "\n" + std::to_string(f.reporter) + "\n" +
         f.message;
}

std::optional<FatalNotice> decode_fatal(const std::string& text) {
  size_t at = 0;
  const auto code = take_int(text, &at);
  const auto peer = take_int(text, &at);
  const auto reporter = take_int(text, &at);
  if (!code || !peer || !reporter || *code <= 0 || *code > static_cast<int>(ErrorCode::kOutOfMemory)) return std::nullopt;
  FatalNotice f;
  f.code = static_cast<ErrorCode>(*code);
  f.peer = static_cast<int>(*peer);
  f.reporter = static_cast<int>(*reporter);
  f.message = text.substr(at);
  return f;
}

}  // namespace rcoll::store
