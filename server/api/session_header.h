// The chat session id may come in the request body ("session_id", gRPC `session_id`) or in the
// X-Session-Id header (gRPC metadata `x-session-id`), the header that load balancers hash to
// keep a session on one replica (deploy/k8s/gateway.yaml). Either alone is enough; both must
// agree.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace kvserve {

inline constexpr std::string_view kSessionHeader = "x-session-id";

// `*session_id` (from the body) merged with the header's value: the header fills an empty id;
// INVALID_ARGUMENT when both are set and differ.
[[nodiscard]] inline Status MergeSessionHeader(std::string_view header, std::string* session_id) {
  if (header.empty() || *session_id == header) return OkStatus();
  if (!session_id->empty()) {
    return InvalidArgumentError("session_id and the X-Session-Id header name different sessions");
  }
  *session_id = std::string(header);
  return OkStatus();
}

}  // namespace kvserve
