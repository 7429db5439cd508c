// CudaBackend: device set-up, scratch, the KV arena and the block operations (copy, shift, raw
// read/write). The weights are uploaded (or made up) in cuda_weights.cpp, the step itself
// (packing, kernels, graphs) is in cuda_forward.cpp; factories, planning and errors in
// cuda_device.cpp.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/log.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_backend_impl.h"

namespace kvserve {
namespace {

cuda::ActType ActTypeOf(CudaWeightType t) {
  switch (t) {
    case CudaWeightType::kF16: return cuda::ActType::kF16;
    case CudaWeightType::kBF16: return cuda::ActType::kBF16;
    case CudaWeightType::kF32: return cuda::ActType::kF32;
  }
  return cuda::ActType::kF16;
}

}  // namespace

// ---- Impl: device, weights, scratch ----

Status CudaBackend::Impl::SetDevice() const {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  return OkStatus();
}

Status CudaBackend::Impl::CheckBlock(int32_t id, size_t bytes, const char* what) const {
  if (arena == nullptr || id < 0 || id >= num_blocks || bytes != spec->block_bytes()) {
    return InvalidArgumentError(fmt::format("{}: bad block id or size", what));
  }
  return OkStatus();
}

Status CudaBackend::Impl::Drain() {
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return OkStatus();
}

Status CudaBackend::Impl::Init(const Model* model, uint64_t random_seed) {
  if (config.NeedsBeyondLlama()) {
    return UnimplementedError(fmt::format("the CUDA backend does not run {} models yet (sliding-window attention, "
                                          "soft-capping)", config.architecture));
  }
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (options.device < 0 || options.device >= count) {
    return InvalidArgumentError(fmt::format("CUDA device {} does not exist ({} present)", options.device, count));
  }
  RETURN_IF_ERROR(SetDevice());
  cudaDeviceProp prop{};
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device));
  num_sms = prop.multiProcessorCount;
  int optin = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, options.device));
  smem_optin = static_cast<size_t>(optin);
  description = fmt::format("{} (sm_{}{}, {:.1f} GiB)", prop.name, prop.major, prop.minor,
                            prop.totalGlobalMem / double(1ull << 30));
  if (prop.major < 8) {
    return UnimplementedError(fmt::format("CUDA backend needs compute capability 8.0+, found {}", description));
  }
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas));
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas, stream));
  CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));  // F32 stays F32 (no TF32)
  act = ActTypeOf(options.weight_type);
  max_model_len = options.max_model_len > 0 ? options.max_model_len : config.context_length;

  // RoPE tables as the CPU backend builds them.
  const int half = config.rope_dim / 2;
  rope_table_positions = std::min(std::max(max_model_len, config.context_length), 1 << 16);
  std::vector<float> cos_sin;
  inv_freq_host = config.RopeInvFreq();
  cuda::BuildRopeTables(inv_freq_host, static_cast<double>(config.rope_freq_scale), rope_table_positions, &cos_sin);
  RETURN_IF_ERROR(rope_region.Allocate(
      DeviceRegion::Align(cos_sin.size() * sizeof(float)) + DeviceRegion::Align(std::max(half, 1) * sizeof(double)),
      "RoPE tables"));
  rope_cos_sin = static_cast<float*>(rope_region.Take(cos_sin.size() * sizeof(float)));
  rope_inv_freq = static_cast<double*>(rope_region.Take(std::max(half, 1) * sizeof(double)));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(rope_cos_sin, cos_sin.data(), cos_sin.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(rope_inv_freq, inv_freq_host.data(), half * sizeof(double), cudaMemcpyHostToDevice));

  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(model != nullptr ? UploadWeights(*model) : RandomWeights(random_seed));
  RETURN_IF_ERROR(AllocateScratch());
  // The setup copies (cudaMemcpy from pageable memory: on the legacy default stream, and
  // possibly still in flight when it returns) must land before any kernel on `stream`, a
  // non-blocking stream that does not wait for the legacy one.
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  LOG_INFO("cuda backend: {} — weights {:.2f} GiB ({}) in {:.1f} s, scratch {:.0f} MiB", description,
           weight_region.size() / double(1ull << 30), DescribeWeights(),
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
           scratch_region.size() / double(1 << 20));
  return OkStatus();
}

