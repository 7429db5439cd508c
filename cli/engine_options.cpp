// Engine flags: CLI11 bindings, validation, KV pool sizing, engine construction.
#include "cli/engine_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

#include "cache/capacity_planner.h"
#include "engine/backend/backend_factory.h"
#include "engine/model/weights.h"

namespace kvserve {
namespace {

const std::vector<std::string> kKvDtypes = {"f32", "f16", "bf16", "int8", "int4c"};

bool ParseInt(std::string_view s, int* out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool ParseInt64(std::string_view s, int64_t* out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && ptr == s.data() + s.size() && *out >= 0;
}

}  // namespace

StatusOr<std::function<bool(int64_t)>> ParseForwardFaultSpec(std::string_view spec) {
  struct Range {
    int64_t first = 0;
    int64_t last = INT64_MAX;
  };
  std::vector<Range> ranges;
  if (!spec.empty() && spec.back() == ',') {
    return InvalidArgumentError("--inject-forward-faults: the spec ends with a comma");
  }
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    Range r;
    const size_t dash = item.find('-');
    bool ok = ParseInt64(item.substr(0, dash), &r.first);
    if (dash == std::string_view::npos) {
      r.last = r.first;
    } else if (dash + 1 < item.size()) {
      ok = ok && ParseInt64(item.substr(dash + 1), &r.last) && r.last >= r.first;
    }
    if (!ok) {
      return InvalidArgumentError(fmt::format("--inject-forward-faults: '{}' is not N, N-M or N-", item));
    }
    ranges.push_back(r);
  }
  return std::function<bool(int64_t)>([ranges](int64_t pass) {
    for (const Range& r : ranges) {
      if (pass >= r.first && pass <= r.last) return true;
    }
    return false;
  });
}

StatusOr<std::vector<KvSpecConfig::Keep>> ParseKvKeep(std::string_view text) {
  // "layers=0,1" and "heads=0:2,5:1" name what they list; the bare forms "0,1" and "0:2"
  // (an item with a colon is a layer:head pair) mean the same.
  bool heads_only = false;
  if (text.rfind("layers=", 0) == 0) {
    text.remove_prefix(7);
  } else if (text.rfind("heads=", 0) == 0) {
    text.remove_prefix(6);
    heads_only = true;
  }
  std::vector<KvSpecConfig::Keep> keep;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    KvSpecConfig::Keep k;
    const size_t colon = item.find(':');
    const bool ok = ParseInt(item.substr(0, colon), &k.layer) &&
                    (colon == std::string_view::npos || ParseInt(item.substr(colon + 1), &k.head)) &&
                    (!heads_only || colon != std::string_view::npos);
    if (!ok) {
      return InvalidArgumentError(fmt::format(
          "--kv-keep: '{}' is not a layer or a layer:head pair (e.g. layers=0,1 or heads=0:2,5:1)", item));
    }
    keep.push_back(k);
  }
  return keep;
}

ModelLoadOptions WeightLoadOptions(const std::string& weight_dtype) {
  ModelLoadOptions options;
  if (weight_dtype != "auto") options.matrix_type = ParseGgmlType(weight_dtype);
  return options;
}

void AddWeightDtypeOption(CLI::App* app, std::string* weight_dtype) {
  app->add_option("--weight-dtype", *weight_dtype,
                  "Matrix type in memory: auto (as the file stores it) or a type "
                  "every matrix is converted to at load")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16", "q8_0"}));
}

void AddComputeDtypeOption(CLI::App* app, std::string* compute_dtype) {
  app->add_option("--compute-dtype", *compute_dtype,
                  "CPU matrix products: f32 (activations in F32, weights widened to F32), int8 (quantized weights "
                  "times activations quantized to int8 per 32 values, integer dot products as llama.cpp; F32/F16/BF16 "
                  "weights as f32), bf16 (F32/F16/BF16 weights and activations rounded to BF16, F32 sums; quantized "
                  "weights as int8) or auto (bf16 where this CPU's BF16 dot products measure faster, else int8). "
                  "Every mode gives a request the same results whatever its batch. --device cuda: f32")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "int8"}));
}

