// Plain values passed between the Beast connection code (http_server.cpp) and the Beast-free
// route handlers (http_router, http_generation, openai_*): a parsed request and a complete
// reply. (ApiError, an error before it becomes an OpenAI-style body, is in api/error_mapping.h.)
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "server/api/error_mapping.h"  // ApiError

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

}  // namespace kvserve
