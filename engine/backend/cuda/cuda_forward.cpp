// One step of the CUDA backend: validate the flat batch, plan its device shape (decode steps
// padded to a CUDA-graph bucket), pack every array into one pinned buffer, copy it with one
// cudaMemcpyAsync, run the layers (eagerly or by replaying a captured graph), copy the logits
// rows back into pinned memory. Launch() returns after enqueueing; Wait() hands out the logits.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/log.h"
#include "engine/backend/cuda/cuda_backend_impl.h"
#include "engine/backend/validate_batch.h"

namespace kvserve {
namespace {

size_t Align16(size_t v) { return (v + 15) / 16 * 16; }
int CeilDiv(int a, int b) { return (a + b - 1) / b; }

// Sequence-count buckets of decode graphs.
constexpr int kSeqBuckets[] = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256};

int SeqBucket(int seqs, int cap) {
  int bucket = seqs;
  for (int b : kSeqBuckets) {
    if (b >= seqs) {
      bucket = b;
      break;
    }
  }
  if (bucket < seqs) bucket = (seqs + 63) / 64 * 64;  // beyond the table: multiples of 64
  return bucket <= cap ? bucket : seqs;
}

int BlockBucket(int blocks, int cap) {
  int bucket = 4;
  while (bucket < blocks) bucket *= 2;
  return std::max(blocks, std::min(bucket, cap));
}

}  // namespace

Status CudaBackend::Impl::ValidateBatch(const ForwardBatch& b) const {
  RETURN_IF_ERROR(ValidateForwardBatch(b, options.limits, config.vocab_size, num_blocks, spec->block_size()));
  // The scratch and the graph buckets are sized for max_model_len.
  const int bs = spec->block_size();
  for (int s = 0; s < b.num_seqs(); ++s) {
    if ((b.seq_lens[s] + bs - 1) / bs > max_blocks_cap) {
      return InvalidArgumentError(fmt::format("sequence of {} tokens beyond max_model_len {}", b.seq_lens[s],
                                              max_model_len));
    }
  }
  return OkStatus();
}

void CudaBackend::Impl::LayoutInputs(StepPlan* p, int num_work) {
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at = Align16(at + bytes);
    return offset;
  };
  p->slots = take(sizeof(int64_t) * p->num_tokens);
  p->tokens = take(sizeof(int32_t) * p->num_tokens);
  p->positions = take(sizeof(int32_t) * p->num_tokens);
  p->query_start = take(sizeof(int32_t) * (p->num_seqs + 1));
  p->seq_lens = take(sizeof(int32_t) * p->num_seqs);
  p->logits_rows = take(sizeof(int32_t) * std::max(p->num_logits, 1));
  p->tables = take(sizeof(int32_t) * static_cast<size_t>(p->num_seqs) * std::max(p->max_blocks, 1));
  p->work = take(sizeof(cuda::AttnWork) * std::max(num_work, 1));
  p->total = at;
}

StepPlan CudaBackend::Impl::MakePlan(const ForwardBatch& b) const {
  const int T = b.num_tokens();
  const int S = b.num_seqs();
  const int bs = spec->block_size();
  const int n_rep = config.num_heads / config.num_kv_heads;
  StepPlan p;
  p.decode = T == S;  // every sequence has >= 1 token, so T == S means exactly one each
  bool identity = b.num_logits() == S;
  for (int i = 0; identity && i < S; ++i) identity = b.logits_indices[i] == i;
  int used_blocks = 1;
  int max_ctx = 1;
  for (int s = 0; s < S; ++s) {
    used_blocks = std::max(used_blocks, CeilDiv(b.seq_lens[s], bs));
    max_ctx = std::max(max_ctx, b.seq_lens[s]);
  }
  const BackendLimits& lim = options.limits;
  p.graph = p.decode && identity && options.use_cuda_graphs;
  if (p.graph) {
    const int cap = std::min({lim.max_num_seqs, lim.max_num_tokens, lim.max_logits});
    p.num_seqs = SeqBucket(S, cap);
    p.max_blocks = BlockBucket(used_blocks, max_blocks_cap);
    max_ctx = p.max_blocks * bs;  // the plan depends on the bucket only, so replays match
  } else {
    p.num_seqs = S;
    p.max_blocks = used_blocks;
  }
  p.num_tokens = p.decode ? p.num_seqs : T;
  p.real_logits = b.num_logits();
  p.num_logits = p.graph ? p.num_seqs : p.real_logits;

  if (p.decode) {
    // Split long contexts so the GPU has ~2 CTAs per SM, each split at least kMinSplitKeys keys.
    p.attn_rows = n_rep;
    p.attn_threads = 128;
    const int ctas = p.num_seqs * config.num_kv_heads;
    const int want = std::max(1, CeilDiv(2 * num_sms, ctas));
    const int by_len = std::max(1, CeilDiv(max_ctx, kMinSplitKeys));
    const int by_cap = std::max<int64_t>(1, part_rows / (static_cast<int64_t>(p.num_seqs) * config.num_heads));
    p.num_splits = std::max(1, std::min({want, by_len, by_cap}));
    if (p.num_splits > 1) {
      p.partition = CeilDiv(CeilDiv(max_ctx, p.num_splits), cuda::kAttnTile) * cuda::kAttnTile;
      p.num_splits = CeilDiv(max_ctx, p.partition);
    }
    p.num_work = p.num_seqs * p.num_splits;
  } else {
    p.attn_rows = prefill_rows;
    p.attn_threads = 256;
    const int q_tile = prefill_rows / n_rep;
    for (int s = 0; s < S; ++s) p.num_work += CeilDiv(b.query_start[s + 1] - b.query_start[s], q_tile);
  }
  LayoutInputs(&p, p.num_work);
  return p;
}

