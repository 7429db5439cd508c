#include "engine/backend/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "cache/kv_codec.h"
#include "common/fp16.h"
#include "common/log.h"
#include "engine/backend/validate_batch.h"

namespace kvserve {
namespace {

constexpr int kMaxRopeTablePositions = 1 << 16;

}  // namespace

CpuBackend::CpuBackend(const Model& model, const CpuBackendOptions& options)
    : model_(model), config_(model.config()), options_(options), kernels_(&cpu::Kernels()) {
  if (options.num_threads > 0) omp_set_num_threads(options.num_threads);
  num_threads_ = omp_get_max_threads();
  const ModelConfig& c = config_;
  const size_t T = static_cast<size_t>(options.limits.max_num_tokens);
  x_.resize(T * c.dim);
  xb_.resize(T * c.dim);
  xb2_.resize(T * c.dim);
  q_.resize(T * c.q_dim());
  k_.resize(T * c.kv_dim());
  v_.resize(T * c.kv_dim());
  att_.resize(T * c.q_dim());
  gate_.resize(T * c.ffn_dim);
  up_.resize(T * c.ffn_dim);
  xlog_.resize(static_cast<size_t>(options.limits.max_logits) * c.dim);
  query_tile_ = std::clamp(options.attention_query_tile, 1, 64);
  query_tiles_.reserve(T);  // at most one tile per token
  if (options.compute_dtype == ComputeDtype::kBF16) {
    const size_t rows = std::max<size_t>(T, options.limits.max_logits);
    const size_t cols = static_cast<size_t>(std::max({c.dim, c.q_dim(), c.ffn_dim})) + 1;
    xbf16_.resize(rows * cols);
  }

  packed_layers_.reserve(c.num_layers);
  const ComputeDtype cd = options.compute_dtype;
  for (const LayerWeights& L : model.weights().layers) {
    packed_layers_.push_back({cpu::PackedMatrix(L.wq, cd), cpu::PackedMatrix(L.wk, cd), cpu::PackedMatrix(L.wv, cd),
                              cpu::PackedMatrix(L.wo, cd), cpu::PackedMatrix(L.w_gate, cd),
                              cpu::PackedMatrix(L.w_up, cd), cpu::PackedMatrix(L.w_down, cd)});
  }
  packed_output_ = cpu::PackedMatrix(model.weights().output, cd);

  const int half = c.rope_dim / 2;
  CHECK_LE(c.rope_dim, 256) << "rope dimension above 256 is not supported";
  rope_inv_freq_ = c.RopeInvFreq();
  rope_table_positions_ = std::min(c.context_length, kMaxRopeTablePositions);
  rope_cos_sin_.resize(static_cast<size_t>(rope_table_positions_) * half * 2);
  for (int p = 0; p < rope_table_positions_; ++p) {
    for (int i = 0; i < half; ++i) {
      const double theta = p * static_cast<double>(c.rope_freq_scale) * rope_inv_freq_[i];
      rope_cos_sin_[(static_cast<size_t>(p) * half + i) * 2] = static_cast<float>(std::cos(theta));
      rope_cos_sin_[(static_cast<size_t>(p) * half + i) * 2 + 1] = static_cast<float>(std::sin(theta));
    }
  }
  LOG_DEBUG("cpu backend: {} threads, kernels {}, compute {}", num_threads_, kernels_->isa,
            ComputeDtypeName(options.compute_dtype));
}

CpuBackend::~CpuBackend() {
  std::free(kv_arena_);
  std::free(compact_arena_);
}

// 64-byte aligned, zeroed host memory for `num_blocks` blocks of `spec`, in *arena.
static Status AllocateArena(const KvSpec& spec, int num_blocks, uint8_t** arena) {
  std::free(*arena);
  *arena = nullptr;
  const size_t bytes = spec.block_bytes() * static_cast<size_t>(num_blocks);
  *arena = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  if (*arena == nullptr) {
    return ResourceExhaustedError(fmt::format("cannot allocate {} bytes of host memory for the KV cache", bytes));
  }
  std::memset(*arena, 0, bytes);
  return OkStatus();
}

Status CpuBackend::InitKvCache(const KvSpec& spec, int num_blocks) {
  if (spec.num_layers() != config_.num_layers || spec.num_kv_heads() != config_.num_kv_heads ||
      spec.head_dim() != config_.head_dim) {
    return InvalidArgumentError("KV spec does not match the model's layers/heads/head dim");
  }
  if (num_blocks <= 0) return InvalidArgumentError("KV cache needs at least one block");
  RETURN_IF_ERROR(AllocateArena(spec, num_blocks, &kv_arena_));
  num_blocks_ = num_blocks;
  std::free(compact_arena_);  // a new main layout: any compaction region must be set up again
  compact_arena_ = nullptr;
  compact_spec_.reset();
  num_compact_blocks_ = 0;
  spec_ = std::make_unique<KvSpec>(spec);
  staging_ = std::make_unique<cpu::KeyStaging>(spec, num_blocks);
  if (!staging_->active()) staging_.reset();
  const int n_rep = config_.num_heads / config_.num_kv_heads;
  attn_ws_stride_ = static_cast<size_t>(n_rep) * (config_.head_dim + spec.block_size() + 2);
  attn_ws_stride_ = (attn_ws_stride_ + 15) / 16 * 16;  // keep each thread's slice cache-line aligned
  attn_ws_.assign(attn_ws_stride_ * query_tile_ * num_threads_, 0.0f);
  kv_ws_.assign(static_cast<size_t>(2 * spec.block_size() * config_.head_dim) * num_threads_, 0.0f);
  return OkStatus();
}

Status CpuBackend::InitCompactKvCache(const KvSpec& spec, int num_blocks) {
  if (kv_arena_ == nullptr) return FailedPreconditionError("KV cache not initialised");
  const KvSpec& main = *spec_;
  if (spec.num_layers() != main.num_layers() || spec.num_kv_heads() != main.num_kv_heads() ||
      spec.head_dim() != main.head_dim() || spec.block_size() != main.block_size()) {
    return InvalidArgumentError("compaction spec does not match the KV cache's shape and block size");
  }
  if (staging_) return InvalidArgumentError("compaction needs a main KV dtype without per-channel keys (not int4c)");
  if (num_blocks <= 0) return InvalidArgumentError("compaction region needs at least one block");
  RETURN_IF_ERROR(AllocateArena(spec, num_blocks, &compact_arena_));
  compact_spec_ = std::make_unique<KvSpec>(spec);
  num_compact_blocks_ = num_blocks;
  return OkStatus();
}

Status CpuBackend::ValidateBatch(const ForwardBatch& b, size_t logits_size) const {
  if (kv_arena_ == nullptr) return FailedPreconditionError("KV cache not initialised");
  RETURN_IF_ERROR(ValidateForwardBatch(b, options_.limits, config_.vocab_size, num_blocks_, spec_->block_size(),
                                       num_compact_blocks_));
  if (logits_size < static_cast<size_t>(b.num_logits()) * config_.vocab_size) {
    return InvalidArgumentError("logits buffer too small");
  }
  return OkStatus();
}

void CpuBackend::Embed(const ForwardBatch& b) {
  const WeightMatrix& e = model_.weights().token_embd;
  for (int t = 0; t < b.num_tokens(); ++t) {
    DequantizeRow(e.type, e.row(b.token_ids[t]), &x_[static_cast<size_t>(t) * config_.dim], config_.dim);
  }
  if (config_.scale_embeddings) {  // gemma2
    const float scale = std::sqrt(static_cast<float>(config_.dim));
    for (size_t i = 0; i < static_cast<size_t>(b.num_tokens()) * config_.dim; ++i) x_[i] *= scale;
  }
}

void CpuBackend::RmsNorm(const float* x, const float* weight, int rows, float* out, int cols) const {
  const int dim = cols > 0 ? cols : config_.dim;
  // Rows are independent: a prompt's rows split across the threads, with the same bits.
#pragma omp parallel for schedule(static) if (num_threads_ > 1 && int64_t{rows} * dim >= kParallelElementwise) \
    num_threads(num_threads_)
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * dim;
    float* o = out + static_cast<size_t>(r) * dim;
    double sum = 0.0;
    for (int i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / dim + config_.rms_norm_eps));
    for (int i = 0; i < dim; ++i) o[i] = xr[i] * scale * weight[i];
  }
}