Status CudaBackend::Impl::AllocateScratch() {
  const ModelConfig& c = config;
  const size_t T = static_cast<size_t>(options.limits.max_num_tokens);
  const size_t L = static_cast<size_t>(options.limits.max_logits);
  const size_t e = cuda::ActBytes(act);
  part_rows = static_cast<int64_t>(options.limits.max_num_seqs) * c.num_heads * kMaxSplitsPerSeqHead;
  using R = DeviceRegion;
  const size_t bytes = R::Align(kCublasWorkspaceBytes) + R::Align(T * c.dim * 4) + R::Align(T * c.dim * e) +
                       R::Align(T * qkv_dim() * 4) + R::Align(T * c.q_dim() * e) + R::Align(T * 2 * c.ffn_dim * 4) +
                       R::Align(T * c.ffn_dim * e) + R::Align(L * c.dim * e) + R::Align(L * c.vocab_size * 4) +
                       R::Align(part_rows * c.head_dim * 4) + R::Align(part_rows * 2 * 4);
  // The dequantize scratch, only where a quantized matrix may meet a step of GEMM size.
  const bool dequant_gemm = max_quant_values > 0 && options.limits.max_num_tokens >= options.quant_gemm_min_tokens;
  dequant_values = dequant_gemm ? std::min(max_quant_values, kDequantTileValues) : 0;
  const size_t dequant_bytes = R::Align(static_cast<size_t>(dequant_values) * e);
  RETURN_IF_ERROR(scratch_region.Allocate(bytes + dequant_bytes, "activations"));
  cublas_workspace = scratch_region.Take(kCublasWorkspaceBytes);
  x = static_cast<float*>(scratch_region.Take(T * c.dim * 4));
  xn = scratch_region.Take(T * c.dim * e);
  qkv = static_cast<float*>(scratch_region.Take(T * qkv_dim() * 4));
  attn = scratch_region.Take(T * c.q_dim() * e);
  gate_up = static_cast<float*>(scratch_region.Take(T * 2 * c.ffn_dim * 4));
  ffn_h = scratch_region.Take(T * c.ffn_dim * e);
  xl = scratch_region.Take(L * c.dim * e);
  logits = static_cast<float*>(scratch_region.Take(L * c.vocab_size * 4));
  part_acc = static_cast<float*>(scratch_region.Take(part_rows * c.head_dim * 4));
  part_ml = static_cast<float*>(scratch_region.Take(part_rows * 2 * 4));
  if (dequant_values > 0) dequant = scratch_region.Take(dequant_bytes);
  // A fixed workspace: cuBLAS then never allocates, which CUDA graph capture requires.
  CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(cublas, cublas_workspace, kCublasWorkspaceBytes));

  // Attention CTA shapes: decode serves n_rep rows; prefill tiles q_tile tokens * n_rep rows,
  // as many as fit ~100 KiB of shared memory (at most 64 rows).
  const int n_rep = c.num_heads / c.num_kv_heads;
  const size_t budget = std::min<size_t>(smem_optin, 100 << 10);
  int q_tile = std::max(1, 64 / n_rep);
  while (q_tile > 1 && cuda::AttentionSmemBytes(q_tile * n_rep, c.head_dim) > budget) q_tile /= 2;
  prefill_rows = q_tile * n_rep;
  const size_t need = cuda::AttentionSmemBytes(prefill_rows, c.head_dim);
  if (need > smem_optin) {
    return UnimplementedError(fmt::format("attention for {} query heads per kv head of dim {} needs {} bytes of shared "
                                          "memory; the device allows {}",
                                          n_rep, c.head_dim, need, smem_optin));
  }
  if (need > (48 << 10)) CUDA_RETURN_IF_ERROR(cuda::SetAttentionSmemLimit(need));
  return OkStatus();
}

// ---- KV arena ----

