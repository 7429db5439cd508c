#include "server/http/console.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <string_view>

namespace kvserve {

// The page's bytes (generated at build time from server/http/console/index.html).
extern const char kConsoleHtml[];

namespace {

using json = nlohmann::ordered_json;  // as the other http/ files (one unity TU)

json OwnerJson(const CacheOwner& o, const KvBlockMap::Seq& seq, const std::string& caller_tenant,
               bool hide_other_tenants, uint64_t label_key) {
  const bool mine = !hide_other_tenants || o.tenant == caller_tenant;
  std::string id;
  std::string kind;
  switch (o.kind) {
    case CacheOwner::Kind::kRequest:
      id = fmt::format("req-{}", o.request_id);
      kind = "request";
      break;
    case CacheOwner::Kind::kSession:
      id = "session:" + o.session_id;
      kind = "session";
      break;
    case CacheOwner::Kind::kUnknown:
      id = fmt::format("seq-{}", seq.id);
      kind = "unknown";
      break;
  }
  json j;
  if (mine) {
    j = {{"id", id}, {"kind", kind}, {"state", o.state}, {"tokens", seq.num_tokens},
         {"evicted_tokens", o.evicted_tokens}, {"cached_prompt_tokens", o.cached_prompt_tokens},
         {"choice", o.choice}, {"session_id", o.session_id}};
  } else {
    const uint64_t h = std::hash<std::string>{}(fmt::format("{}\n{}\n{}", label_key, o.tenant, id));
    j = {{"id", fmt::format("other-{:06x}", h & 0xffffff)}, {"kind", "other"}, {"state", ""}, {"tokens", 0},
         {"evicted_tokens", 0}, {"cached_prompt_tokens", 0}, {"choice", 0}, {"session_id", ""}};
  }
  j["blocks"] = seq.num_blocks;
  j["host_blocks"] = seq.num_host_blocks;
  return j;
}

// Runs of equal (state, holder, fill) over block ids [begin, end): [count, state, holder, fill].
json Runs(const KvBlockMap& map, int begin, int end) {
  json runs = json::array();
  for (int b = begin; b < end;) {
    const size_t i = static_cast<size_t>(b);
    int next = b + 1;
    while (next < end && map.state[static_cast<size_t>(next)] == map.state[i] &&
           map.holder[static_cast<size_t>(next)] == map.holder[i] && map.fill[static_cast<size_t>(next)] == map.fill[i]) {
      ++next;
    }
    runs.push_back({next - b, static_cast<int>(map.state[i]), map.holder[i], map.fill[i]});
    b = next;
  }
  return runs;
}

}  // namespace

HttpReply ConsoleReply() {
  HttpReply reply;
  reply.content_type = "text/html; charset=utf-8";
  reply.body = kConsoleHtml;
  reply.headers.emplace_back("Cache-Control", "no-cache");
  return reply;
}

std::string CacheBlocksJson(const CacheSnapshot& snapshot, const std::string& caller_tenant, bool hide_other_tenants,
                            uint64_t label_key) {
  const KvBlockMap& map = snapshot.blocks;
  const EngineStats& stats = snapshot.stats;
  json states = json::array();
  json counts = json::object();
  for (int s = 0; s < kNumBlockStates; ++s) {
    states.push_back(BlockStateName(static_cast<BlockState>(s)));
    counts[BlockStateName(static_cast<BlockState>(s))] = map.counts[static_cast<size_t>(s)];
  }
  counts["host_total"] = map.host_total_blocks;
  counts["host_used"] = map.host_used_blocks;
  counts["prefix_indexed"] = map.prefix_indexed;
  json owners = json::array();
  for (size_t k = 0; k < map.seqs.size(); ++k) {
    owners.push_back(OwnerJson(snapshot.owners[k], map.seqs[k], caller_tenant, hide_other_tenants, label_key));
  }
  json evicted = json::object();
  for (int r = 0; r < kNumEvictionReasons; ++r) {
    evicted[EvictionReasonName(static_cast<EvictionReason>(r))] = stats.cache.evicted_blocks[static_cast<size_t>(r)];
  }
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  json out = {
      {"object", "kv_cache.blocks"},
      {"time", now},
      {"block_size", map.block_size},
      {"num_blocks", map.num_blocks()},
      {"bytes_per_block", stats.cache.block_bytes},
      {"dtype", snapshot.kv_dtype},
      {"states", states},
      {"counts", counts},
      {"runs", Runs(map, 0, map.num_blocks())},
      {"owners", owners},
      {"engine",
       {{"running", stats.running},
        {"waiting", stats.waiting},
        {"swapped", stats.swapped},
        {"tokens_per_second", stats.tokens_per_second},
        {"kv_usage_ratio", stats.cache.usage_ratio},
        {"preemptions_total", stats.preemptions_total},
        {"prefix_hit_tokens", stats.cache.prefix_hit_tokens},
        {"evicted_blocks", evicted}}},
  };
  if (map.num_compact_blocks > 0) {
    json compact_counts = json::object();
    for (BlockState s : {BlockState::kFree, BlockState::kUsed, BlockState::kShared}) {
      compact_counts[BlockStateName(s)] = map.compact_counts[static_cast<size_t>(s)];
    }
    // Block ids continue after the main region's: the first run is block num_blocks.
    out["compact"] = {{"num_blocks", map.num_compact_blocks},
                      {"bytes_per_block", snapshot.compact_block_bytes},
                      {"dtype", snapshot.compact_dtype},
                      {"counts", compact_counts},
                      {"runs", Runs(map, map.num_blocks(), map.num_blocks() + map.num_compact_blocks)}};
  }
  return out.dump();
}

}  // namespace kvserve
