// Capacity planner: how much KV cache fits next to the weights, as pure functions.
//
//   kv memory        = memory - weights - reserve            (0 when that is negative)
//   bytes / sequence = KvSpec::bytes_for_tokens(context)     (whole blocks, scales included)
//                      + KvSpec::staging_bytes()             (INT4C: its filling block's F16 keys)
//   max sequences    = floor(kv memory / bytes per sequence)
//   num blocks       = floor((kv memory - max sequences x staging bytes) / block bytes)
//
// `kvserve plan` prints PlanCapacityTable's rows; the engine sizes its pool with
// NumBlocksForMemory after setting aside one staging slot per --max-num-seqs, so both agree by
// construction. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/kv_spec.h"
#include "common/status.h"

namespace kvserve {

// The hyper-parameters that decide a Llama-family model's weight bytes.
struct LlamaShape {
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // 0: dim / num_heads
  int64_t ffn_dim = 0;
  bool tied_output = false;
};
// Parameters: embeddings, output (unless tied), per layer q/k/v/o + gate/up/down + 2 norms,
// final norm.
int64_t LlamaParameterCount(const LlamaShape& shape);
// Weight bytes at `bits_per_weight` (16 for F16, 8.5 for Q8_0, ...) for the matrices, F32 norms.
int64_t EstimateLlamaWeightBytes(const LlamaShape& shape, double bits_per_weight);

struct CapacityPlanConfig {
  // KV layout: num_layers, num_kv_heads, head_dim, block_size, group_size, dtype, keep.
  KvSpecConfig kv;
  int64_t weight_bytes = 0;
  int64_t memory_bytes = 0;   // device (or host, for the CPU backend) memory for the server
  int64_t reserve_bytes = 0;  // activations, scratch, runtime: never given to the KV pool
  int64_t context_tokens = 2048;
};

struct CapacityPlanRow {
  std::string kv_setting;          // KvSpec::Describe(), e.g. "int8 (kept: L0), block 16, group 128"
  KvDtype dtype = KvDtype::kF16;   // the default dtype of the row
  bool layered = false;            // some layers/heads kept at another dtype
  int64_t weight_bytes = 0;
  double kv_bytes_per_token = 0;   // all layers, K and V, scales and padding included
  int64_t kv_bytes_per_sequence = 0;  // blocks of `context` tokens + staging_bytes_per_sequence
  int64_t staging_bytes_per_sequence = 0;  // KvSpec::staging_bytes(): 0 unless keys per channel
  int64_t compact_bytes_per_sequence = 0;  // PlanCapacityCompacted: the compaction region's part
  double ratio_to_f16 = 0;         // bytes per token / the same layout's F16 bytes per token
  int64_t kv_memory_bytes = 0;     // memory - weights - reserve, >= 0
  int64_t max_sequences = 0;
  int64_t num_blocks = 0;
  bool fits = false;               // weights + reserve + one sequence fit in memory
};

// One row for config.kv as given. Errors: invalid KV layout, memory <= 0, negative weights or
// reserve, context <= 0.
[[nodiscard]] StatusOr<CapacityPlanRow> PlanCapacity(const CapacityPlanConfig& config);
// One row per dtype in `dtypes` (the layout's keep list dropped: uniform), then, if
// config.kv.keep is not empty, one row for the layered setting as given.
[[nodiscard]] StatusOr<std::vector<CapacityPlanRow>> PlanCapacityTable(const CapacityPlanConfig& config,
                                                                       std::span<const KvDtype> dtypes);
// Old context compacted (--kv-compact-*): the KV memory is split like the engine splits it
// (`share` of it holds compaction blocks), and a sequence of `context` tokens holds at most
//   main blocks    = min(ceil(context / block), ceil((keep + every) / block) + 1)
//   compact blocks = max(0, floor((context - keep) / block))
// (the newest `keep` tokens plus up to `every` computed since the last compaction stay in the
// main dtype; full blocks older than that move). Both are worst cases, so the row is a lower
// bound: max seqs = min(main memory / main bytes, compaction memory / compact bytes),
// kv/sequence is their sum and kv/token that over context. A prompt is compacted chunk by chunk
// as it is prefilled.
struct CompactionPlan {
  KvDtype dtype = KvDtype::kInt8;
  double share = 0.5;
  int64_t every_tokens = 512;
  int64_t keep_tokens = 1024;
};
// The row for config.kv with old context compacted; kv_setting names both dtypes, num_blocks
// counts the main region. Errors: as PlanCapacity; share outside (0, 1), every < 1, keep < 0;
// a compaction dtype that is not smaller (CompactSpecFor).
[[nodiscard]] StatusOr<CapacityPlanRow> PlanCapacityCompacted(const CapacityPlanConfig& config,
                                                              const CompactionPlan& compaction);
// Every dtype: f32, f16, bf16, int8, int4.
std::span<const KvDtype> AllKvDtypes();

// Blocks of `spec` that fit in `kv_memory_bytes` (0 if none).
int64_t NumBlocksForMemory(const KvSpec& spec, int64_t kv_memory_bytes);

// A fixed-width text table of the rows (memory figures in GiB/MiB/KiB), for `kvserve plan`.
std::string FormatCapacityPlan(std::span<const CapacityPlanRow> rows);
// "13.48 GiB", "512.00 KiB", "96 B".
std::string FormatBytes(double bytes);
// "40GiB", "40 GB", "512MiB", "1.5G" (G = GiB), "123" (bytes). Errors: malformed or negative.
[[nodiscard]] StatusOr<int64_t> ParseByteSize(std::string_view text);

}  // namespace kvserve