void CudaBackend::Impl::PackInputs(const ForwardBatch& b, const StepPlan& p, uint8_t* dst) const {
  const int T = b.num_tokens();
  const int S = b.num_seqs();
  const int bs = spec->block_size();
  auto* slots = reinterpret_cast<int64_t*>(dst + p.slots);
  auto* tokens = reinterpret_cast<int32_t*>(dst + p.tokens);
  auto* positions = reinterpret_cast<int32_t*>(dst + p.positions);
  auto* query_start = reinterpret_cast<int32_t*>(dst + p.query_start);
  auto* seq_lens = reinterpret_cast<int32_t*>(dst + p.seq_lens);
  auto* logits_rows = reinterpret_cast<int32_t*>(dst + p.logits_rows);
  auto* tables = reinterpret_cast<int32_t*>(dst + p.tables);
  auto* work = reinterpret_cast<cuda::AttnWork*>(dst + p.work);

  std::copy_n(b.slot_mapping.data(), T, slots);
  std::copy_n(b.token_ids.data(), T, tokens);
  std::copy_n(b.positions.data(), T, positions);
  std::fill(slots + T, slots + p.num_tokens, int64_t{-1});  // padding rows write no KV
  std::fill(tokens + T, tokens + p.num_tokens, 0);
  std::fill(positions + T, positions + p.num_tokens, 0);
  std::copy_n(b.query_start.data(), S + 1, query_start);
  for (int s = S + 1; s <= p.num_seqs; ++s) query_start[s] = query_start[s - 1] + 1;
  std::copy_n(b.seq_lens.data(), S, seq_lens);
  std::fill(seq_lens + S, seq_lens + p.num_seqs, 0);  // padding sequences attend to nothing
  std::copy_n(b.logits_indices.data(), p.real_logits, logits_rows);
  for (int i = p.real_logits; i < p.num_logits; ++i) logits_rows[i] = i;
  std::fill(tables, tables + static_cast<size_t>(p.num_seqs) * p.max_blocks, -1);
  for (int s = 0; s < S; ++s) {
    std::copy_n(b.block_tables.data() + static_cast<size_t>(s) * b.max_blocks_per_seq, CeilDiv(b.seq_lens[s], bs),
                tables + static_cast<size_t>(s) * p.max_blocks);
  }
  int w = 0;
  if (p.decode) {
    for (int s = 0; s < p.num_seqs; ++s) {
      for (int split = 0; split < p.num_splits; ++split) work[w++] = {s, s, 1, split};
    }
  } else {
    const int q_tile = p.attn_rows / (config.num_heads / config.num_kv_heads);
    for (int s = 0; s < S; ++s) {
      for (int q = b.query_start[s]; q < b.query_start[s + 1]; q += q_tile) {
        work[w++] = {s, q, std::min(q_tile, b.query_start[s + 1] - q), 0};
      }
    }
  }
  CHECK_EQ(w, p.num_work);
}

