// KvSpec: the byte layout of the paged KV cache, shared by the cache bookkeeping and every
// backend so both sides agree on bytes.
//
// The pool is one arena of `num_blocks` blocks of `block_bytes()` bytes. A block holds
// `block_size` consecutive token positions of one sequence for every layer. Inside a block,
// one *segment* per (layer, K|V, kv_head), in that order, each 32-byte aligned:
//
//   segment = data  [block_size][row_bytes]          row = head_dim values of one token
//             scales[block_size][groups_per_row][2]  f16 {scale, bias}, quantized dtypes only
//
// INT4C ("int4c") stores values as INT4 does but keys *per channel* over a whole block (as
// KIVI does; RoPE'd keys carry per-channel offsets that dominate per-token groups): its K
// segments hold the codes and, instead of per-row groups, scales[head_dim][2] f16 {scale,
// bias} for each channel over the block's rows. A block's keys can only be encoded once it is
// full, so a backend keeps the rows of the block being filled in F16 elsewhere ("staging",
// backend.h) and encodes them when the last row arrives.
//
// A quantized row is split into groups of `group_size` consecutive values (inside one head);
// each group has an f16 scale and an f16 bias (asymmetric INT8 / INT4, cache/kv_codec.h).
// Every (layer, head) may have its own dtype ("layered precision"). Immutable value type;
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvserve {

enum class KvDtype : uint8_t { kF32, kF16, kBF16, kInt8, kInt4, kInt4C };

std::string_view KvDtypeName(KvDtype dtype);
[[nodiscard]] std::optional<KvDtype> ParseKvDtype(std::string_view name);
constexpr bool IsQuantized(KvDtype d) {
  return d == KvDtype::kInt8 || d == KvDtype::kInt4 || d == KvDtype::kInt4C;
}
// Keys quantized per channel over a full block (INT4C); its values are stored as INT4.
constexpr bool KeysPerChannel(KvDtype d) { return d == KvDtype::kInt4C; }
// The dtype whose row layout the K (kind 0) or V (kind 1) rows of `d` use.
constexpr KvDtype RowDtype(KvDtype d) { return d == KvDtype::kInt4C ? KvDtype::kInt4 : d; }
// f16 values stored per quantization group: scale and bias.
inline constexpr int kKvParamsPerGroup = 2;
inline constexpr int kMaxKvGroupsPerRow = 256;
inline constexpr int kMaxChannelKeyHeadDim = 1024;  // INT4C

// Bytes of the data part of one row of `head_dim` values (INT4 packs two values per byte).
size_t KvRowDataBytes(KvDtype dtype, int head_dim);

struct KvSpecConfig {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // 0: DefaultBlockSize(*this)
  KvDtype dtype = KvDtype::kF16;
  int group_size = 0;  // 0: min(head_dim, 128)
  // Layered precision: (layer, kv_head) pairs kept at `keep_dtype`; head -1 = every head.
  struct Keep {
    int layer = 0;
    int head = -1;
  };
  std::vector<Keep> keep;
  KvDtype keep_dtype = KvDtype::kF16;
};

// Tokens per block when the user names none: 16, or 32 where int4c is used, whose per-channel
// key parameters (4 bytes per channel and block) then cost half as much per token: 0.289x F16
// at head dim 128 instead of 0.320x, and better agreement (bench/results/kv_quality.md).
inline int DefaultBlockSize(const KvSpecConfig& c) {
  const bool int4c = c.dtype == KvDtype::kInt4C || (!c.keep.empty() && c.keep_dtype == KvDtype::kInt4C);
  return int4c ? 32 : 16;
}

class KvSpec {
 public:
  // Validates the config (positive sizes, group_size divides head_dim and is <= 128, keep
  // entries in range).
  [[nodiscard]] static StatusOr<KvSpec> Create(const KvSpecConfig& config);

  int num_layers() const { return num_layers_; }
  int num_kv_heads() const { return num_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int block_size() const { return block_size_; }
  int group_size() const { return group_size_; }
  int groups_per_row() const { return head_dim_ / group_size_; }
  // f16 values in one row's entry of `scales` (quantized dtypes).
  int params_per_row() const { return groups_per_row() * kKvParamsPerGroup; }
  KvDtype default_dtype() const { return default_dtype_; }
  bool is_uniform() const { return uniform_; }

  KvDtype dtype(int layer, int head) const { return dtypes_[Index(layer, head)]; }
  // Byte offset of the segment (layer, kind 0=K 1=V, head) inside a block.
  size_t segment_offset(int layer, int kind, int head) const {
    return segment_offsets_[(static_cast<size_t>(layer) * 2 + kind) * num_kv_heads_ + head];
  }
  size_t row_bytes(int layer, int head) const { return KvRowDataBytes(dtype(layer, head), head_dim_); }
  // Offset of the scales inside a segment (== block_size * row_bytes).
  size_t scales_offset(int layer, int head) const { return block_size_ * row_bytes(layer, head); }

  size_t block_bytes() const { return block_bytes_; }
  // Average bytes one token position costs in the cache (all layers, K and V, scales and
  // segment padding included).
  double bytes_per_token() const { return static_cast<double>(block_bytes_) / block_size_; }
  // Bytes of a sequence of `tokens` positions, rounded up to whole blocks.
  size_t bytes_for_tokens(int64_t tokens) const;
  // Host bytes of one staging slot: the F16 key rows [layer][kv_head][block][head_dim] of a
  // block being filled, which specs with per-channel keys (INT4C) keep beside the pool, one
  // per partially filled block (about one per sequence); 0 for specs without them.
  size_t staging_bytes() const { return staging_bytes_; }
  // Human-readable description, e.g. "int8 (layers 0,1 f16), block 16, group 64".
  std::string Describe() const;

 private:
  size_t Index(int layer, int head) const { return static_cast<size_t>(layer) * num_kv_heads_ + head; }

  int num_layers_ = 0;
  int num_kv_heads_ = 0;
  int head_dim_ = 0;
  int block_size_ = 0;
  int group_size_ = 0;
  KvDtype default_dtype_ = KvDtype::kF16;
  bool uniform_ = true;
  std::vector<KvDtype> dtypes_;          // [layer][kv_head]
  std::vector<size_t> segment_offsets_;  // [layer][2][kv_head]
  size_t block_bytes_ = 0;
  size_t staging_bytes_ = 0;
};

// The layout of the compaction region beside a cache of `main` (KvCacheManager::Compact):
// the same shape, block size and group size, `dtype` where main has its default dtype and
// the kept (layer, head) pairs at their dtype. INVALID_ARGUMENT unless its blocks are smaller
// than main's and main keeps no keys per channel (INT4C staging is not compacted).
[[nodiscard]] StatusOr<KvSpec> CompactSpecFor(const KvSpec& main, KvDtype dtype);

}  // namespace kvserve
