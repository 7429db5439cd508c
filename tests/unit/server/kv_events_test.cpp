// KV events (server/events): block hashes against vLLM's own (a BlockStored event vLLM
// published, recorded in llm-d's test data: tests/data/kv_events), the msgpack batch byte for
// byte against what vLLM's msgspec encoder writes for the same event, the translation of the
// prefix index's events (chains, removals, salts, orphans), and the publisher over real ZMQ
// sockets: a SUB subscriber and a replay request on a DEALER.
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "server/events/kv_event_hash.h"
#include "server/events/kv_event_publisher.h"
#include "server/events/kv_event_wire.h"

namespace kvserve {
namespace kv_events_test {

nlohmann::json VllmFixture() {
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/kv_events/vllm_sha256_cbor_blocks.json");
  return nlohmann::json::parse(in);
}

std::string Hex(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

std::vector<int32_t> Tokens(int first, int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

PrefixEvent Stored(BlockId block, uint64_t epoch, PrefixRef parent, std::vector<int32_t> tokens,
                   std::string salt = "") {
  return {PrefixEvent::Kind::kStored, {block, epoch}, parent, std::move(tokens), std::move(salt)};
}
PrefixEvent Removed(BlockId block, uint64_t epoch) { return {PrefixEvent::Kind::kRemoved, {block, epoch}, {}, {}, {}}; }

TEST(KvEventHash, RootDigestsAreVllmsForItsSeeds) {
  // vLLM's NONE_HASH: sha256(CBOR(PYTHONHASHSEED)), and its default seed since it has one.
  const KvEventDigest r42 = KvEventRootDigest("42");
  EXPECT_EQ(Hex({reinterpret_cast<const char*>(r42.data()), r42.size()}),
            "9fa6eb003f14425eb9c8e6baacfbcaab26257357b829c7bfa74ffcc4f31c1780");
  const KvEventDigest rd = KvEventRootDigest("vllm-none-hash");
  EXPECT_EQ(Hex({reinterpret_cast<const char*>(rd.data()), rd.size()}),
            "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0");
}

TEST(KvEventHash, ChainReproducesVllmsPublishedHashes) {
  const nlohmann::json f = VllmFixture();
  const std::vector<int32_t> tokens = f["token_ids"].get<std::vector<int32_t>>();
  const std::vector<uint64_t> want = f["block_hashes"].get<std::vector<uint64_t>>();
  const int bs = f["block_size"].get<int>();
  ASSERT_EQ(tokens.size(), want.size() * static_cast<size_t>(bs));
  KvEventDigest parent = KvEventRootDigest(f["hash_seed"].get<std::string>());
  for (size_t b = 0; b < want.size(); ++b) {
    parent = KvEventBlockDigest(parent, std::span(tokens).subspan(b * bs, static_cast<size_t>(bs)), "");
    EXPECT_EQ(KvEventHashValue(parent), want[b]) << "block " << b;
  }
}

TEST(KvEventWire, BatchIsByteForByteWhatVllmEncodes) {
  // vLLM 0.11-0.25's msgspec encoding of this fixture's first block as a one-event batch at
  // ts 1700000000.5 (array-like structs, tag first, lora_name present, extra_keys omitted).
  const nlohmann::json f = VllmFixture();
  const std::vector<int32_t> all = f["token_ids"].get<std::vector<int32_t>>();
  KvWireEvent e{KvWireEvent::Kind::kBlockStored, {f["block_hashes"][0].get<uint64_t>()}, std::nullopt,
                std::vector<int32_t>(all.begin(), all.begin() + 16)};
  EXPECT_EQ(Hex(EncodeKvEventBatch(1700000000.5, {e}, 16)),
            "93cb41d954fc40200000" "91" "98" "ab426c6f636b53746f726564" "91" "cff5b600d19aef97ac" "c0"
            "dc0010cd0822cd0459cd085ecd0176cd0108cd1354cd4ab8cd0143cd1c23cd01adcd0176ce0001032fcd03aacd013bcd2bbecd0143"
            "10" "c0" "a3475055" "c0" "00");
  // Small hashes keep the full-width head (llm-d accepts only uint64 / int64 / bytes).
  KvWireEvent removed{KvWireEvent::Kind::kBlockRemoved, {5}, std::nullopt, {}};
  KvWireEvent cleared{KvWireEvent::Kind::kAllBlocksCleared, {}, std::nullopt, {}};
  EXPECT_EQ(Hex(EncodeKvEventBatch(0.0, {removed, cleared}, 16)),
            "93cb0000000000000000" "92" "93ac426c6f636b52656d6f766564" "91cf0000000000000005" "a3475055"
            "91b0416c6c426c6f636b73436c6561726564" "00");
}

TEST(KvEventTranslator, ChainsAreGroupedAndHashedFromTheirParents) {
  KvEventTranslator tr("42");
  const std::vector<int32_t> a = Tokens(100, 16), b = Tokens(200, 16), c = Tokens(300, 16);
  std::vector<KvWireEvent> out = tr.Translate({Stored(3, 1, kPrefixRoot, a), Stored(7, 2, {3, 1}, b)});
  ASSERT_EQ(out.size(), 1u);
  const KvEventDigest da = KvEventBlockDigest(KvEventRootDigest("42"), a, "");
  const KvEventDigest db = KvEventBlockDigest(da, b, "");
  EXPECT_EQ(out[0].kind, KvWireEvent::Kind::kBlockStored);
  EXPECT_EQ(out[0].hashes, (std::vector<uint64_t>{KvEventHashValue(da), KvEventHashValue(db)}));
  EXPECT_FALSE(out[0].parent.has_value());
  std::vector<int32_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  EXPECT_EQ(out[0].tokens, ab);
  // A later step extends the chain from block 7 (a new event naming its parent), and a
  // branch from block 3; then two removals become one BlockRemoved.
  out = tr.Translate({Stored(9, 3, {7, 2}, c), Stored(4, 4, {3, 1}, c), Removed(9, 3), Removed(4, 4)});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].parent, KvEventHashValue(db));
  EXPECT_EQ(out[0].hashes[0], KvEventHashValue(KvEventBlockDigest(db, c, "")));
  EXPECT_EQ(out[1].parent, KvEventHashValue(da));
  EXPECT_EQ(out[2].kind, KvWireEvent::Kind::kBlockRemoved);
  EXPECT_EQ(out[2].hashes, (std::vector<uint64_t>{out[0].hashes[0], out[1].hashes[0]}));
  EXPECT_EQ(tr.num_known_blocks(), 2u);
  // The same block id at a new epoch is a new block: its parent must be the new one.
  out = tr.Translate({Removed(3, 1), Stored(3, 5, kPrefixRoot, b), Stored(8, 6, {3, 1}, c)});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].hashes[0], KvEventHashValue(KvEventBlockDigest(KvEventRootDigest("42"), b, "")));
  EXPECT_EQ(tr.num_orphans(), 1);  // block 8 named the forgotten epoch-1 block 3
}

