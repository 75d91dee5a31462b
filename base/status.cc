#include "rcoll/status.h"

#include <string>

namespace rcoll {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kClosed: return "communicator closed";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kWaitTimeout: return "wait timed out";
    case ErrorCode::kPeerDead: return "peer dead";
    case ErrorCode::kPeerUnreachable: return "peer unreachable";
    case ErrorCode::kDesync: return "desync";
    case ErrorCode::kAborted: return "aborted";
    case ErrorCode::kTransport: return "transport error";
    case ErrorCode::kStore: return "store error";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kDevice: return "device failed";
    case ErrorCode::kOutOfMemory: return "out of memory";
  }
  return "unknown error";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string where;
  auto add = [&where](const std::string& part) {
    if (!where.empty()) where += ' ';
    where += part;
  };
  if (context_.rank >= 0) add("rank " + std::to_string(context_.rank));
  if (context_.peer >= 0) add("peer " + std::to_string(context_.peer));
  if (context_.op_seq > 0) add("op " + std::to_string(context_.op_seq));
  if (context_.epoch >= 0) add("epoch " + std::to_string(context_.epoch));
  if (!context_.transport.empty()) add(context_.transport);
  std::string out;
  if (!where.empty()) out = "[" + where + "] ";
  out += rcoll::to_string(code_);
  out += ": ";
  out += message_;
  return out;
}

}  // namespace rcoll
