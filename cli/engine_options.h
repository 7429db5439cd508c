// Engine and KV-cache flags shared by the commands that build an Engine (serve; generate and
// bench later): binding them to a CLI11 app, and turning them plus a loaded model into an
// EngineConfig, a backend (CPU or CUDA) and a running Engine.
//
// Device: --device auto (the default) picks cuda when a usable CUDA device is present, else
// cpu; --device cuda fails with the reason when there is none.
//
// KV pool sizing: --kv-cache-memory bytes when given. Otherwise, on the CPU, the smaller of
// 1 GiB and enough for max-num-seqs sequences of max-model-len tokens; on CUDA, what
// --gpu-memory-utilization of the device leaves after the weights and scratch (vLLM's rule,
// PlanCudaKvBlocks). The effective max-model-len is the flag (default: the model's context
// length) capped at what the pool holds, so every admitted sequence fits.
// --host-offload-memory sizes the host tier in the same block size. --kv-compact-dtype gives
// --kv-compact-share of the KV memory to a region of compacted blocks (the rest is the pool).
//
// Main thread only (flag parsing and start-up).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"

namespace CLI {
class App;
class Validator;
}

namespace kvserve {

struct ModelLoadOptions;

// --weight-dtype: "auto" keeps the file's matrices in their type (the kernels read every type
// kvserve loads); f32/f16/bf16/q8_0 convert every matrix at load (e.g. F16 for
// many-stream throughput: the quantized kernels unpack in float, which prefill pays for).
ModelLoadOptions WeightLoadOptions(const std::string& weight_dtype);
void AddWeightDtypeOption(CLI::App* app, std::string* weight_dtype);
// --compute-dtype f32|bf16|int8|auto (engine/backend/compute_dtype.h, ResolveComputeDtype).
void AddComputeDtypeOption(CLI::App* app, std::string* compute_dtype);
// --kv-dtype with the KV element types.
void AddKvDtypeOption(CLI::App* app, std::string* kv_dtype);
// A KV dtype flag's check: one of `allowed`. int4 (keys in per-token groups) is offered by none
// of them, with a message that says why (it loses a fifth of the greedy tokens) and what to use.
CLI::Validator KvDtypeCheck(std::vector<std::string> allowed);

struct EngineFlags {
  std::string model = "synthetic:150m";
  std::string device = "auto";        // auto | cpu | cuda
  double gpu_memory_utilization = 0.9;
  int threads = 0;                    // 0: all cores
  std::string kv_dtype = "f16";
  std::string weight_dtype = "auto";  // auto: as the file stores them (see WeightLoadOptions)
  std::string compute_dtype = "int8";  // f32 | bf16 | int8 | auto
  std::string kv_keep;                // layered precision: "layers=0,1" or "heads=0:2,5:1"
  std::string kv_keep_dtype = "f16";
  int block_size = 0;                 // 0: DefaultBlockSize (16; 32 with int4c)
  uint64_t kv_cache_memory = 0;       // bytes; 0: see above
  // Compaction of old context (CPU): "none" or the dtype old full blocks are re-encoded to, the
  // share of the KV memory that holds them, how often and how many newest tokens stay.
  std::string kv_compact_dtype = "none";
  double kv_compact_share = 0.5;
  int kv_compact_every = 512;
  int kv_compact_keep = 1024;
  int max_num_seqs = 64;
  int max_num_batched_tokens = 512;
  int max_model_len = 0;              // 0: the model's context length
  int max_queued_requests = 1024;
  bool prefix_caching = true;
  uint64_t host_offload_memory = 0;   // bytes; 0: no host tier
  int64_t max_pinned_memory = -1;     // bytes pinned prefixes may hold; -1: a quarter of the KV cache
  int chat_window = 0;                // tokens; 0: sessions are not windowed
  int chat_sinks = 4;
  int chat_max_prompt = 0;            // tokens a windowed session's prompt may have; 0: 8 x max-model-len
  double session_ttl = 600;
  double session_busy_wait = 2;       // seconds a turn waits for its session's running request
  int max_sessions = 256;
  int max_sessions_per_key = 64;
  std::string preempt = "recompute";  // or "swap" (needs --host-offload-memory)
  // Structured outputs (engine/grammar/grammar_limits.h says what each bounds).
  uint64_t grammar_cache_memory = GrammarLimits{}.cache_bytes;
  int grammar_cache_size = static_cast<int>(GrammarLimits{}.cache_entries);
  double grammar_compile_timeout = 10;  // seconds
  int grammar_compile_threads = GrammarLimits{}.compile_threads;
  int grammar_max_waiting_compiles = GrammarLimits{}.max_waiting_compiles;
  int64_t grammar_max_states = GrammarLimits{}.max_grammar_states;
  int64_t grammar_parser_work = GrammarLimits{}.max_parser_work_per_token;
  // Tests only (hidden `serve --inject-forward-faults`): forward passes that fail, see
  // ParseForwardFaultSpec. Empty: none.
  std::string inject_forward_faults;
  // Tests only (hidden `serve --inject-step-delay-ms`): every forward pass takes at least this
  // long, so a test can watch a generation of a tiny model while it runs.
  double inject_step_delay_ms = 0;
};

inline constexpr uint64_t kDefaultKvCacheMemory = uint64_t{1} << 30;

// --kv-keep: "layers=0,1" or "heads=L:H,..." (also bare "0,1" and "0:2,1:3").
[[nodiscard]] StatusOr<std::vector<KvSpecConfig::Keep>> ParseKvKeep(std::string_view text);

// Adds --model and the engine/cache flags to `app`, bound to *flags (which must outlive it).
void AddEngineOptions(CLI::App* app, EngineFlags* flags);

// What PlanEngine decided, for the start-up log.
struct EnginePlan {
  EngineConfig config;
  std::string device;             // "cpu" or "cuda" (--device auto resolved)
  int requested_max_model_len = 0;  // before capping at the pool (the CUDA backend's scratch)
  uint64_t kv_cache_memory = 0;     // --kv-cache-memory (0: the device's default rule)
  double gpu_memory_utilization = 0.9;
  int num_threads = 0;
  ComputeDtype compute_dtype = ComputeDtype::kF32;
  size_t block_bytes = 0;
  uint64_t kv_bytes = 0;
  std::string kv_description;  // KvSpec::Describe()
};

// Validates the flags against `model`, resolves the device and sizes the KV pool (on CUDA a
// first estimate: CreateEngine sizes it from the device's free memory). INVALID_ARGUMENT
// names the flag; --device cuda without a usable device: UNAVAILABLE with the reason.
[[nodiscard]] StatusOr<EnginePlan> PlanEngine(const EngineFlags& flags, const Model& model);

// Fault injection for tests: "N" (the N-th forward pass, from 0), "N-M" (inclusive), "N-"
// (every pass from N on: a persistent fault), comma-separated. Returns the predicate for
// EngineTestHooks::fail_forward; INVALID_ARGUMENT for a malformed spec.
[[nodiscard]] StatusOr<std::function<bool(int64_t)>> ParseForwardFaultSpec(std::string_view spec);

// The plan's backend (CpuBackend, or CudaBackend with the pool sized on the device, which
// updates plan->config.num_blocks, max_model_len and plan->kv_bytes) + Engine::Create.
[[nodiscard]] StatusOr<std::unique_ptr<Engine>> CreateEngine(EnginePlan* plan, std::shared_ptr<const Model> model);

}  // namespace kvserve