TEST(KvEventTranslator, SaltedChainsAreUnguessableAndCarryNoText) {
  KvEventTranslator tr("42");
  const std::vector<int32_t> a = Tokens(100, 16), b = Tokens(200, 16);
  std::vector<KvWireEvent> out = tr.Translate({Stored(1, 1, kPrefixRoot, a, "alice"), Stored(2, 2, {1, 1}, b, "alice"),
                                               Stored(3, 3, kPrefixRoot, a, "bob"), Stored(4, 4, kPrefixRoot, a)});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].hashes.size(), 2u);
  EXPECT_TRUE(out[0].tokens.empty());  // a tenant's text never leaves the server
  EXPECT_TRUE(out[1].tokens.empty());
  EXPECT_EQ(out[2].tokens, a);
  // The same tokens under another salt, or none, hash differently.
  EXPECT_NE(out[0].hashes[0], out[1].hashes[0]);
  EXPECT_NE(out[0].hashes[0], out[2].hashes[0]);
  EXPECT_NE(out[1].hashes[0], out[2].hashes[0]);
  // vLLM's cache_salt rule: the salt is in the first block's extra_keys; the chain carries it.
  const KvEventDigest first = KvEventBlockDigest(KvEventRootDigest("42"), a, "alice");
  EXPECT_EQ(out[0].hashes[0], KvEventHashValue(first));
  EXPECT_EQ(out[0].hashes[1], KvEventHashValue(KvEventBlockDigest(first, b, "")));
}

// A message of three frames, waiting up to `ms`.
std::vector<zmq::message_t> Receive(zmq::socket_t& s, int ms) {
  s.set(zmq::sockopt::rcvtimeo, ms);
  std::vector<zmq::message_t> frames;
  (void)zmq::recv_multipart(s, std::back_inserter(frames));
  return frames;
}