Status CudaBackend::Impl::InitKvCache(const KvSpec& s, int blocks) {
  RETURN_IF_ERROR(SetDevice());
  if (s.num_layers() != config.num_layers || s.num_kv_heads() != config.num_kv_heads ||
      s.head_dim() != config.head_dim) {
    return InvalidArgumentError("KV spec does not match the model's layers/heads/head dim");
  }
  if (blocks <= 0) return InvalidArgumentError("KV cache needs at least one block");
  for (int l = 0; l < s.num_layers(); ++l) {
    for (int h = 0; h < s.num_kv_heads(); ++h) {
      if (KeysPerChannel(s.dtype(l, h))) {
        return InvalidArgumentError("the int4c KV cache runs on the CPU backend only so far; use int8 with "
                                    "--device cuda");
      }
    }
  }
  if (launched != waited) return FailedPreconditionError("InitKvCache with steps in flight");
  RETURN_IF_ERROR(Drain());
  FreeKvCache();

  const size_t bytes = s.block_bytes() * static_cast<size_t>(blocks);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return ResourceExhaustedError(fmt::format("cannot allocate {:.2f} GiB of device memory for {} KV blocks: {}",
                                              bytes / double(1ull << 30), blocks, cudaGetErrorString(e)));
  }
  arena = static_cast<uint8_t*>(p);
  arena_bytes = bytes;
  num_blocks = blocks;
  CUDA_RETURN_IF_ERROR(cudaMemset(arena, 0, bytes));
  spec = std::make_unique<KvSpec>(s);
  vec8 = s.head_dim() % 8 == 0 && s.group_size() % 8 == 0;
  max_blocks_cap = (max_model_len + s.block_size() - 1) / s.block_size();

  // Input buffer capacity: the largest step the limits allow.
  const BackendLimits& lim = options.limits;
  work_capacity = lim.max_num_tokens + lim.max_num_seqs * (1 + kMaxSplitsPerSeqHead);
  StepPlan biggest;
  biggest.num_tokens = lim.max_num_tokens;
  biggest.num_seqs = lim.max_num_seqs;
  biggest.max_blocks = max_blocks_cap;
  biggest.num_logits = lim.max_logits;
  LayoutInputs(&biggest, work_capacity);
  input_capacity = biggest.total;

  const int L = s.num_layers();
  const int H = s.num_kv_heads();
  const int half = config.rope_dim / 2;
  using R = DeviceRegion;
  RETURN_IF_ERROR(kv_meta_region.Allocate(R::Align(sizeof(uint64_t) * L * 2 * H) + R::Align(size_t(L) * H) +
                                              R::Align(sizeof(int32_t) * blocks) +
                                              R::Align(sizeof(float) * std::max(half, 1) * 2) + R::Align(input_capacity),
                                          "KV layout tables and inputs"));
  seg_offsets = static_cast<uint64_t*>(kv_meta_region.Take(sizeof(uint64_t) * L * 2 * H));
  kv_dtypes = static_cast<uint8_t*>(kv_meta_region.Take(size_t(L) * H));
  shift_blocks = static_cast<int32_t*>(kv_meta_region.Take(sizeof(int32_t) * blocks));
  shift_cos_sin = static_cast<float*>(kv_meta_region.Take(sizeof(float) * std::max(half, 1) * 2));
  device_inputs = static_cast<uint8_t*>(kv_meta_region.Take(input_capacity));
  std::vector<uint64_t> offsets(static_cast<size_t>(L) * 2 * H);
  std::vector<uint8_t> dtypes(static_cast<size_t>(L) * H);
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h) {
      offsets[(static_cast<size_t>(l) * 2 + 0) * H + h] = s.segment_offset(l, 0, h);
      offsets[(static_cast<size_t>(l) * 2 + 1) * H + h] = s.segment_offset(l, 1, h);
      dtypes[static_cast<size_t>(l) * H + h] = static_cast<uint8_t>(s.dtype(l, h));
    }
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpy(seg_offsets, offsets.data(), offsets.size() * 8, cudaMemcpyHostToDevice));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(kv_dtypes, dtypes.data(), dtypes.size(), cudaMemcpyHostToDevice));

  for (Slot& slot : slots) {
    void* hp = nullptr;
    CUDA_RETURN_IF_ERROR(cudaHostAlloc(&hp, input_capacity, cudaHostAllocDefault));
    slot.host_inputs = static_cast<uint8_t*>(hp);
    CUDA_RETURN_IF_ERROR(cudaHostAlloc(&hp, sizeof(float) * lim.max_logits * config.vocab_size, cudaHostAllocDefault));
    slot.host_logits = static_cast<float*>(hp);
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
    slot.in_flight = false;
  }
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());  // the memset and metadata copies, as in Init
  LOG_INFO("cuda backend: KV cache {} blocks x {} bytes = {:.2f} GiB ({})", blocks, s.block_bytes(),
           bytes / double(1ull << 30), s.Describe());
  return OkStatus();
}

void CudaBackend::Impl::ClearGraphs() {
  for (auto& [key, exec] : graphs) (void)cudaGraphExecDestroy(exec);
  graphs.clear();
  graph_policy = GraphCachePolicy(options.max_cuda_graphs);
}