Status CudaBackend::Impl::FloatGemm(const void* w, int rows, int cols, const void* xin, int num_tokens, float* y,
                                    int ldy, bool accumulate) {
  // Row-major y[T][rows] = x[T][cols] * W^T is column-major y^T = W^T(op T of [cols][rows]) * x^T.
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cudaDataType_t ab = act == cuda::ActType::kF16    ? CUDA_R_16F
                            : act == cuda::ActType::kBF16 ? CUDA_R_16BF
                                                          : CUDA_R_32F;
  CUBLAS_RETURN_IF_ERROR(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, rows, num_tokens, cols, &alpha, w, ab, cols,
                                      xin, ab, cols, &beta, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
  return OkStatus();
}

Status CudaBackend::Impl::Gemm(const StackedMatrix& w, const void* xin, int num_tokens, float* y, bool accumulate) {
  // Each part writes its rows of y (rows of y are all the parts' rows apart).
  const int ldy = StackedRows(w);
  int row0 = 0;
  for (const DeviceMatrix& m : w) {
    float* out = y + row0;
    row0 += m.rows;
    if (cuda::ReadsAsStored(m.type)) {
      if (num_tokens < options.quant_gemm_min_tokens || dequant == nullptr) {
        cuda::QuantMatVecArgs mv;
        mv.type = m.type;
        mv.w = m.data;
        mv.rows = m.rows;
        mv.cols = m.cols;
        mv.x = xin;
        mv.x_type = act;
        mv.ldx = m.cols;
        mv.num_tokens = num_tokens;
        mv.y = out;
        mv.ldy = ldy;
        mv.accumulate = accumulate;
        CUDA_RETURN_IF_ERROR(cuda::LaunchQuantMatVec(mv, stream));
        continue;
      }
      const int tile = static_cast<int>(std::clamp<int64_t>(dequant_values / m.cols, 1, m.rows));
      for (int r0 = 0; r0 < m.rows; r0 += tile) {
        const int n = std::min(tile, m.rows - r0);
        CUDA_RETURN_IF_ERROR(cuda::LaunchDequantize(m.type, static_cast<const uint8_t*>(m.data) + r0 * m.row_bytes, n,
                                                    m.cols, dequant, act, stream));
        RETURN_IF_ERROR(FloatGemm(dequant, n, m.cols, xin, num_tokens, out + r0, ldy, accumulate));
      }
      continue;
    }
    RETURN_IF_ERROR(FloatGemm(m.data, m.rows, m.cols, xin, num_tokens, out, ldy, accumulate));
  }
  return OkStatus();
}

Status CudaBackend::Impl::EnqueueStep(const StepPlan& p) {
  const ModelConfig& c = config;
  const int T = p.num_tokens;
  const auto* slots = reinterpret_cast<const int64_t*>(device_inputs + p.slots);
  const auto* tokens = reinterpret_cast<const int32_t*>(device_inputs + p.tokens);
  const auto* positions = reinterpret_cast<const int32_t*>(device_inputs + p.positions);
  const auto* seq_lens = reinterpret_cast<const int32_t*>(device_inputs + p.seq_lens);
  const auto* logits_rows = reinterpret_cast<const int32_t*>(device_inputs + p.logits_rows);
  const auto* tables = reinterpret_cast<const int32_t*>(device_inputs + p.tables);
  const auto* work = reinterpret_cast<const cuda::AttnWork*>(device_inputs + p.work);

  cuda::RopeArgs rope;
  rope.qkv = qkv;
  rope.stride = qkv_dim();
  rope.num_tokens = T;
  rope.positions = positions;
  rope.num_heads = c.num_heads;
  rope.num_kv_heads = c.num_kv_heads;
  rope.head_dim = c.head_dim;
  rope.rope_dim = c.rope_dim;
  rope.neox = c.rope_layout == RopeLayout::kNeox;
  rope.cos_sin = rope_cos_sin;
  rope.table_positions = rope_table_positions;
  rope.inv_freq = rope_inv_freq;
  rope.freq_scale = static_cast<double>(c.rope_freq_scale);
  rope.q_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  cuda::AttnArgs at;
  at.q = qkv;
  at.q_stride = qkv_dim();
  at.positions = positions;
  at.seq_lens = seq_lens;
  at.block_tables = tables;
  at.max_blocks = p.max_blocks;
  at.work = work;
  at.num_work = p.num_work;
  at.num_heads = c.num_heads;
  at.max_rows = p.attn_rows;
  at.partition = p.partition;
  at.num_splits = p.num_splits;
  at.threads = p.attn_threads;
  at.out = attn;
  at.out_type = act;
  at.part_acc = part_acc;
  at.part_ml = part_ml;

  using Op = ProfileOp;
  RETURN_IF_ERROR(Mark(Op::kCount));  // start of the timeline
  if (cuda::ReadsAsStored(token_embd.type)) {
    CUDA_RETURN_IF_ERROR(cuda::LaunchQuantEmbedding(token_embd.type, token_embd.data, tokens, T, c.dim, x, stream));
  } else {
    CUDA_RETURN_IF_ERROR(cuda::LaunchEmbedding(token_embd.data, act, tokens, T, c.dim, x, stream));
  }
  RETURN_IF_ERROR(Mark(Op::kEmbed));
  for (int l = 0; l < c.num_layers; ++l) {
    const CudaLayerWeights& L = layers[l];
    CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNorm(x, nullptr, T, c.dim, L.attn_norm, c.rms_norm_eps, xn, act, stream));
    RETURN_IF_ERROR(Mark(Op::kNorm));
    RETURN_IF_ERROR(Gemm(L.wqkv, xn, T, qkv, false));
    if (L.bqkv != nullptr) CUDA_RETURN_IF_ERROR(cuda::LaunchAddBias(qkv, qkv_dim(), T, qkv_dim(), L.bqkv, stream));
    RETURN_IF_ERROR(Mark(Op::kQkv));
    CUDA_RETURN_IF_ERROR(cuda::LaunchRope(rope, stream));
    RETURN_IF_ERROR(Mark(Op::kRope));
    const cuda::KvLayerView view = LayerView(l);
    CUDA_RETURN_IF_ERROR(cuda::LaunchStoreKv(view, qkv + q_dim(), qkv + q_dim() + kv_dim(), qkv_dim(), T, slots, stream));
    RETURN_IF_ERROR(Mark(Op::kKvWrite));
    at.kv = view;
    CUDA_RETURN_IF_ERROR(cuda::LaunchAttention(at, stream));
    if (p.num_splits > 1) {
      CUDA_RETURN_IF_ERROR(cuda::LaunchAttentionCombine(part_acc, part_ml, T, c.num_heads, c.head_dim, p.num_splits,
                                                        attn, act, stream));
    }
    RETURN_IF_ERROR(Mark(Op::kAttention));
    RETURN_IF_ERROR(Gemm(L.wo, attn, T, x, true));  // x += attn * Wo^T
    RETURN_IF_ERROR(Mark(Op::kAttnOut));
    CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNorm(x, nullptr, T, c.dim, L.ffn_norm, c.rms_norm_eps, xn, act, stream));
    RETURN_IF_ERROR(Mark(Op::kNorm));
    RETURN_IF_ERROR(Gemm(L.w_gate_up, xn, T, gate_up, false));
    RETURN_IF_ERROR(Mark(Op::kGateUp));
    CUDA_RETURN_IF_ERROR(cuda::LaunchSwiGlu(gate_up, T, c.ffn_dim, ffn_h, act, stream));
    RETURN_IF_ERROR(Mark(Op::kSwiGlu));
    RETURN_IF_ERROR(Gemm(L.w_down, ffn_h, T, x, true));  // x += h * Wdown^T
    RETURN_IF_ERROR(Mark(Op::kDown));
  }
  if (p.num_logits > 0) {
    CUDA_RETURN_IF_ERROR(
        cuda::LaunchRmsNorm(x, logits_rows, p.num_logits, c.dim, output_norm, c.rms_norm_eps, xl, act, stream));
    RETURN_IF_ERROR(Gemm(output, xl, p.num_logits, logits, false));
    RETURN_IF_ERROR(Mark(Op::kLogits));
  }
  return OkStatus();
}

