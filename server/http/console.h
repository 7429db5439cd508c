// The web console: GET / serves the page (server/http/console/index.html, embedded in the
// binary at build time: no CDN, works offline), and GET /v1/cache/blocks the snapshot of the
// KV block pool it draws.
//
// GET /v1/cache/blocks (a compact snapshot; the pool is described run by run, not block by
// block):
//   {"object": "kv_cache.blocks", "time": <unix seconds>, "block_size", "num_blocks",
//    "bytes_per_block", "dtype": <KvSpec::Describe>,
//    "states": ["free", "used", "cached", "pinned", "shared"],
//    "counts": {"free", "used", "cached", "pinned", "shared", "host_total", "host_used",
//               "prefix_indexed"},   prefix_indexed: blocks a later prompt can reuse (what KV events
//               report as stored and not removed; "cached" ones plus those also held)
//    "runs": [[count, state, owner, fill], ...],   blocks 0.. in order; state: index into
//            "states"; owner: index into "owners" (the holder with the lowest sequence id),
//            -1 for none; fill: token positions held (0..block_size)
//    "owners": [{"id", "kind", "state", "tokens", "blocks", "host_blocks", "evicted_tokens",
//                "cached_prompt_tokens", "choice", "session_id"}, ...],
//    "engine": {"running", "waiting", "swapped", "tokens_per_second", "kv_usage_ratio",
//               "preemptions_total", "prefix_hit_tokens", "evicted_blocks": {<reason>: n}},
//    "compact": {"num_blocks", "bytes_per_block", "dtype", "counts": {"free", "used", "shared"},
//                "runs": [...]}}   only with a compaction region (--kv-compact-dtype): its
//            blocks, ids num_blocks.. in order, runs as above
// Owners: "req-<n>" (kind "request"; state waiting | running | swapped) and
// "session:<id>" (kind "session", an idle chat session's cache). With API keys on, another
// tenant's owner is "other-<hash>" (kind "other", stable for that owner within this
// process) with no details but its block counts.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "server/http/http_types.h"

namespace kvserve {

// text/html: the console page.
HttpReply ConsoleReply();

// The JSON above for `caller_tenant`. `hide_other_tenants`: API keys are on, so owners of
// other tenants are labelled with a keyed hash (`label_key`) and shown without details.
std::string CacheBlocksJson(const CacheSnapshot& snapshot, const std::string& caller_tenant, bool hide_other_tenants,
                            uint64_t label_key);

}  // namespace kvserve