void CudaBackend::Impl::FreeKvCache() {
  ClearGraphs();  // graphs hold the arena's and the input buffer's addresses
  if (arena != nullptr) (void)cudaFree(arena);
  arena = nullptr;
  arena_bytes = 0;
  num_blocks = 0;
  kv_meta_region.Release();
  for (Slot& slot : slots) {
    if (slot.host_inputs != nullptr) (void)cudaFreeHost(slot.host_inputs);
    if (slot.host_logits != nullptr) (void)cudaFreeHost(slot.host_logits);
    if (slot.done != nullptr) (void)cudaEventDestroy(slot.done);
    for (cudaEvent_t e : slot.marks) (void)cudaEventDestroy(e);
    slot = Slot{};
  }
  launched = waited = 0;
}

CudaBackend::Impl::~Impl() {
  if (cudaSetDevice(options.device) != cudaSuccess) return;
  if (stream != nullptr) (void)cudaStreamSynchronize(stream);
  if (registered_host != nullptr) (void)cudaHostUnregister(registered_host);
  FreeKvCache();
  weight_region.Release();
  rope_region.Release();
  scratch_region.Release();
  if (cublas != nullptr) (void)cublasDestroy(cublas);
  if (stream != nullptr) (void)cudaStreamDestroy(stream);
  (void)cudaGetLastError();
}

cuda::KvLayerView CudaBackend::Impl::LayerView(int layer) const {
  cuda::KvLayerView v;
  v.arena = arena;
  v.block_bytes = spec->block_bytes();
  v.block_size = spec->block_size();
  v.head_dim = spec->head_dim();
  v.group_size = spec->group_size();
  v.num_kv_heads = spec->num_kv_heads();
  v.seg_offsets = seg_offsets + static_cast<size_t>(layer) * 2 * v.num_kv_heads;
  v.dtypes = kv_dtypes + static_cast<size_t>(layer) * v.num_kv_heads;
  v.vec8 = vec8;
  return v;
}

// ---- CudaBackend ----

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

Status CudaBackend::InitKvCache(const KvSpec& spec, int num_blocks) { return impl_->InitKvCache(spec, num_blocks); }

Status CudaBackend::Forward(const ForwardBatch& batch, std::span<float> logits) {
  if (impl_->launched != impl_->waited) return FailedPreconditionError("Forward with a launched step not waited for");
  if (logits.size() < static_cast<size_t>(batch.num_logits()) * impl_->config.vocab_size) {
    return InvalidArgumentError("logits buffer too small");
  }
  RETURN_IF_ERROR(impl_->Launch(batch, profiler_));
  return impl_->Wait(logits);
}

Status CudaBackend::Launch(const ForwardBatch& batch) { return impl_->Launch(batch, profiler_); }
Status CudaBackend::Wait(std::span<float> logits) { return impl_->Wait(logits); }
CudaBackendStats CudaBackend::stats() const { return impl_->stats; }
std::string CudaBackend::device_description() const { return impl_->description; }
size_t CudaBackend::weight_bytes() const { return impl_->weight_region.size(); }

Status CudaBackend::CopyBlocks(std::span<const std::pair<int32_t, int32_t>> src_dst) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.SetDevice());
  for (const auto& [src, dst] : src_dst) {
    if (src < 0 || src >= m.num_blocks || dst < 0 || dst >= m.num_blocks) {
      return InvalidArgumentError("CopyBlocks: block id out of range");
    }
  }
  const size_t bytes = m.spec ? m.spec->block_bytes() : 0;
  for (const auto& [src, dst] : src_dst) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.arena + static_cast<size_t>(dst) * bytes,
                                         m.arena + static_cast<size_t>(src) * bytes, bytes, cudaMemcpyDeviceToDevice,
                                         m.stream));
  }
  return m.Drain();
}

