// Candidate KV quantization schemes, simulated: each is a quantize-dequantize of the rows of an
// F32 cache (KvStoreHook, engine/backend/backend.h), so a scheme's quality can be measured before
// it has a byte layout and kernels. bench/kv_quality prints the table (issue 16: "a table shows
// every candidate, so the choice is visible"). Rows are teacher-forced in 128-token chunks,
// so a full block is seen by later tokens of its own chunk in its final form.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/weights.h"

namespace kvserve {

// Token sequences and how many of their first tokens are prompt (not scored).
using ScoredText = std::pair<std::vector<int32_t>, size_t>;

struct NamedKvStoreHook {
  std::string name;
  KvStoreHook hook;
};
// Every candidate at `bits` (4 or 8) as a hook on an F32 cache.
std::vector<NamedKvStoreHook> CandidateHooks(int bits);

// Markdown table: every candidate at 4 and 8 bits against the F32 cache (top-1, mean KL), with
// bytes per token at head dim 128 (block 16, scales included) relative to F16.
std::string CandidateSchemesTable(const Model& model, const std::vector<ScoredText>& texts);

}  // namespace kvserve
