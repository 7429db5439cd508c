#include "server/api/error_mapping.h"

namespace kvserve {

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kOutOfRange: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kCancelled: return 499;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDataLoss:
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

const char* OpenAiErrorTypeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kFailedPrecondition: return "invalid_request_error";
    case StatusCode::kUnauthenticated: return "authentication_error";
    case StatusCode::kNotFound: return "not_found_error";
    case StatusCode::kResourceExhausted: return "rate_limit_error";
    case StatusCode::kUnavailable: return "service_unavailable_error";
    default: return "server_error";
  }
}

int GrpcCodeFor(StatusCode code) {
  // Values of grpc::StatusCode.
  switch (code) {
    case StatusCode::kOk: return 0;
    case StatusCode::kCancelled: return 1;
    case StatusCode::kInvalidArgument: return 3;
    case StatusCode::kDeadlineExceeded: return 4;
    case StatusCode::kNotFound: return 5;
    case StatusCode::kResourceExhausted: return 8;
    case StatusCode::kFailedPrecondition: return 9;
    case StatusCode::kOutOfRange: return 11;
    case StatusCode::kUnimplemented: return 12;
    case StatusCode::kInternal: return 13;
    case StatusCode::kUnavailable: return 14;
    case StatusCode::kDataLoss: return 15;
    case StatusCode::kUnauthenticated: return 16;
  }
  return 2;  // UNKNOWN
}

int ApiError::HttpStatus() const { return http_status != 0 ? http_status : HttpStatusFor(status.code()); }

}  // namespace kvserve
