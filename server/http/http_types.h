// Plain values passed between the Beast connection code (http_server.cpp) and the Beast-free
// route handlers (http_router, http_generation, openai_*): a parsed request, a complete
// reply, and an API error before it becomes an OpenAI-style error body.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvserve {

struct HttpRequestInfo {
  std::string method;         // "GET", "POST", ...
  std::string target;         // path and query, e.g. "/v1/models?x=1"
  std::string authorization;  // the Authorization header, or ""
  std::string session_id;     // the X-Session-Id header, or ""
  std::string body;
  std::string remote;         // peer address, for logs
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra: Retry-After, Allow, ...
};

// An error as the client will see it: {"error":{"message","type","param","code"}}.
// The HTTP status and the OpenAI type come from `status.code()` via server/error_mapping,
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
