// `kvserve serve`'s KV-event flags (server/events/kv_event_publisher.h): binding them, and
// starting the publisher with the served model, the HTTP port and the pool's block size.
// Main thread only.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "server/events/kv_event_publisher.h"

namespace CLI {
class App;
}

namespace kvserve::cli {

struct KvEventsFlags {
  std::string endpoint;
  std::string replay_endpoint;
  std::string topic;  // "": kv@<$POD_IP or host name>:<HTTP port>@<model id>
  std::string hash_seed = "vllm-none-hash";
};

void AddKvEventsOptions(CLI::App* app, KvEventsFlags* flags);

// nullptr without --kv-events-endpoint.
StatusOr<std::unique_ptr<KvEventPublisher>> StartKvEvents(const KvEventsFlags& flags, const std::string& model_id,
                                                          int http_port, int block_size, bool prefix_caching);

}  // namespace kvserve::cli