void CpuBackend::MatMuls(std::initializer_list<MatMulJob> jobs, const float* x, int num_tokens) {
  int64_t work = 0;
  int64_t total_panels = 0;
  for (const MatMulJob& j : jobs) {
    work += j.w->rows() * j.w->cols() * num_tokens;
    total_panels += j.w->num_panels();
  }
  const bool parallel = num_threads_ > 1 && work >= kParallelWork;
  // Chunks of panels (multiples of 4), about 16 per thread so the tail is short: with 4 the
  // other thread waited in the barriers 18% of a single-stream decode, 15-16% with 16.
  int64_t chunk = parallel ? total_panels / (num_threads_ * 16) : total_panels;
  chunk = std::max<int64_t>(4, (chunk + 3) / 4 * 4);
  int64_t num_chunks = 0;
  bool takes_bf16 = false, takes_q32 = false, takes_q256 = false;
  for (const MatMulJob& j : jobs) {
    num_chunks += (j.w->num_panels() + chunk - 1) / chunk;
    takes_bf16 = takes_bf16 || j.w->takes_bf16();
    takes_q32 = takes_q32 || (j.w->takes_int8() && j.w->activation_block() == 32);
    takes_q256 = takes_q256 || (j.w->takes_int8() && j.w->activation_block() == 256);
  }
  // The jobs share x: rounded to BF16 or quantized (per block size) once for all of them.
  const int64_t cols = jobs.begin()->w->cols();
  const int64_t ldxb = cols + cols % 2;
  if (takes_bf16) cpu::RoundToBf16(x, cols, num_tokens, cols, xbf16_.data(), ldxb);
  const int quantize_threads = int64_t{num_tokens} * cols >= kParallelElementwise ? num_threads_ : 1;
  if (takes_q32) xq32_.Quantize(x, cols, num_tokens, cols, 32, quantize_threads);
  if (takes_q256) xq256_.Quantize(x, cols, num_tokens, cols, 256, quantize_threads);

#pragma omp parallel for schedule(dynamic, 1) if (parallel) num_threads(num_threads_)
  for (int64_t c = 0; c < num_chunks; ++c) {
    int64_t local = c;
    for (const MatMulJob& j : jobs) {
      const int64_t n = (j.w->num_panels() + chunk - 1) / chunk;
      if (local >= n) {
        local -= n;
        continue;
      }
      const int64_t p0 = local * chunk;
      const int64_t p1 = std::min(j.w->num_panels(), p0 + chunk);
      cpu::MatMulArgs args;
      args.w = j.w;
      args.x = x;
      args.ldx = j.w->cols();
      args.num_tokens = num_tokens;
      args.y = j.y;
      args.ldy = j.w->rows();
      args.xb = xbf16_.data();
      args.ldxb = ldxb;
      args.xq = j.w->takes_int8() && j.w->activation_block() == 256 ? &xq256_ : &xq32_;
      kernels_->matmul[j.w->kind()](args, p0, p1);
      if (j.bias != nullptr) {
        const int64_t r1 = std::min(j.w->rows(), p1 * cpu::kPanelRows);
        for (int t = 0; t < num_tokens; ++t) {
          for (int64_t r = p0 * cpu::kPanelRows; r < r1; ++r) j.y[t * j.w->rows() + r] += j.bias[r];
        }
      }
      break;
    }
  }
}

