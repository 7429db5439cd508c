// The one place where Status codes become HTTP statuses, OpenAI error types and gRPC codes.
#pragma once

#include <string>

#include "common/status.h"

namespace kvserve {

int HttpStatusFor(StatusCode code);
// OpenAI's error "type": invalid_request_error, authentication_error, not_found_error,
// rate_limit_error, server_error, service_unavailable_error.
const char* OpenAiErrorTypeFor(StatusCode code);
// grpc::StatusCode as int (kept free of gRPC headers so HTTP code need not include them).
int GrpcCodeFor(StatusCode code);

}  // namespace kvserve