uint64_t BigEndian(const zmq::message_t& m) {
  uint64_t v = 0;
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

// A SUB socket on the publisher's topics, connected long enough for its subscription to
// arrive (ZMQ's slow joiner: a message sent before that is not delivered to it).
zmq::socket_t Subscribe(zmq::context_t& ctx, const std::string& endpoint) {
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv@");
  sub.connect(endpoint);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return sub;
}

TEST(KvEventPublisher, PublishesBatchesAndReplaysThem) {
  const std::string dir = ::testing::TempDir();
  KvEventsOptions o;
  o.endpoint = "ipc://" + dir + "kv-events-" + std::to_string(getpid());
  o.replay_endpoint = o.endpoint + "-replay";
  o.topic = "kv@10.0.0.5:8080@tiny";
  o.hash_seed = "42";
  StatusOr<std::unique_ptr<KvEventPublisher>> pub = KvEventPublisher::Start(o);
  ASSERT_TRUE(pub.ok()) << pub.status().message();

  zmq::context_t ctx;
  zmq::socket_t sub = Subscribe(ctx, o.endpoint);
  const auto no_state = [] { return std::vector<PrefixEvent>{}; };  // never asked: no overflow
  (*pub)->Enqueue({Stored(1, 1, kPrefixRoot, Tokens(0, 16))}, no_state);
  (*pub)->Enqueue({Removed(1, 1)}, no_state);
  std::vector<zmq::message_t> m = Receive(sub, 5000);
  ASSERT_EQ(m.size(), 3u);
  if (BigEndian(m[1]) == 0) m = Receive(sub, 5000);  // the AllBlocksCleared sent at start, if we joined in time
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].to_string(), o.topic);
  EXPECT_EQ(m[1].size(), 8u);
  ASSERT_EQ(BigEndian(m[1]), 1u);
  msgpack::object_handle h = msgpack::unpack(static_cast<const char*>(m[2].data()), m[2].size());
  const msgpack::object& batch = h.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);
  const msgpack::object& ev = batch.via.array.ptr[1].via.array.ptr[0];
  ASSERT_EQ(ev.via.array.size, 8u);
  EXPECT_EQ(ev.via.array.ptr[0].as<std::string>(), "BlockStored");
  const uint64_t hash = ev.via.array.ptr[1].via.array.ptr[0].as<uint64_t>();
  EXPECT_EQ(hash, KvEventHashValue(KvEventBlockDigest(KvEventRootDigest("42"), Tokens(0, 16), "")));
  m = Receive(sub, 5000);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(BigEndian(m[1]), 2u);

  // Replay from 0: all three batches, then the end marker.
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.connect(o.replay_endpoint);
  const std::string start(8, '\0');
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start), zmq::send_flags::none);
  std::vector<uint64_t> seqs;
  for (;;) {
    std::vector<zmq::message_t> r = Receive(dealer, 5000);
    ASSERT_EQ(r.size(), 4u);  // delimiter, topic, seq, payload
    if (BigEndian(r[2]) == ~uint64_t{0}) {
      EXPECT_EQ(r[1].size(), 0u);
      EXPECT_EQ(r[3].size(), 0u);
      break;
    }
    EXPECT_EQ(r[1].to_string(), o.topic);
    seqs.push_back(BigEndian(r[2]));
    if (seqs.back() == 0) {
      msgpack::object_handle first = msgpack::unpack(static_cast<const char*>(r[3].data()), r[3].size());
      EXPECT_EQ(first.get().via.array.ptr[1].via.array.ptr[0].via.array.ptr[0].as<std::string>(), "AllBlocksCleared");
    }
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ((*pub)->counters().batches_published.load(), 3);
  EXPECT_EQ((*pub)->counters().batches_dropped.load(), 0);
}

// A subscriber's view, built as a router builds it: the block hashes of BlockStored, less those
// of BlockRemoved, cleared by AllBlocksCleared.
void Apply(const zmq::message_t& payload, std::set<uint64_t>* view) {
  msgpack::object_handle h = msgpack::unpack(static_cast<const char*>(payload.data()), payload.size());
  const msgpack::object& events = h.get().via.array.ptr[1];
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    const msgpack::object& ev = events.via.array.ptr[i];
    const std::string tag = ev.via.array.ptr[0].as<std::string>();
    if (tag == "AllBlocksCleared") {
      view->clear();
      continue;
    }
    const msgpack::object& hashes = ev.via.array.ptr[1];
    for (uint32_t j = 0; j < hashes.via.array.size; ++j) {
      const uint64_t hash = hashes.via.array.ptr[j].as<uint64_t>();
      if (tag == "BlockStored") {
        view->insert(hash);
      } else {
        view->erase(hash);
      }
    }
  }
}