CLI::Validator KvDtypeCheck(std::vector<std::string> allowed) {
  std::string names;
  for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
  return CLI::Validator(
      [allowed, names](std::string& value) -> std::string {
        if (value == "int4") {
          return "int4 (INT4 keys in per-token groups) is not offered: teacher-forced it keeps 80.6 % of an F32 "
                 "cache's greedy tokens, where int4c keeps 98 % in about the same memory; use int4c (CPU) or int8";
        }
        if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) return value + " is not one of " + names;
        return "";
      },
      "{" + names + "}");
}

void AddKvDtypeOption(CLI::App* app, std::string* kv_dtype) {
  app->add_option("--kv-dtype", *kv_dtype,
                  "KV cache element type: f32, f16, bf16, int8 or int4c (CPU: keys quantized per channel over "
                  "each full block, the block being filled kept in F16; INT4 values)")
      ->check(KvDtypeCheck(kKvDtypes));
}

void AddEngineOptions(CLI::App* app, EngineFlags* f) {
  app->add_option("-m,--model", f->model,
                  "GGUF file, or synthetic:<preset>[:<dtype>] (presets tiny, 150m, 1b, 7b-shape, gemma2-tiny, "
                  "gemma2-2b-shape, phi3-tiny, phi3-mini-shape, qwen3-tiny, gemma-tiny) built in memory");
  app->add_option("--device", f->device, "Where the model runs: cuda, cpu, or auto (cuda when a CUDA device is "
                                         "present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                  "CUDA: fraction of the GPU's memory this server may fill (weights, scratch, KV cache); the KV "
                  "pool gets what is left unless --kv-cache-memory is given")
      ->check(CLI::Range(0.01, 1.0));
  app->add_option("-t,--threads", f->threads, "CPU threads for the forward pass (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  AddKvDtypeOption(app, &f->kv_dtype);
  AddWeightDtypeOption(app, &f->weight_dtype);
  AddComputeDtypeOption(app, &f->compute_dtype);
  app->add_option("--kv-keep", f->kv_keep,
                  "Layered precision: layers or KV heads kept at --kv-keep-dtype: layers=0,1 or heads=0:2,5:1");
  app->add_option("--kv-keep-dtype", f->kv_keep_dtype, "Element type of the --kv-keep layers")
      ->check(KvDtypeCheck(kKvDtypes));
  app->add_option("--block-size", f->block_size, "KV cache block size in tokens (default 16; 32 with int4c)")->check(CLI::Range(1, 4096));
  app->add_option("--kv-compact-dtype", f->kv_compact_dtype,
                  "Compaction of old context (CPU): re-encode full blocks older than --kv-compact-keep tokens to "
                  "this dtype every --kv-compact-every tokens (none = off)")
      ->check(KvDtypeCheck({"none", "int8", "int4c"}));
  app->add_option("--kv-compact-share", f->kv_compact_share, "Share of the KV memory that holds compacted blocks")
      ->check(CLI::Range(0.01, 0.99));
  app->add_option("--kv-compact-every", f->kv_compact_every, "Tokens a sequence computes between compactions")
      ->check(CLI::Range(1, 1 << 24));
  app->add_option("--kv-compact-keep", f->kv_compact_keep, "Newest tokens of a sequence kept at --kv-dtype")
      ->check(CLI::Range(0, 1 << 24));
  app->add_option("--kv-cache-memory", f->kv_cache_memory,
                  "KV pool size, e.g. 2GiB (default: CPU the smaller of 1 GiB and max-num-seqs x max-model-len; "
                  "CUDA what --gpu-memory-utilization leaves)")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--max-num-seqs", f->max_num_seqs, "Sequences per engine step")->check(CLI::Range(1, 4096));
  app->add_option("--max-num-batched-tokens", f->max_num_batched_tokens,
                  "Tokens per engine step (prompts are prefilled in chunks of this size)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--max-model-len", f->max_model_len, "Longest sequence, prompt + completion (0 = the model's)")
      ->check(CLI::Range(0, 1 << 24));
  app->add_option("--max-queued-requests", f->max_queued_requests,
                  "Requests waiting for a slot beyond which new ones get 429 / RESOURCE_EXHAUSTED")
      ->check(CLI::Range(1, 1 << 24));
  app->add_flag("--enable-prefix-caching,!--no-prefix-caching", f->prefix_caching,
                "Reuse the KV blocks of shared prompt prefixes");
  app->add_option("--host-offload-memory", f->host_offload_memory,
                  "Host-memory KV tier for swapped and idle sessions, e.g. 4GiB (0 = off)")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--max-pinned-memory", f->max_pinned_memory,
                  "KV memory pinned prefixes (/v1/cache/pins) may hold, e.g. 1GiB (default: a quarter of the KV "
                  "cache; 0 = pinning off)")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--chat-window", f->chat_window,
                  "Sliding window (tokens) of server-side chat sessions (0 = sessions end at max-model-len)")
      ->check(CLI::Range(0, 1 << 24));
  app->add_option("--chat-sinks", f->chat_sinks, "Sink tokens a windowed session keeps at its start")
      ->check(CLI::Range(0, 1 << 16));
  app->add_option("--chat-max-prompt", f->chat_max_prompt,
                  "Longest prompt (the re-sent history) a windowed session accepts, in tokens (0 = 8 x max-model-len)")
      ->check(CLI::Range(0, 1 << 30));
  app->add_option("--session-busy-wait", f->session_busy_wait,
                  "Seconds a turn waits for its session's running request to end before it gets 409")
      ->check(CLI::Range(0.0, 60.0));
  app->add_option("--session-ttl", f->session_ttl, "Seconds an idle chat session is kept")
      ->check(CLI::Range(0.0, 1e9));
  app->add_option("--max-sessions", f->max_sessions, "Chat sessions kept in all")->check(CLI::Range(1, 1 << 24));
  app->add_option("--max-sessions-per-key", f->max_sessions_per_key, "Chat sessions kept per API key")
      ->check(CLI::Range(1, 1 << 24));
  app->add_option("--preempt", f->preempt, "When the pool is full: recompute a preempted sequence, or swap it "
                                           "to the host tier")
      ->check(CLI::IsMember({"recompute", "swap"}));
  app->add_option("--grammar-cache-memory", f->grammar_cache_memory,
                  "Compiled structured-output grammars kept in memory, e.g. 1GiB (least recently used go first)")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--grammar-cache-size", f->grammar_cache_size, "Compiled structured-output grammars kept")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--grammar-compile-timeout", f->grammar_compile_timeout,
                  "Seconds a structured output's grammar may take to compile, waiting included (then 400)")
      ->check(CLI::Range(0.001, 3600.0));
  app->add_option("--grammar-compile-threads", f->grammar_compile_threads,
                  "Threads that compile structured outputs' grammars")
      ->check(CLI::Range(1, 64));
  app->add_option("--grammar-max-waiting-compiles", f->grammar_max_waiting_compiles,
                  "Grammar compiles queued beyond those running, past which a new one gets 429")
      ->check(CLI::Range(0, 1024));
  app->add_option("--grammar-max-states", f->grammar_max_states,
                  "Automaton states one structured output's grammar may have (past it: 400)")
      ->check(CLI::Range(int64_t{1000}, int64_t{1} << 30));
  app->add_option("--grammar-parser-work", f->grammar_parser_work,
                  "Parser steps one token of a structured output may take (past it the request ends with an error)")
      ->check(CLI::Range(int64_t{1} << 16, int64_t{1} << 40));
}

