// One error discipline for every layer: a Status carries a code, the context
// (rank, peer, op seq, epoch, transport) and a message that says what happened
// and what rcoll does next. The public API throws rcoll::Error (which wraps a
// Status) from blocking calls; Work::wait() returns the Status.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace rcoll {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument,  // bad input from the caller; nothing was sent
  kClosed,           // op on a closed or aborted communicator
  kTimeout,          // an op made no progress within its deadline
  kWaitTimeout,      // Work::wait(timeout) expired; the op is still running
  kPeerDead,         // a peer's process is gone (connection closed)
  kPeerUnreachable,  // could not connect to a peer or the store within the deadline
  kDesync,           // ranks issued different ops at the same sequence number
  kAborted,          // the data plane was aborted (locally or by a peer's notice)
  kTransport,        // a transport-level failure that is not one of the above
  kStore,            // the rendezvous store failed or answered badly
  kUnsupported,      // a feature this build or transport does not have
  kInternal,         // a bug in rcoll: please report
  kDevice,           // the GPU failed (a sticky CUDA error: illegal address, ECC, ...); this process cannot use it any more
  kOutOfMemory,      // host memory ran out in the middle of an op; later ops on the communicator fail
};

const char* to_string(ErrorCode code);

// Where an error happened. Fields that do not apply stay at their defaults and
// are left out of the message.
struct ErrorContext {
  int rank = -1;
  int peer = -1;
  uint64_t op_seq = 0;
  int64_t epoch = -1;
  std::string transport;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  Status(ErrorCode code, ErrorContext context, std::string message)
      : code_(code), context_(std::move(context)), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const ErrorContext& context() const { return context_; }
  const std::string& message() const { return message_; }

  // "[rank 1 peer 2 op 17 epoch 0 tcp] kPeerDead: connection closed ... "
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  ErrorContext context_;
  std::string message_;
};

class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}
  Error(ErrorCode code, std::string message) : Error(Status(code, std::move(message))) {}
  ErrorCode code() const { return status_.code(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void throw_if_error(const Status& s) {
  if (!s.ok()) throw Error(s);
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  // Throws rcoll::Error when there is no value.
  T take() && {
    if (!ok()) throw Error(std::get<1>(v_));
    return std::get<0>(std::move(v_));
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace rcoll
