// The one place where Status codes become HTTP statuses, OpenAI error types and gRPC codes,
// and ApiError: an error as a front end reports it (both front ends build them through
// RequestBuilder).
#pragma once

#include <string>
#include <utility>

#include "common/status.h"

namespace kvserve {

int HttpStatusFor(StatusCode code);
// OpenAI's error "type": invalid_request_error, authentication_error, not_found_error,
// rate_limit_error, server_error, service_unavailable_error.
const char* OpenAiErrorTypeFor(StatusCode code);
// grpc::StatusCode as int (kept free of gRPC headers so HTTP code need not include them).
int GrpcCodeFor(StatusCode code);

// An error as the client will see it: {"error":{"message","type","param","code"}}.
// The HTTP status and the OpenAI type come from `status.code()` via HttpStatusFor,
// except for protocol errors that have no Status equivalent (405, 413, 431), which set
// `http_status`.
struct ApiError {
  Status status;
  std::string param;    // the offending request field, or "" (JSON null)
  std::string code;     // OpenAI error code ("model_not_found", ...), or "" (JSON null)
  int http_status = 0;  // 0: HttpStatusFor(status.code())

  int HttpStatus() const;
};

inline ApiError InvalidField(std::string param, std::string message) {
  return ApiError{InvalidArgumentError(std::move(message)), std::move(param), "", 0};
}

}  // namespace kvserve