StatusOr<EnginePlan> PlanEngine(const EngineFlags& f, const Model& model) {
  const ModelConfig& mc = model.config();
  EnginePlan plan;
  EngineConfig& c = plan.config;
  const KvDtype kv = ParseKvDtype(f.kv_dtype).value_or(KvDtype::kF16);  // the validators checked both
  const KvDtype kv_keep = ParseKvDtype(f.kv_keep_dtype).value_or(KvDtype::kF16);
  ASSIGN_OR_RETURN(plan.device, ResolveDevice(f.device, mc, {kv, kv_keep}));
  plan.kv_cache_memory = f.kv_cache_memory;
  plan.gpu_memory_utilization = f.gpu_memory_utilization;
  c.max_num_seqs = f.max_num_seqs;
  c.max_num_batched_tokens = f.max_num_batched_tokens;
  c.max_queued_requests = f.max_queued_requests;
  c.preempt_by_swap = f.preempt == "swap";
  c.enable_prefix_caching = f.prefix_caching;
  c.chat_window_tokens = f.chat_window;
  c.chat_sink_tokens = f.chat_sinks;
  c.chat_max_prompt_tokens = f.chat_max_prompt;
  c.session_ttl_seconds = f.session_ttl;
  c.session_busy_wait_seconds = f.session_busy_wait;
  c.max_sessions = f.max_sessions;
  c.max_sessions_per_tenant = f.max_sessions_per_key;
  c.grammar.cache_bytes = f.grammar_cache_memory;
  c.grammar.cache_entries = static_cast<size_t>(f.grammar_cache_size);
  c.grammar.compile_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.grammar_compile_timeout * 1000));
  c.grammar.compile_threads = f.grammar_compile_threads;
  c.grammar.max_waiting_compiles = f.grammar_max_waiting_compiles;
  c.grammar.max_grammar_states = f.grammar_max_states;
  c.grammar.max_parser_work_per_token = f.grammar_parser_work;
  c.kv.num_layers = mc.num_layers;
  c.kv.num_kv_heads = mc.num_kv_heads;
  c.kv.head_dim = mc.head_dim;
  c.kv.block_size = f.block_size;
  c.kv.dtype = *ParseKvDtype(f.kv_dtype);  // checked by the option's validator
  c.kv.keep_dtype = *ParseKvDtype(f.kv_keep_dtype);
  ASSIGN_OR_RETURN(c.kv.keep, ParseKvKeep(f.kv_keep));
  StatusOr<KvSpec> spec = KvSpec::Create(c.kv);
  if (!spec.ok()) return InvalidArgumentError("KV cache: " + spec.status().message());
  c.kv.block_size = spec->block_size();  // the default resolved
  if (c.preempt_by_swap && f.host_offload_memory == 0) {
    return InvalidArgumentError("--preempt swap needs a host tier: set --host-offload-memory");
  }
  if (f.chat_window > 0 && f.chat_sinks >= f.chat_window) {
    return InvalidArgumentError("--chat-sinks must be smaller than --chat-window");
  }

  int max_len = f.max_model_len > 0 ? f.max_model_len : mc.context_length;
  plan.requested_max_model_len = max_len;
  plan.block_bytes = spec->block_bytes();
  // Per-channel keys (INT4C) stage each filling block's keys in F16 beside the pool: one slot per
  // running sequence comes out of the KV memory (capacity_planner.h).
  const uint64_t staging = static_cast<uint64_t>(spec->staging_bytes()) * static_cast<uint64_t>(f.max_num_seqs);
  uint64_t memory = f.kv_cache_memory;
  if (memory == 0) {
    const uint64_t wanted = static_cast<uint64_t>(spec->bytes_for_tokens(max_len)) * static_cast<uint64_t>(f.max_num_seqs);
    memory = std::min(kDefaultKvCacheMemory, wanted + staging);
  }
  uint64_t pool_memory = memory > staging ? memory - staging : 0;
  std::optional<KvSpec> compact;
  uint64_t compact_memory = 0;
  if (f.kv_compact_dtype != "none") {
    if (plan.device != "cpu") return InvalidArgumentError("--kv-compact-dtype needs --device cpu (no CUDA kernels yet)");
    StatusOr<KvSpec> cs = CompactSpecFor(*spec, *ParseKvDtype(f.kv_compact_dtype));
    if (!cs.ok()) return InvalidArgumentError("--kv-compact-dtype: " + cs.status().message());
    compact = *cs;
    compact_memory = static_cast<uint64_t>(static_cast<double>(pool_memory) * f.kv_compact_share);
    pool_memory -= compact_memory;
  }
  const uint64_t blocks = static_cast<uint64_t>(std::min<int64_t>(
      NumBlocksForMemory(*spec, static_cast<int64_t>(std::min<uint64_t>(pool_memory, INT64_MAX))), 1 << 30));
  if (blocks < 2) {
    return InvalidArgumentError(
        fmt::format("--kv-cache-memory {} bytes holds fewer than 2 blocks of {} bytes{}", memory, plan.block_bytes,
                    staging > 0 ? fmt::format(" after {} bytes of key staging ({} per sequence x --max-num-seqs)",
                                              staging, spec->staging_bytes())
                                : ""));
  }
  c.num_blocks = static_cast<int>(blocks);
  max_len = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(max_len), blocks * c.kv.block_size));
  c.max_model_len = max_len;
  c.max_pinned_bytes = f.max_pinned_memory;
  c.num_host_blocks = static_cast<int>(std::min<int64_t>(
      NumBlocksForMemory(*spec, static_cast<int64_t>(std::min<uint64_t>(f.host_offload_memory, INT64_MAX))), 1 << 30));
  plan.kv_bytes = blocks * plan.block_bytes;
  plan.kv_description = spec->Describe();
  if (compact) {
    c.num_compact_blocks = static_cast<int>(std::min<int64_t>(
        NumBlocksForMemory(*compact, static_cast<int64_t>(std::min<uint64_t>(compact_memory, INT64_MAX))), 1 << 30));
    if (c.num_compact_blocks < 1) return InvalidArgumentError("--kv-compact-share leaves no compacted block");
    c.compact_dtype = *ParseKvDtype(f.kv_compact_dtype);
    c.compact_every_tokens = f.kv_compact_every;
    c.compact_keep_tokens = f.kv_compact_keep;
    plan.kv_bytes += static_cast<uint64_t>(c.num_compact_blocks) * compact->block_bytes();
    plan.kv_description += fmt::format("; old context compacted to {} ({} blocks, every {} tokens, newest {} kept)",
                                       f.kv_compact_dtype, c.num_compact_blocks, f.kv_compact_every,
                                       f.kv_compact_keep);
  }
  plan.num_threads = f.threads;
  ASSIGN_OR_RETURN(plan.compute_dtype, ResolveComputeDtype(f.compute_dtype, plan.device));
  if (!f.inject_forward_faults.empty()) {
    ASSIGN_OR_RETURN(c.test_hooks.fail_forward, ParseForwardFaultSpec(f.inject_forward_faults));
  }
  if (f.inject_step_delay_ms > 0) {
    // Slows every pass down (browser tests that watch a generation while it runs).
    auto fail = std::move(c.test_hooks.fail_forward);
    const auto delay = std::chrono::duration<double, std::milli>(f.inject_step_delay_ms);
    c.test_hooks.fail_forward = [fail = std::move(fail), delay](int64_t pass) {
      std::this_thread::sleep_for(delay);
      return fail && fail(pass);
    };
  }
  return plan;
}

