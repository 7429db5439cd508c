#include "cli/kv_events_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#include "common/log.h"

namespace kvserve::cli {

void AddKvEventsOptions(CLI::App* app, KvEventsFlags* f) {
  app->add_option("--kv-events-endpoint", f->endpoint,
                  "Publish KV-cache events (blocks stored and removed, vLLM's format) for a prefix-aware router "
                  "on this ZMQ address: tcp://*:5557 binds, tcp://host:port connects");
  app->add_option("--kv-events-replay-endpoint", f->replay_endpoint,
                  "ZMQ ROUTER address (bound) that replays buffered event batches from a sequence number");
  app->add_option("--kv-events-topic", f->topic,
                  "Topic of every event message (default kv@<$POD_IP or host name>:<HTTP port>@<model id>)");
  app->add_option("--kv-events-hash-seed", f->hash_seed,
                  "Seed of the block hashes (vLLM's PYTHONHASHSEED; default vLLM's own, vllm-none-hash)");
}

StatusOr<std::unique_ptr<KvEventPublisher>> StartKvEvents(const KvEventsFlags& f, const std::string& model_id,
                                                          int http_port, int block_size, bool prefix_caching) {
  if (f.endpoint.empty()) return std::unique_ptr<KvEventPublisher>();
  if (model_id.find('@') != std::string::npos && f.topic.empty()) {
    return InvalidArgumentError(fmt::format("the model id '{}' has an '@', which a KV-event topic cannot carry: "
                                            "give --kv-events-topic or another --served-model-name", model_id));
  }
  KvEventsOptions o;
  o.endpoint = f.endpoint;
  o.replay_endpoint = f.replay_endpoint;
  o.hash_seed = f.hash_seed;
  o.block_size = block_size;
  o.topic = f.topic;
  if (o.topic.empty()) {
    std::string pod;
    if (const char* ip = std::getenv("POD_IP"); ip != nullptr && *ip != '\0') {
      pod = ip;
    } else {
      char host[256] = {};
      pod = gethostname(host, sizeof(host) - 1) == 0 ? host : "localhost";
    }
    o.topic = fmt::format("kv@{}:{}@{}", pod, http_port, model_id);
  }
  StatusOr<std::unique_ptr<KvEventPublisher>> p = KvEventPublisher::Start(o);
  if (!p.ok()) return p.status();
  LOG_INFO("KV events on {} (topic {}, {}-token blocks{})", o.endpoint, o.topic, block_size,
           o.replay_endpoint.empty() ? "" : ", replay on " + o.replay_endpoint);
  if (!prefix_caching) LOG_WARN("KV events: prefix caching is off, so no block will ever be published");
  return p;
}

}  // namespace kvserve::cli
