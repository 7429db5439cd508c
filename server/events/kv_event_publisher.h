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
// Enqueue runs on the engine thread and only moves the events into a queue, numbered there;
// hashing, encoding and sockets live on the publisher's own thread. Events are never lost
// silently: when the queue holds `max_queue` batches (a publisher that cannot keep up), the
// queued batches are dropped (their numbers never appear: subscribers see the gap) and the
// next batch is AllBlocksCleared followed by every block the prefix index holds now, so a
// subscriber that applies batches in order ends with the engine's exact view again. ZMQ drops
// what its high-water mark cannot hold, as vLLM's does: a gap, which replay fills.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
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
  // Tests: runs on the publisher thread before it takes each round of queued batches.
  std::function<void()> test_before_round;
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

  // One engine step's prefix events. `current_state` (the whole index as events, engine
  // thread) is called only when the queue overflowed. Never blocks on the network.
  void Enqueue(std::vector<PrefixEvent> events, const std::function<std::vector<PrefixEvent>()>& current_state);

  const KvEventCounters& counters() const { return counters_; }

 private:
  struct Sockets;
  explicit KvEventPublisher(const KvEventsOptions& options);
  void Run(Sockets* sockets);

  const KvEventsOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Batch {
    uint64_t seq;
    bool reset;  // AllBlocksCleared, then `events` (the whole index)
    std::vector<PrefixEvent> events;
  };
  std::deque<Batch> queue_;
  uint64_t next_seq_ = 1;  // 0: the AllBlocksCleared of the start
  bool stop_ = false;
  KvEventCounters counters_;
  std::unique_ptr<Sockets> sockets_;
  std::thread thread_;
};

}  // namespace kvserve