void CpuBackend::ApplyRope(const ForwardBatch& b) {
  const ModelConfig& c = config_;
  const int half = c.rope_dim / 2;
  const bool neox = c.rope_layout == RopeLayout::kNeox;
  auto rotate = [&](float* head, const float* cs) {
    for (int i = 0; i < half; ++i) {
      const int i0 = neox ? i : 2 * i;
      const int i1 = neox ? i + half : 2 * i + 1;
      const float x0 = head[i0], x1 = head[i1];
      const float cos = cs[2 * i], sin = cs[2 * i + 1];
      head[i0] = x0 * cos - x1 * sin;
      head[i1] = x0 * sin + x1 * cos;
    }
  };
  const float q_scale = c.QueryScale();
  for (int t = 0; t < b.num_tokens(); ++t) {
    const int pos = b.positions[t];
    const float* cs;
    float local[256];  // positions beyond the table (rare: very long contexts)
    if (pos < rope_table_positions_) {
      cs = &rope_cos_sin_[static_cast<size_t>(pos) * half * 2];
    } else {
      for (int i = 0; i < half; ++i) {
        const double theta = pos * static_cast<double>(c.rope_freq_scale) * rope_inv_freq_[i];
        local[2 * i] = static_cast<float>(std::cos(theta));
        local[2 * i + 1] = static_cast<float>(std::sin(theta));
      }
      cs = local;
    }
    float* q = &q_[static_cast<size_t>(t) * c.q_dim()];
    for (int h = 0; h < c.num_heads; ++h) {
      rotate(q + h * c.head_dim, cs);
      // Fold the attention scale into q once instead of into every score.
      for (int d = 0; d < c.head_dim; ++d) q[h * c.head_dim + d] *= q_scale;
    }
    float* k = &k_[static_cast<size_t>(t) * c.kv_dim()];
    for (int h = 0; h < c.num_kv_heads; ++h) rotate(k + h * c.head_dim, cs);
  }
}

