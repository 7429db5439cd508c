// KvEventPublisher: publishes the engine's prefix-cache changes as KV events on ZMQ, the way
// vLLM's ZmqEventPublisher does, for a prefix-aware router (llm-d's KV-cache indexer behind
// the Gateway API inference extension's endpoint picker). Wire format: kv_event_wire.h.
//
//   PUB socket at `endpoint`: bound if it contains '*' or "::" or is ipc:// or inproc://
//     (tcp://*:5557), else connected (tcp://indexer:5557, the indexer binding). One message
//     per engine step with changes: [topic, 8-byte big-endian sequence number (0, 1, ...),
//     msgpack batch]. The first batch is AllBlocksCleared: a restarted replica starts empty.
//   ROUTER socket at `replay_endpoint` (optional, bound): a client sends the 8-byte
//     big-endian sequence number it wants to start from (REQ: [start]; DEALER: ["", start])
//     and gets every batch still buffered from there, each as [topic, seq, batch], then the
//     end marker ["", ff ff ff ff ff ff ff ff, ""]. The last `buffer_steps` batches are kept.
//
// Enqueue runs on the engine thread and only moves the events into a queue; hashing, encoding
// and sockets live on the publisher's own thread. A queue beyond `max_queue` batches (a stuck
// network) drops the oldest and counts it; ZMQ drops what its high-water mark cannot hold, as
// vLLM's does: a subscriber that misses batches sees a gap in the sequence numbers and can
// replay.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/prefix_index.h"
#include "common/status.h"

namespace kvserve {

// What the publisher has done so far (exported as kvserve_kv_events_*_total).
struct KvEventCounters {
  std::atomic<int64_t> batches_published{0};
  std::atomic<int64_t> batches_dropped{0};  // the queue overflowed: the router's view went stale
};

struct KvEventsOptions {
  std::string endpoint;         // tcp://*:5557 (bound) or tcp://host:5557 (connected), ipc://...
  std::string replay_endpoint;  // "": no replay
  std::string topic;            // kv@<pod id>@<model name>
  std::string hash_seed = "vllm-none-hash";
  int block_size = 16;
  int buffer_steps = 10000;
  int hwm = 100000;
  size_t max_queue = 100000;
};

class KvEventPublisher {
 public:
  // Opens the sockets (errors: INVALID_ARGUMENT for a bad endpoint, UNAVAILABLE when it
  // cannot bind) and starts the publisher thread.
  [[nodiscard]] static StatusOr<std::unique_ptr<KvEventPublisher>> Start(const KvEventsOptions& options);
  // Publishes what is queued, then closes the sockets (lingering up to a second).
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // One engine step's prefix events. Thread-safe; never blocks on the network.
  void Enqueue(std::vector<PrefixEvent> events);

  const KvEventCounters& counters() const { return counters_; }

 private:
  struct Sockets;
  explicit KvEventPublisher(const KvEventsOptions& options);
  void Run(Sockets* sockets);

  const KvEventsOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<PrefixEvent>> queue_;
  bool stop_ = false;
  KvEventCounters counters_;
  std::unique_ptr<Sockets> sockets_;
  std::thread thread_;
};

}  // namespace kvserve
