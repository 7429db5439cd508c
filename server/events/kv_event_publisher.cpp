#include "server/events/kv_event_publisher.h"

#include <fmt/format.h>

#include <chrono>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/log.h"
#include "server/events/kv_event_wire.h"

namespace kvserve {
namespace {

// vLLM's rule: an address with a wildcard, or a local transport, is ours to bind.
bool Binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

std::string SeqBytes(uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) out[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
  return out;
}

uint64_t SeqValue(const zmq::message_t& m) {
  uint64_t v = 0;
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  zmq::socket_t replay{context, zmq::socket_type::router};
  bool has_replay = false;
};

KvEventPublisher::KvEventPublisher(const KvEventsOptions& options) : options_(options) {}

StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(const KvEventsOptions& options) {
  if (options.endpoint.find("://") == std::string::npos) {
    return InvalidArgumentError(
        fmt::format("--kv-events-endpoint '{}' is not a ZMQ address (tcp://*:5557)", options.endpoint));
  }
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(options));
  auto sockets = std::make_unique<Sockets>();
  std::string flag = "--kv-events-endpoint", address = options.endpoint;
  try {
    sockets->pub.set(zmq::sockopt::sndhwm, options.hwm);
    sockets->pub.set(zmq::sockopt::linger, 1000);
    if (Binds(options.endpoint)) {
      sockets->pub.bind(options.endpoint);
    } else {
      sockets->pub.connect(options.endpoint);
    }
    if (!options.replay_endpoint.empty()) {
      flag = "--kv-events-replay-endpoint", address = options.replay_endpoint;
      sockets->replay.set(zmq::sockopt::linger, 0);
      // A request is 8 bytes: a peer that sends more is dropped before it costs memory.
      sockets->replay.set(zmq::sockopt::maxmsgsize, int64_t{256});
      sockets->replay.bind(options.replay_endpoint);
      sockets->has_replay = true;
    }
  } catch (const zmq::error_t& e) {
    return UnavailableError(fmt::format("{} '{}': {}", flag, address, e.what()));
  }
  p->sockets_ = std::move(sockets);
  p->thread_ = std::thread([raw = p.get()] { raw->Run(raw->sockets_.get()); });  // the sockets move to this thread
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::Enqueue(std::vector<PrefixEvent> events,
                               const std::function<std::vector<PrefixEvent>()>& current_state) {
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.max_queue) {
      // What the queue held, and this step, are in the index's state now: start over from it.
      counters_.batches_dropped.fetch_add(static_cast<int64_t>(queue_.size()), std::memory_order_relaxed);
      queue_.clear();
      queue_.push_back({next_seq_++, /*reset=*/true, current_state()});
    } else {
      queue_.push_back({next_seq_++, /*reset=*/false, std::move(events)});
    }
  }
  cv_.notify_one();
}

void KvEventPublisher::Run(Sockets* s) {
  KvEventTranslator translator(options_.hash_seed);
  std::deque<std::pair<uint64_t, std::string>> ring;  // the last buffer_steps batches, for replay
  const auto publish = [&](uint64_t seq, const std::vector<KvWireEvent>& events) {
    std::string payload = EncodeKvEventBatch(NowSeconds(), events, options_.block_size);
    s->pub.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore);
    s->pub.send(zmq::buffer(SeqBytes(seq)), zmq::send_flags::sndmore);
    s->pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
    if (s->has_replay) {
      ring.emplace_back(seq, std::move(payload));
      if (ring.size() > static_cast<size_t>(options_.buffer_steps)) ring.pop_front();
    }
    counters_.batches_published.fetch_add(1, std::memory_order_relaxed);
  };
  const auto serve_replays = [&] {
    std::vector<zmq::message_t> request;
    while (zmq::recv_multipart(s->replay, std::back_inserter(request), zmq::recv_flags::dontwait)) {
      if (request.size() >= 2) {
        const zmq::message_t& client = request.front();
        const uint64_t start = SeqValue(request.back());
        const auto reply = [&](std::string_view topic, std::string_view seq_bytes, std::string_view payload) {
          s->replay.send(zmq::buffer(client.data(), client.size()), zmq::send_flags::sndmore);
          s->replay.send(zmq::message_t(), zmq::send_flags::sndmore);
          s->replay.send(zmq::buffer(topic), zmq::send_flags::sndmore);
          s->replay.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
          s->replay.send(zmq::buffer(payload), zmq::send_flags::none);
        };
        for (const auto& [n, payload] : ring) {
          if (n >= start) reply(options_.topic, SeqBytes(n), payload);
        }
        reply("", SeqBytes(~uint64_t{0}), "");
      }
      request.clear();
    }
  };

  try {
    const KvWireEvent cleared{KvWireEvent::Kind::kAllBlocksCleared, {}, std::nullopt, {}};
    publish(0, {cleared});
    for (bool done = false; !done;) {
      if (options_.test_before_round) options_.test_before_round();
      std::deque<Batch> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(s->has_replay ? 20 : 500),
                     [&] { return stop_ || !queue_.empty(); });
        work.swap(queue_);
        done = stop_;
      }
      // Every numbered batch is published, empty or not: a missing number means a loss.
      for (const Batch& b : work) {
        std::vector<KvWireEvent> wire;
        if (b.reset) {
          translator.Reset();
          wire.push_back(cleared);
        }
        std::vector<KvWireEvent> step = translator.Translate(b.events);
        wire.insert(wire.end(), std::make_move_iterator(step.begin()), std::make_move_iterator(step.end()));
        publish(b.seq, wire);
      }
      if (s->has_replay) serve_replays();
    }
  } catch (const zmq::error_t& e) {
    LOG_ERROR("KV events: publisher stopped: {}", e.what());
  }
  if (translator.num_orphans() > 0) {
    LOG_WARN("KV events: {} stored blocks had an unpublished parent and were not announced", translator.num_orphans());
  }
}

}  // namespace kvserve