// Issue 54: a queue overflow dropped batches before they were numbered, so a subscriber saw no
// gap and kept blocks that were gone (or missed new ones) for good. Now the lost numbers show
// as a gap and the batch after them rebuilds the view from the index itself.
TEST(KvEventPublisher, AnOverflowShowsAGapAndTheNextBatchRebuildsTheViewExactly) {
  const std::string dir = ::testing::TempDir();
  KvEventsOptions o;
  o.endpoint = "ipc://" + dir + "kv-events-overflow-" + std::to_string(getpid());
  o.topic = "kv@pod@tiny";
  o.hash_seed = "7";
  o.block_size = 4;
  o.max_queue = 2;
  std::atomic<bool> hold{false};
  o.test_before_round = [&hold] {
    while (hold.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  StatusOr<std::unique_ptr<KvEventPublisher>> pub = KvEventPublisher::Start(o);
  ASSERT_TRUE(pub.ok()) << pub.status().message();
  zmq::context_t ctx;
  zmq::socket_t sub = Subscribe(ctx, o.endpoint);

  // A real prefix index: chains published, extended and partly forgotten over 7 steps while
  // the publisher is held, so its queue of 2 overflows (twice).
  PrefixIndex index(64, 4, nullptr);
  index.set_record_events(true);
  const auto state = [&index] { return index.Snapshot(); };
  auto publish = [&index](BlockId id, PrefixRef parent, const BlockHash& parent_hash, int first) {
    const std::vector<int32_t> t = Tokens(first, 4);
    const BlockHash h = index.Hash(parent_hash, t, "");
    EXPECT_TRUE(index.Publish(id, h, parent_hash, parent, t, "").has_value());
    return std::pair{index.ref(id), h};
  };
  hold = true;
  BlockHash root{};
  std::vector<std::pair<PrefixRef, BlockHash>> chain;
  for (int step = 0; step < 7; ++step) {
    for (int k = 0; k < 3; ++k) {
      const BlockId id = step * 3 + k;
      const auto [parent, parent_hash] = chain.empty() || k == 0 ? std::pair{kPrefixRoot, root} : chain.back();
      chain.push_back(publish(id, parent, parent_hash, 100 * id));
    }
    if (step % 2 == 1) index.Remove(step * 3 + 2);  // the leaf of this step's chain
    (*pub)->Enqueue(index.TakeEvents(), state);
  }
  hold = false;

  std::set<uint64_t> view;
  std::vector<uint64_t> seqs;
  while (seqs.empty() || seqs.back() < 7) {
    std::vector<zmq::message_t> m = Receive(sub, 5000);
    ASSERT_EQ(m.size(), 3u) << "after " << seqs.size() << " batches";
    seqs.push_back(BigEndian(m[1]));
    Apply(m[2], &view);
  }
  // Batches 1-2 (queued when step 3 overflowed) and 4-5 (step 6) never appear.
  EXPECT_EQ(seqs.back(), 7u);
  EXPECT_LT(seqs.size(), 8u);
  EXPECT_GE((*pub)->counters().batches_dropped.load(), 2);
  // The view is exactly the index's blocks, hashed as a translator that saw every event would.
  KvEventTranslator reference("7");
  std::set<uint64_t> expected;
  for (const KvWireEvent& e : reference.Translate(index.Snapshot())) expected.insert(e.hashes.begin(), e.hashes.end());
  EXPECT_EQ(index.num_indexed(), 7 * 3 - 3);
  EXPECT_EQ(expected.size(), static_cast<size_t>(index.num_indexed()));
  EXPECT_EQ(view, expected);
}

TEST(KvEventPublisher, RefusesAddressesItCannotUse) {
  KvEventsOptions o;
  o.endpoint = "localhost:5557";
  EXPECT_EQ(KvEventPublisher::Start(o).status().code(), StatusCode::kInvalidArgument);
  o.endpoint = "tcp://*:notaport";
  EXPECT_EQ(KvEventPublisher::Start(o).status().code(), StatusCode::kUnavailable);
}

}  // namespace kv_events_test
}  // namespace kvserve