Status CudaBackend::ShiftKeys(std::span<const int32_t> blocks, int delta) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.SetDevice());
  if (m.arena == nullptr) return FailedPreconditionError("KV cache not initialised");
  for (int32_t id : blocks) {
    if (id < 0 || id >= m.num_blocks) return InvalidArgumentError("ShiftKeys: block id out of range");
  }
  if (delta == 0 || blocks.empty()) return OkStatus();
  const int half = m.config.rope_dim / 2;
  // R(p + delta) = R(delta) R(p): one (cos, sin) per frequency, computed in double as the CPU.
  std::vector<float> cos_sin(static_cast<size_t>(half) * 2);
  for (int i = 0; i < half; ++i) {
    const double theta = delta * static_cast<double>(m.config.rope_freq_scale) * m.inv_freq_host[i];
    cos_sin[2 * i] = static_cast<float>(std::cos(theta));
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(theta));
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.shift_cos_sin, cos_sin.data(), cos_sin.size() * sizeof(float),
                                       cudaMemcpyHostToDevice, m.stream));
  // The same block twice would be rotated twice, as on the CPU; the kernel runs rows in
  // parallel, so process the list in runs of distinct blocks.
  std::vector<int32_t> run;
  std::vector<bool> in_run(static_cast<size_t>(m.num_blocks), false);
  auto flush = [&]() -> Status {
    if (run.empty()) return OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.shift_blocks, run.data(), run.size() * sizeof(int32_t),
                                         cudaMemcpyHostToDevice, m.stream));
    cuda::ShiftKeysArgs a;
    a.arena = m.arena;
    a.block_bytes = m.spec->block_bytes();
    a.block_size = m.spec->block_size();
    a.head_dim = m.spec->head_dim();
    a.group_size = m.spec->group_size();
    a.num_layers = m.spec->num_layers();
    a.num_kv_heads = m.spec->num_kv_heads();
    a.seg_offsets = m.seg_offsets;
    a.dtypes = m.kv_dtypes;
    a.blocks = m.shift_blocks;
    a.num_blocks = static_cast<int>(run.size());
    a.cos_sin = m.shift_cos_sin;
    a.rope_dim = m.config.rope_dim;
    a.neox = m.config.rope_layout == RopeLayout::kNeox;
    CUDA_RETURN_IF_ERROR(cuda::LaunchShiftKeys(a, m.stream));
    RETURN_IF_ERROR(m.Drain());  // `run` (pageable) is reused next
    for (int32_t id : run) in_run[id] = false;
    run.clear();
    return OkStatus();
  };
  for (int32_t id : blocks) {
    if (in_run[id]) RETURN_IF_ERROR(flush());
    in_run[id] = true;
    run.push_back(id);
  }
  RETURN_IF_ERROR(flush());
  return OkStatus();
}

Status CudaBackend::ReadBlock(int32_t id, std::span<uint8_t> out) const {
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.SetDevice());
  RETURN_IF_ERROR(m.CheckBlock(id, out.size(), "ReadBlock"));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data(), m.arena + static_cast<size_t>(id) * out.size(), out.size(),
                                       cudaMemcpyDeviceToHost, m.stream));
  return m.Drain();
}

Status CudaBackend::WriteBlock(int32_t id, std::span<const uint8_t> in) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.SetDevice());
  RETURN_IF_ERROR(m.CheckBlock(id, in.size(), "WriteBlock"));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.arena + static_cast<size_t>(id) * in.size(), in.data(), in.size(),
                                       cudaMemcpyHostToDevice, m.stream));
  return m.Drain();
}

Status CudaBackend::ReadBlocks(std::span<const BlockTransfer> copies) const {
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.SetDevice());
  for (const BlockTransfer& c : copies) {
    RETURN_IF_ERROR(m.CheckBlock(c.block, c.host.size(), "ReadBlocks"));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(c.host.data(), m.arena + static_cast<size_t>(c.block) * c.host.size(),
                                         c.host.size(), cudaMemcpyDeviceToHost, m.stream));
  }
  return m.Drain();
}

Status CudaBackend::WriteBlocks(std::span<const BlockTransfer> copies) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.SetDevice());
  for (const BlockTransfer& c : copies) {
    RETURN_IF_ERROR(m.CheckBlock(c.block, c.host.size(), "WriteBlocks"));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.arena + static_cast<size_t>(c.block) * c.host.size(), c.host.data(),
                                         c.host.size(), cudaMemcpyHostToDevice, m.stream));
  }
  return m.Drain();
}

Status CudaBackend::RegisterHostMemory(std::span<uint8_t> memory) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.SetDevice());
  if (m.registered_host != nullptr) {
    (void)cudaHostUnregister(m.registered_host);
    m.registered_host = nullptr;
  }
  if (memory.empty()) return OkStatus();
  const cudaError_t e = cudaHostRegister(memory.data(), memory.size(), cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    LOG_WARN("cuda backend: cannot page-lock the {:.0f} MiB host KV tier ({}); swaps copy from pageable memory",
             memory.size() / double(1 << 20), cudaGetErrorString(e));
    return OkStatus();
  }
  m.registered_host = memory.data();
  return OkStatus();
}

}  // namespace kvserve
