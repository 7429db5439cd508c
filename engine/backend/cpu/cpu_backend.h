// CpuBackend: the Llama forward pass on the CPU over a paged KV cache in host memory.
//
// The model's matrices are repacked once into the kernels' panel layout (see kernels.h).
// Scratch buffers are sized once from BackendLimits; Forward allocates nothing. Matrix
// products and attention are parallelised with OpenMP over the configured thread count;
// small steps (the tiny models) run on the calling thread, where a parallel region would
// cost more than the work. The KV arena is 64-byte aligned host memory laid out by KvSpec.
// Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cache/kv_spec.h"
#include "engine/backend/backend.h"
#include "engine/backend/compute_dtype.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/key_staging.h"
#include "engine/model/weights.h"

namespace kvserve {

struct CpuBackendOptions {
  BackendLimits limits;
  int num_threads = 0;  // 0: OpenMP's default (all cores)
  ComputeDtype compute_dtype = ComputeDtype::kF32;  // compute_dtype.h
  KvStoreHook kv_store_hook;  // benchmarks only (backend.h); empty in the server
  // Consecutive query tokens of a sequence that share each K/V block read in attention
  // (1: every query alone; benchmarks compare). Results do not depend on it.
  int attention_query_tile = 8;
};

class CpuBackend final : public Backend {
 public:
  // REQUIRES: model outlives the backend.
  CpuBackend(const Model& model, const CpuBackendOptions& options);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  [[nodiscard]] Status InitKvCache(const KvSpec& spec, int num_blocks) override;
  [[nodiscard]] Status InitCompactKvCache(const KvSpec& spec, int num_blocks) override;
  [[nodiscard]] Status Forward(const ForwardBatch& batch, std::span<float> logits) override;
  [[nodiscard]] Status CopyBlocks(std::span<const std::pair<int32_t, int32_t>> src_dst) override;
  // Re-rotates every K row of `blocks` by `delta` positions with the model's RoPE layout and
  // frequency scale (decode -> rotate -> encode; INT4C blocks as a whole, or their staged rows).
  [[nodiscard]] Status ShiftKeys(std::span<const int32_t> blocks, int delta) override;
  [[nodiscard]] Status ReadBlock(int32_t id, std::span<uint8_t> out) const override;
  [[nodiscard]] Status WriteBlock(int32_t id, std::span<const uint8_t> in) override;
  void ReleaseStaging(const std::function<bool(int32_t block)>& is_free) override;
  // INT4C keys of blocks being filled (tests); null when no head keeps keys per channel.
  const cpu::KeyStaging* key_staging() const { return staging_.get(); }

  const cpu::KernelTable& kernels() const { return *kernels_; }
  // Host pointer to block `id` of either region (tests, host offload), its layout and bytes.
  uint8_t* block_data(int32_t id) const {
    return id < num_blocks_ ? kv_arena_ + static_cast<size_t>(id) * spec_->block_bytes()
                            : compact_arena_ + static_cast<size_t>(id - num_blocks_) * compact_spec_->block_bytes();
  }
  const KvSpec& block_spec(int32_t id) const { return id < num_blocks_ ? *spec_ : *compact_spec_; }

 private:
  // Below this many multiply-adds a step runs on the calling thread: waking the OpenMP team
  // costs more than it saves (the tiny models).
  static constexpr int64_t kParallelWork = 1 << 16;
  // Elementwise work (norms, the gated activation) splits across the threads from this many
  // values: a prompt's, not a decode step's (one token's few thousand values).
  static constexpr int64_t kParallelElementwise = 1 << 15;

  [[nodiscard]] Status ValidateBatch(const ForwardBatch& batch, size_t logits_size) const;
  void Embed(const ForwardBatch& batch);
  // out[r] = x[r] / rms(x[r]) * weight for rows of `cols` values (0: the model's dim).
  void RmsNorm(const float* x, const float* weight, int rows, float* out, int cols = 0) const;
  // y[T][rows] = x[T][cols] * W^T for up to three matrices sharing one input, in one
  // parallel region.
  struct MatMulJob {
    const cpu::PackedMatrix* w;
    const float* bias;
    float* y;
  };
  void MatMuls(std::initializer_list<MatMulJob> jobs, const float* x, int num_tokens);
  void ApplyRope(const ForwardBatch& batch);
  void PrepareStaging(const ForwardBatch& batch);
  void StoreKv(const ForwardBatch& batch, int layer);
  void Attention(const ForwardBatch& batch, int layer);  // cpu_attention.cpp
  bool ValidBlock(int32_t id) const { return id >= 0 && id < num_blocks_ + num_compact_blocks_; }
  void GatedActivation(int num_tokens);

  const Model& model_;
  const ModelConfig& config_;
  CpuBackendOptions options_;
  const cpu::KernelTable* kernels_;
  int num_threads_ = 1;

  // The model's matrices re-laid out in panels for the kernels (the embedding table is read
  // row by row from the model).
  struct PackedLayer {
    cpu::PackedMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  std::vector<PackedLayer> packed_layers_;
  cpu::PackedMatrix packed_output_;

  // KV cache.
  std::unique_ptr<KvSpec> spec_;
  uint8_t* kv_arena_ = nullptr;
  int num_blocks_ = 0;
  // Compaction region (InitCompactKvCache): block ids from num_blocks_ on.
  std::unique_ptr<KvSpec> compact_spec_;
  uint8_t* compact_arena_ = nullptr;
  int num_compact_blocks_ = 0;
  // INT4C keys of blocks being filled (null when no head keeps keys per channel), and the
  // blocks whose last row the current Forward writes (encoded per layer, released at its end).
  std::unique_ptr<cpu::KeyStaging> staging_;
  std::vector<int32_t> filling_done_;

  // RoPE table: [positions][rope_dim / 2] of (cos, sin).
  std::vector<float> rope_cos_sin_;
  int rope_table_positions_ = 0;
  std::vector<double> rope_inv_freq_;

  // Scratch, sized by limits: activations [max_tokens][...].
  std::vector<float> x_;      // [T][dim] residual stream
  std::vector<float> xb_;     // [T][dim] normed input
  std::vector<float> xb2_;    // [T][dim] block output
  std::vector<float> q_;      // [T][q_dim]
  std::vector<float> k_;      // [T][kv_dim]
  std::vector<float> v_;      // [T][kv_dim]
  std::vector<float> att_;    // [T][q_dim]
  std::vector<float> gate_;   // [T][ffn]
  std::vector<float> up_;     // [T][ffn]
  std::vector<float> xlog_;   // [max_logits][dim]
  std::vector<uint16_t> xbf16_;  // a MatMuls input rounded to BF16 (bf16 compute)
  // A MatMuls input quantized (int8 / bf16 compute) in blocks of 32 and of 256 values.
  cpu::QuantizedActivations xq32_, xq256_;
  // Attention: tokens of one sequence that share K/V block reads, and the workspace per thread
  // and query of a tile: acc [n_rep][head_dim], scores [n_rep][block], max [n_rep], sum [n_rep].
  int query_tile_ = 8;  // options.attention_query_tile, at least 1
  struct QueryTile {
    int seq, first, count;
  };
  std::vector<QueryTile> query_tiles_;
  std::vector<float> attn_ws_;
  size_t attn_ws_stride_ = 0;  // floats per query
  std::vector<float> kv_ws_;   // per thread: a quantized block's keys and values as F32 [2][block][head_dim]
};

}  // namespace kvserve