void CpuBackend::PrepareStaging(const ForwardBatch& b) {
  filling_done_.clear();
  if (!staging_) return;
  const int bs = spec_->block_size();
  for (int t = 0; t < b.num_tokens(); ++t) {
    const auto id = static_cast<int32_t>(b.slot_mapping[t] / bs);
    const int offset = static_cast<int>(b.slot_mapping[t] % bs);
    staging_->Prepare(id, offset, block_data(id));
    if (offset == bs - 1) filling_done_.push_back(id);
  }
}

void CpuBackend::StoreKv(const ForwardBatch& b, int layer) {
  const KvSpec& s = *spec_;
  const int bs = s.block_size();
  const int hd = s.head_dim();
  // Each token writes its own slot: a prompt's tokens split across the threads (a test's
  // store hook sees them in order).
  const bool parallel = num_threads_ > 1 && !options_.kv_store_hook &&
                        int64_t{b.num_tokens()} * 2 * config_.kv_dim() >= kParallelElementwise;
#pragma omp parallel for schedule(static) if (parallel) num_threads(num_threads_)
  for (int t = 0; t < b.num_tokens(); ++t) {
    const int64_t slot = b.slot_mapping[t];
    uint8_t* block = block_data(static_cast<int32_t>(slot / bs));
    const int offset = static_cast<int>(slot % bs);
    for (int h = 0; h < s.num_kv_heads(); ++h) {
      const KvDtype d = s.dtype(layer, h);
      const size_t row_bytes = s.row_bytes(layer, h);
      for (int kind = 0; kind < 2; ++kind) {
        uint8_t* seg = block + s.segment_offset(layer, kind, h);
        const float* src = (kind == 0 ? k_.data() : v_.data()) + static_cast<size_t>(t) * config_.kv_dim() + h * hd;
        if (kind == 0 && KeysPerChannel(d)) {  // staged; encoded when the block is full
          kernels_->to_f16(src, hd, staging_->rows(static_cast<int32_t>(slot / bs), layer, h) + offset * hd);
          continue;
        }
        if (d == KvDtype::kF16) {  // EncodeKvRow's bits, in vector registers
          kernels_->to_f16(src, hd, reinterpret_cast<uint16_t*>(seg + offset * row_bytes));
          continue;
        }
        uint16_t* scales = reinterpret_cast<uint16_t*>(seg + s.scales_offset(layer, h)) + offset * s.params_per_row();
        EncodeKvRow(d, src, hd, s.group_size(), seg + offset * row_bytes, scales);
        if (options_.kv_store_hook && d == KvDtype::kF32) {
          options_.kv_store_hook(kind, reinterpret_cast<float*>(seg), offset, bs, hd);
        }
      }
    }
  }
  for (int32_t id : filling_done_) staging_->Encode(id, layer, block_data(id));
}

// gate = act(gate) * up, act SiLU, or GELU's tanh approximation for gelu_gate models.
void CpuBackend::GatedActivation(int num_tokens) {
  const int64_t n = int64_t{num_tokens} * config_.ffn_dim;
  const bool parallel = num_threads_ > 1 && n >= kParallelElementwise;  // elementwise: the same bits
  if (config_.gelu_gate) {
    constexpr float kSqrt2OverPi = 0.7978845608f;
#pragma omp parallel for schedule(static) if (parallel) num_threads(num_threads_)
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate_[i];
      gate_[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up_[i];
    }
    return;
  }
  // SiLU in the kernels' vectors, in chunks of whole vectors per thread.
  const int64_t chunk = std::max<int64_t>(1, parallel ? (n / num_threads_ + 63) / 64 * 64 : n);
#pragma omp parallel for schedule(static) if (parallel) num_threads(num_threads_)
  for (int64_t i = 0; i < n; i += chunk) kernels_->silu_mul(gate_.data() + i, up_.data() + i, std::min(chunk, n - i));
}