Status CudaBackend::Impl::Mark(ProfileOp op) {
  if (recording == nullptr) return OkStatus();
  Slot& s = *recording;
  const size_t i = s.mark_ops.size();
  if (i >= s.marks.size()) return OkStatus();  // sized for the longest timeline; never reached
  CUDA_RETURN_IF_ERROR(cudaEventRecord(s.marks[i], stream));
  s.mark_ops.push_back(op);
  return OkStatus();
}

Status CudaBackend::Impl::RunStep(const StepPlan& p) {
  if (!p.graph || !p.graph_replay_allowed) return EnqueueStep(p);
  const GraphCachePolicy::Key key{p.num_seqs, p.max_blocks};
  const GraphCachePolicy::Decision d = graph_policy.Next(key);
  if (d.action == GraphCachePolicy::Action::kReplay) {
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs.at(key), stream));
    ++stats.graph_replays;
    return OkStatus();
  }
  if (d.action == GraphCachePolicy::Action::kEager) return EnqueueStep(p);
  if (d.evict) {
    // Replays of the evicted graph already enqueued on `stream` keep their resources.
    (void)cudaGraphExecDestroy(graphs.at(*d.evict));
    graphs.erase(*d.evict);
    ++stats.graphs_evicted;
  }
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status enqueued = EnqueueStep(p);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  cudaError_t instantiated = cudaErrorUnknown;
  cudaGraphExec_t exec = nullptr;
  if (enqueued.ok() && ended == cudaSuccess && graph != nullptr) {
    instantiated = cudaGraphInstantiate(&exec, graph, 0);
  }
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    (void)cudaGetLastError();
    graph_policy.CaptureFailed(key);
    ++stats.graph_capture_failures;
    LOG_WARN("cuda backend: graph capture of decode bucket ({} seqs, {} blocks) failed ({}; {}); running it eagerly",
             p.num_seqs, p.max_blocks, enqueued.ToString(), cudaGetErrorString(ended));
    return EnqueueStep(p);
  }
  graphs[key] = exec;
  ++stats.graphs_captured;
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream));
  ++stats.graph_replays;
  return OkStatus();
}

