// Status and StatusOr<T>: the error type that crosses module boundaries.
//
// A Status is OK or carries a code and a human-readable message. The server maps codes to
// HTTP/gRPC statuses in one place (server/error_mapping). StatusOr<T> holds a T or a non-OK
// Status. Both are plain values; thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "common/check.h"

namespace kvserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad request or malformed input (HTTP 400)
  kNotFound,           // unknown model, route, session (404)
  kOutOfRange,         // e.g. prompt longer than the context (400)
  kResourceExhausted,  // queue full, no KV memory (429)
  kUnavailable,        // not ready, draining (503)
  kUnauthenticated,    // missing/invalid API key (401)
  kFailedPrecondition, // operation not valid in the current state
  kCancelled,          // client went away or aborted
  kDataLoss,           // corrupt file
  kUnimplemented,
  kDeadlineExceeded,  // work past its time limit (a schema too slow to compile: 400)
  kInternal,           // broken invariant that was caught, fault injection (500)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context` (e.g. the file name).
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status OutOfRangeError(std::string message);
Status ResourceExhaustedError(std::string message);
Status UnavailableError(std::string message);
Status UnauthenticatedError(std::string message);
Status FailedPreconditionError(std::string message);
Status CancelledError(std::string message);
Status DataLossError(std::string message);
Status UnimplementedError(std::string message);
Status DeadlineExceededError(std::string message);
Status InternalError(std::string message);

// `text` cut to at most `max_bytes` at a UTF-8 character boundary, with "..." when cut: error
// messages that quote a client's input (a 40 KB regex) stay short enough for a gRPC status
// (its trailers hold 8 KiB) and a log line, and stay valid UTF-8.
std::string Abbreviated(std::string_view text, size_t max_bytes = 80);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    CHECK(!status_.ok()) << "StatusOr built from an OK status without a value";
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    CHECK(ok()) << status_.ToString();
    return *value_;
  }
  const T& value() const& {
    CHECK(ok()) << status_.ToString();
    return *value_;
  }
  T&& value() && {
    CHECK(ok()) << status_.ToString();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace kvserve

#define KV_CONCAT_INNER_(a, b) a##b
#define KV_CONCAT_(a, b) KV_CONCAT_INNER_(a, b)

// Returns early from the enclosing function with the status if it is not OK.
#define RETURN_IF_ERROR(expr)                              \
  do {                                                     \
    ::kvserve::Status kv_status_ = (expr);                 \
    if (!kv_status_.ok()) return kv_status_;               \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MaybeX()); returns the error or binds the value.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(KV_CONCAT_(kv_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