Status CpuBackend::Forward(const ForwardBatch& b, std::span<float> logits) {
  RETURN_IF_ERROR(ValidateBatch(b, logits.size()));
  const ModelConfig& c = config_;
  const int T = b.num_tokens();
  const size_t n_act = static_cast<size_t>(T) * c.dim;
  using Op = ProfileOp;
  auto timed = [this](Op op, auto&& fn) {
    Profiler::Scope scope(profiler_, op);
    fn();
  };
  timed(Op::kEmbed, [&] { Embed(b); });
  PrepareStaging(b);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = model_.weights().layers[l];
    const PackedLayer& P = packed_layers_[l];
    timed(Op::kNorm, [&] { RmsNorm(x_.data(), L.attn_norm, T, xb_.data()); });
    timed(Op::kQkv, [&] {
      MatMuls({{&P.wq, L.bq, q_.data()}, {&P.wk, L.bk, k_.data()}, {&P.wv, L.bv, v_.data()}}, xb_.data(), T);
    });
    if (L.q_norm != nullptr) {  // qwen3: each head's q and k normalised before RoPE
      timed(Op::kNorm, [&] {
        RmsNorm(q_.data(), L.q_norm, T * c.num_heads, q_.data(), c.head_dim);
        RmsNorm(k_.data(), L.k_norm, T * c.num_kv_heads, k_.data(), c.head_dim);
      });
    }
    timed(Op::kRope, [&] { ApplyRope(b); });
    timed(Op::kKvWrite, [&] { StoreKv(b, l); });
    timed(Op::kAttention, [&] { Attention(b, l); });
    timed(Op::kAttnOut, [&] {
      MatMuls({{&P.wo, nullptr, xb2_.data()}}, att_.data(), T);
      if (L.post_attn_norm != nullptr) RmsNorm(xb2_.data(), L.post_attn_norm, T, xb2_.data());
      for (size_t i = 0; i < n_act; ++i) x_[i] += xb2_[i];
    });
    timed(Op::kNorm, [&] { RmsNorm(x_.data(), L.ffn_norm, T, xb_.data()); });
    timed(Op::kGateUp, [&] {
      MatMuls({{&P.w_gate, nullptr, gate_.data()}, {&P.w_up, nullptr, up_.data()}}, xb_.data(), T);
    });
    timed(Op::kSwiGlu, [&] { GatedActivation(T); });
    timed(Op::kDown, [&] {
      MatMuls({{&P.w_down, nullptr, xb2_.data()}}, gate_.data(), T);
      if (L.post_ffn_norm != nullptr) RmsNorm(xb2_.data(), L.post_ffn_norm, T, xb2_.data());
      for (size_t i = 0; i < n_act; ++i) x_[i] += xb2_[i];
    });
  }
  for (int32_t id : filling_done_) staging_->Release(id);  // encoded in every layer
  const int n = b.num_logits();
  if (n == 0) return OkStatus();
  Profiler::Scope scope(profiler_, Op::kLogits);
  for (int i = 0; i < n; ++i) {
    std::memcpy(&xb_[static_cast<size_t>(i) * c.dim], &x_[static_cast<size_t>(b.logits_indices[i]) * c.dim],
                sizeof(float) * c.dim);
  }
  RmsNorm(xb_.data(), model_.weights().output_norm, n, xlog_.data());
  MatMuls({{&packed_output_, nullptr, logits.data()}}, xlog_.data(), n);
  if (const float cap = c.final_logit_softcap; cap > 0) {
    for (size_t i = 0; i < static_cast<size_t>(n) * c.vocab_size; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
  return OkStatus();
}

Status CpuBackend::CopyBlocks(std::span<const std::pair<int32_t, int32_t>> src_dst) {
  for (const auto& [src, dst] : src_dst) {
    if (!ValidBlock(src) || !ValidBlock(dst)) return InvalidArgumentError("CopyBlocks: block id out of range");
    if ((src < num_blocks_) != (dst < num_blocks_)) {  // across the compaction boundary
      ConvertKvBlock(block_spec(src), block_data(src), block_spec(dst), block_data(dst));
      continue;
    }
    std::memcpy(block_data(dst), block_data(src), block_spec(src).block_bytes());
    if (staging_) staging_->Copy(src, dst);
  }
  return OkStatus();
}

Status CpuBackend::ShiftKeys(std::span<const int32_t> blocks, int delta) {
  if (kv_arena_ == nullptr) return FailedPreconditionError("KV cache not initialised");
  for (int32_t id : blocks) {
    if (!ValidBlock(id)) return InvalidArgumentError("ShiftKeys: block id out of range");
  }
  if (delta == 0 || blocks.empty()) return OkStatus();
  const ModelConfig& c = config_;
  const KvSpec& s = *spec_;
  const int half = c.rope_dim / 2;
  const int hd = s.head_dim();
  const bool neox = c.rope_layout == RopeLayout::kNeox;
  // R(p + delta) = R(delta) R(p): one (cos, sin) per frequency, computed in double.
  float cos_sin[256];
  for (int i = 0; i < half; ++i) {
    const double theta = delta * static_cast<double>(c.rope_freq_scale) * rope_inv_freq_[i];
    cos_sin[2 * i] = static_cast<float>(std::cos(theta));
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(theta));
  }
  auto rotate = [&](float* row) {
    for (int i = 0; i < half; ++i) {
      const int i0 = neox ? i : 2 * i;
      const int i1 = neox ? i + half : 2 * i + 1;
      const float x0 = row[i0], x1 = row[i1];
      row[i0] = x0 * cos_sin[2 * i] - x1 * cos_sin[2 * i + 1];
      row[i1] = x0 * cos_sin[2 * i + 1] + x1 * cos_sin[2 * i];
    }
  };
  std::vector<float> rows(static_cast<size_t>(s.block_size()) * hd);  // decoded key rows of one segment
  for (int32_t id : blocks) {
    uint8_t* block = block_data(id);
    const KvSpec& bspec = block_spec(id);
    for (int l = 0; l < s.num_layers(); ++l) {
      for (int h = 0; h < s.num_kv_heads(); ++h) {
        if (staging_ && KeysPerChannel(s.dtype(l, h)) && staging_->has(id)) {  // rotate the staged rows
          uint16_t* staged = staging_->rows(id, l, h);
          for (int i = 0; i < staging_->filled(id) * hd; i += hd) {
            for (int j = 0; j < hd; ++j) rows[j] = F16ToF32(staged[i + j]);
            rotate(rows.data());
            for (int j = 0; j < hd; ++j) staged[i + j] = F32ToF16(rows[j]);
          }
          continue;
        }
        // Decode -> rotate -> encode (INT4C: the block's channel parameters change).
        DecodeKvSegment(bspec, block, l, /*kind=K*/ 0, h, rows.data());
        for (int r = 0; r < bspec.block_size(); ++r) rotate(&rows[static_cast<size_t>(r) * hd]);
        EncodeKvSegment(bspec, block, l, 0, h, rows.data());
      }
    }
  }
  return OkStatus();
}

Status CpuBackend::ReadBlock(int32_t id, std::span<uint8_t> out) const {
  if (!ValidBlock(id) || out.size() < block_spec(id).block_bytes()) {
    return InvalidArgumentError("ReadBlock: bad block id or size");
  }
  std::memcpy(out.data(), block_data(id), block_spec(id).block_bytes());
  // A partially filled INT4C block leaves with its staged keys encoded over the rows it has.
  if (staging_ && staging_->has(id)) staging_->Encode(id, -1, out.data());
  return OkStatus();
}

Status CpuBackend::WriteBlock(int32_t id, std::span<const uint8_t> in) {
  if (!ValidBlock(id) || in.size() < block_spec(id).block_bytes()) {
    return InvalidArgumentError("WriteBlock: bad block id or size");
  }
  std::memcpy(block_data(id), in.data(), block_spec(id).block_bytes());
  if (staging_) staging_->Release(id);
  return OkStatus();
}

void CpuBackend::ReleaseStaging(const std::function<bool(int32_t block)>& is_free) {
  if (staging_) staging_->ReleaseIf(is_free);
}

}  // namespace kvserve