Status CudaBackend::Impl::Launch(const ForwardBatch& b, Profiler* profiler) {
  RETURN_IF_ERROR(SetDevice());
  if (arena == nullptr) return FailedPreconditionError("KV cache not initialised");
  RETURN_IF_ERROR(ValidateBatch(b));
  Slot& slot = slots[launched % 2];
  if (slot.in_flight) return FailedPreconditionError("two steps already in flight: Wait() first");
  StepPlan p = MakePlan(b);
  // Profiled steps run eagerly with timing events between operations (a graph would time as
  // one block); they are rare (`--profile`), so the plan keeps its padding.
  const bool profile = profiler != nullptr && profiler->enabled();
  slot.profiler = profile ? profiler : nullptr;
  slot.mark_ops.clear();
  if (profile) {
    p.graph_replay_allowed = false;
    const size_t marks = 10 * static_cast<size_t>(config.num_layers) + 4;
    while (slot.marks.size() < marks) {
      cudaEvent_t e = nullptr;
      CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
      slot.marks.push_back(e);
    }
  }
  CHECK_LE(p.total, input_capacity);
  CHECK_LE(p.num_work, work_capacity);
  PackInputs(b, p, slot.host_inputs);
  Status st = [&]() -> Status {
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device_inputs, slot.host_inputs, p.total, cudaMemcpyHostToDevice, stream));
    recording = profile ? &slot : nullptr;
    const Status run = RunStep(p);
    recording = nullptr;
    RETURN_IF_ERROR(run);
    if (p.real_logits > 0) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.host_logits, logits,
                                           sizeof(float) * static_cast<size_t>(p.real_logits) * config.vocab_size,
                                           cudaMemcpyDeviceToHost, stream));
    }
    CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.done, stream));
    return OkStatus();
  }();
  if (!st.ok()) {
    (void)cudaStreamSynchronize(stream);  // nothing may still read the staging slot
    (void)cudaGetLastError();
    return st;
  }
  slot.in_flight = true;
  slot.num_logits = p.real_logits;
  ++launched;
  ++stats.steps;
  if (p.decode) ++stats.decode_steps;
  return OkStatus();
}

Status CudaBackend::Impl::Wait(std::span<float> out) {
  RETURN_IF_ERROR(SetDevice());
  if (waited == launched) return FailedPreconditionError("Wait() without a launched step");
  Slot& slot = slots[waited % 2];
  const cudaError_t e = cudaEventSynchronize(slot.done);
  slot.in_flight = false;
  ++waited;
  CUDA_RETURN_IF_ERROR(e);
  if (slot.profiler != nullptr) {
    for (size_t i = 1; i < slot.mark_ops.size(); ++i) {
      float ms = 0.0f;
      CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, slot.marks[i - 1], slot.marks[i]));
      slot.profiler->Add(slot.mark_ops[i], static_cast<int64_t>(static_cast<double>(ms) * 1e6));
    }
    slot.profiler = nullptr;
  }
  const size_t n = static_cast<size_t>(slot.num_logits) * config.vocab_size;
  if (out.size() < n) return InvalidArgumentError("logits buffer too small");
  // Large batches return tens of MB of logits (128 x 32000 floats = 16 MB): one thread copies
  // that in milliseconds, several in a fraction.
  constexpr size_t kChunk = size_t{1} << 18;  // floats (1 MiB)
  const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  const float* src = slot.host_logits;
  float* dst = out.data();
#pragma omp parallel for schedule(static) if (chunks > 2) num_threads(std::min<int64_t>(chunks, 8))
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    std::memcpy(dst + begin, src + begin, sizeof(float) * std::min(kChunk, n - begin));
  }
  return OkStatus();
}

}  // namespace kvserve
