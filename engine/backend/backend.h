// Backend: runs the model's forward pass over a ForwardBatch and owns the KV cache bytes.
//
// The backend allocates the KV arena once (InitKvCache) with the layout of KvSpec and never
// allocates per step. It knows nothing of pools, tables or requests: it receives flat integer
// arrays. Implementations: CpuBackend (engine/backend/cpu), CudaBackend (engine/backend/cuda).
// Called from the engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>

#include "cache/kv_spec.h"
#include "common/profiler.h"
#include "common/status.h"
#include "engine/backend/forward_batch.h"

namespace kvserve {

// Benchmarks only (bench/kv_quality's candidate quantization schemes; the CPU backend): called
// after each K (kind 0) or V (kind 1) row is stored in an F32 cache, with that segment's rows
// [block_size][head_dim] of one (layer, kv head) and the row's offset in the block. It may
// rewrite rows [0, offset] in place, i.e. quantize-dequantize a scheme under study.
using KvStoreHook = std::function<void(int kind, float* rows, int offset, int block_size, int head_dim)>;

struct BackendLimits {
  int max_num_tokens = 2048;  // tokens per Forward (scratch buffers are sized for this)
  int max_num_seqs = 256;     // sequences per Forward
  int max_logits = 256;       // logits rows per Forward
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;

  // Allocates the KV arena: num_blocks * spec.block_bytes() bytes, zeroed.
  [[nodiscard]] virtual Status InitKvCache(const KvSpec& spec, int num_blocks) = 0;

  // Compaction (KvCacheManager::Compact): a second arena of `num_blocks` blocks laid out by
  // `spec` (the main spec's shape and block size, a smaller dtype) whose ids follow the main
  // arena's. Attention then reads tables that mix both; CopyBlocks between the regions
  // converts (decode, re-encode); ShiftKeys, ReadBlock and WriteBlock take either id (a
  // compact block's bytes are its spec's block_bytes). New rows are only written to the main
  // arena. Call after InitKvCache. Optional: the default says the backend has none.
  [[nodiscard]] virtual Status InitCompactKvCache(const KvSpec& spec, int num_blocks) {
    return UnimplementedError(name() + " backend has no KV compaction");
  }

  // Runs the model over `batch`, writing new K/V at the slot mapping and
  // logits[num_logits][vocab] for the requested rows. REQUIRES: batch within the limits.
  [[nodiscard]] virtual Status Forward(const ForwardBatch& batch, std::span<float> logits) = 0;

  // Copies whole blocks (copy-on-write, defragmentation): dst[i] = src[i].
  [[nodiscard]] virtual Status CopyBlocks(std::span<const std::pair<int32_t, int32_t>> src_dst) = 0;

  // Re-rotates the keys stored in `blocks` (every layer and kv head, every position of the
  // block) by `delta` positions: RoPE is a rotation, so R(p + delta) = R(delta) R(p).
  // Quantized rows are decoded, rotated and re-encoded. Used after a sliding-window eviction
  // re-indexes the kept positions (delta < 0).
  [[nodiscard]] virtual Status ShiftKeys(std::span<const int32_t> blocks, int delta) = 0;

  // INT4C keys (kv_spec.h) of blocks still being filled are staged in F16 outside the arena,
  // one slot per block (see cpu/key_staging.h). The runner calls this after each step with
  // the cache's view of which blocks are free, so slots of freed blocks go back. A backend
  // without staging ignores it.
  virtual void ReleaseStaging(const std::function<bool(int32_t block)>& is_free) {}

  // Time spent per forward operation goes to `profiler` (nullable; not owned).
  void SetProfiler(Profiler* profiler) { profiler_ = profiler; }

  // Raw block bytes for host offload and tests: copy block `id` out/in (its region's
  // block_bytes; a larger span keeps the rest).
  [[nodiscard]] virtual Status ReadBlock(int32_t id, std::span<uint8_t> out) const = 0;
  [[nodiscard]] virtual Status WriteBlock(int32_t id, std::span<const uint8_t> in) = 0;

  // Host offload of several blocks: each copy moves one block between block `block` and
  // `host` (block_bytes bytes), and all are done when the call returns. The defaults call
  // ReadBlock/WriteBlock per block; a device backend queues every copy and waits once.
  struct BlockTransfer {
    int32_t block = 0;
    std::span<uint8_t> host;
  };
  // (Inline: kvserve_cuda links before kvserve_backend, so Backend keeps no key function.)
  [[nodiscard]] virtual Status ReadBlocks(std::span<const BlockTransfer> copies) const {  // device -> host
    for (const BlockTransfer& c : copies) RETURN_IF_ERROR(ReadBlock(c.block, c.host));
    return OkStatus();
  }
  [[nodiscard]] virtual Status WriteBlocks(std::span<const BlockTransfer> copies) {  // host -> device
    for (const BlockTransfer& c : copies) RETURN_IF_ERROR(WriteBlock(c.block, c.host));
    return OkStatus();
  }
  // The host memory blocks are copied to and from (the KV cache's host tier). A device
  // backend page-locks it so the copies run asynchronously at full speed; an empty span
  // releases it (before the memory is freed). Optional: the default does nothing.
  [[nodiscard]] virtual Status RegisterHostMemory(std::span<uint8_t> memory) { return OkStatus(); }

 protected:
  Profiler* profiler_ = nullptr;
};

}  // namespace kvserve