StatusOr<std::unique_ptr<Engine>> CreateEngine(EnginePlan* plan, std::shared_ptr<const Model> model) {
  EngineConfig& c = plan->config;
  BackendConfig backend_config = BackendConfigFor(c, plan->device);
  backend_config.num_threads = plan->num_threads;
  backend_config.compute_dtype = plan->compute_dtype;
  backend_config.max_model_len = plan->requested_max_model_len;
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(backend_config, *model));
  if (plan->device == "cpu") return Engine::Create(c, std::move(model), std::move(backend));
  // The device pool: after the weights and scratch are on the device, so they count as used.
  DeviceKvBudget budget;
  budget.gpu_memory_utilization = plan->gpu_memory_utilization;
  budget.kv_cache_bytes = static_cast<int64_t>(std::min<uint64_t>(plan->kv_cache_memory, INT64_MAX));
  ASSIGN_OR_RETURN(const int blocks, PlanDeviceKvBlocks(backend_config, plan->block_bytes, budget));
  if (blocks < 2) return ResourceExhaustedError("the GPU has room for fewer than 2 KV blocks");
  c.num_blocks = blocks;
  c.max_model_len = static_cast<int>(
      std::min<int64_t>(plan->requested_max_model_len, int64_t{blocks} * c.kv.block_size));
  plan->kv_bytes = static_cast<uint64_t>(blocks) * plan->block_bytes;
  return Engine::Create(c, std::move(model), std::move(backend));
}

}  // namespace kvserve
