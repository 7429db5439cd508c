// SerializeMetrics and the engine collector (see server/api/metrics.h).
//
// Exported (all prefixed kvserve_):
//   gauges     kv_cache_usage_ratio, kv_cache_blocks{state=used|free|cached|pinned},
//              kv_cache_capacity_blocks, kv_cache_tokens, kv_cache_bytes{dtype},
//              kv_host_blocks{state=used|free}, tokens_per_second,
//              requests{state=running|waiting|swapped}, chat_sessions, batch_tokens,
//              batch_sequences, engine_healthy, info{model,kv_dtype,block_size,backend} = 1,
//              grammar_cache_bytes, grammar_shared_mask_bytes, grammar_compiling,
//              state_bytes (with --state-dir)
//   counters   prompt_tokens_total, generation_tokens_total, preemptions_total,
//              kv_evictions_total{reason=window|prefix_lru|session|preemption} (blocks),
//              prefix_cache_queries_total, prefix_cache_hits_total,
//              prefix_cache_query_tokens_total, prefix_cache_hit_tokens_total,
//              kv_swapped_blocks_total{direction=out|in}, engine_steps_total,
//              forward_errors_total, requests_total{status=ok|aborted|error|rejected},
//              grammar_compiles_total{result=compiled|cached|error}, grammar_forced_tokens_total,
//              responses_not_stored_total, state_write_failures_total (with --state-dir)
//   histograms time_to_first_token_seconds, inter_token_latency_seconds,
//              request_duration_seconds, step_duration_seconds,
//              grammar_compile_seconds, grammar_mask_seconds
// And, unprefixed, vLLM's names of the inference gateway's model-server protocol (each with
// model_name): vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc,
// vllm:gpu_cache_usage_perc, vllm:lora_requests_info.
#include "server/api/metrics.h"

#include <prometheus/text_serializer.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "cache/kv_spec.h"
#include "engine/state_dir.h"

namespace kvserve {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

class Families {
 public:
  MetricFamily& Add(std::string name, std::string help, MetricType type) {
    return AddNamed("kvserve_" + std::move(name), std::move(help), type);
  }
  // A family named as given (another server's names, for clients that expect them).
  MetricFamily& AddNamed(std::string name, std::string help, MetricType type) {
    MetricFamily f;
    f.name = std::move(name);
    f.help = std::move(help);
    f.type = type;
    families_.push_back(std::move(f));
    return families_.back();
  }

  void Gauge(std::string name, std::string help, double value) {
    AddSample(Add(std::move(name), std::move(help), MetricType::Gauge), {}, value);
  }
  void Counter(std::string name, std::string help, double value) {
    AddSample(Add(std::move(name), std::move(help), MetricType::Counter), {}, value);
  }

  // One sample of `family` with labels; the value lands in the field of the family's type.
  static void AddSample(MetricFamily& family, std::vector<ClientMetric::Label> labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    if (family.type == MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    family.metric.push_back(std::move(m));
  }

  void Histogram(std::string name, std::string help, const kvserve::Histogram& h) {
    MetricFamily& f = Add(std::move(name), std::move(help), MetricType::Histogram);
    ClientMetric m;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += static_cast<uint64_t>(i < h.counts.size() ? h.counts[i] : 0);
      m.histogram.bucket.push_back({cumulative, h.bounds[i]});
    }
    // The serializer appends le="+Inf" with sample_count; keep it >= the last bucket.
    uint64_t total = cumulative;
    if (h.counts.size() > h.bounds.size()) total += static_cast<uint64_t>(h.counts.back());
    m.histogram.sample_count = total;
    m.histogram.sample_sum = h.sum;
    f.metric.push_back(std::move(m));
  }

  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  std::vector<MetricFamily> families_;
};

// The model-server protocol of Kubernetes' inference gateway (gateway-api-inference-extension,
// proposal 003) under vLLM's names, so an endpoint picker configured for vLLM reads kvserve
// unchanged: queued requests (waiting, and preempted ones waiting to resume), running requests,
// KV cache use in 0-1 (also under its older name), the LoRA info line (kvserve serves no
// adapters: max_lora 0, none running) and the cache configuration line (block size, pool
// blocks), from which the picker's prefix scorer takes its block size.
void AddModelServerProtocol(const EngineStats& s, const std::string& model, int block_size, int num_blocks,
                            Families* out) {
  const std::vector<ClientMetric::Label> labels = {{"model_name", model}};
  auto gauge = [&](const char* name, const char* help, double value) {
    Families::AddSample(out->AddNamed(name, help, MetricType::Gauge), labels, value);
  };
  gauge("vllm:num_requests_waiting", "Requests waiting to be processed (kvserve: waiting + swapped).",
        static_cast<double>(s.waiting + s.swapped));
  gauge("vllm:num_requests_running", "Requests in model execution batches (kvserve: running).",
        static_cast<double>(s.running));
  gauge("vllm:kv_cache_usage_perc", "KV cache usage, 1 = 100 percent (kvserve_kv_cache_usage_ratio).",
        s.cache.usage_ratio);
  gauge("vllm:gpu_cache_usage_perc", "KV cache usage, 1 = 100 percent (vllm:kv_cache_usage_perc's older name).",
        s.cache.usage_ratio);
  MetricFamily& lora = out->AddNamed("vllm:lora_requests_info", "LoRA adapters (kvserve serves none); the value is "
                                     "the time of this snapshot.", MetricType::Gauge);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  Families::AddSample(lora, {{"max_lora", "0"}, {"running_lora_adapters", ""}, {"waiting_lora_adapters", ""}}, now);
  MetricFamily& cache = out->AddNamed("vllm:cache_config_info", "KV cache configuration (value 1).", MetricType::Gauge);
  Families::AddSample(cache, {{"block_size", std::to_string(block_size)}, {"num_gpu_blocks", std::to_string(num_blocks)}},
                      1);
}

}  // namespace

std::vector<MetricFamily> EngineMetricsCollector::Collect() const {
  Families out;
  const ServerContext& ctx = *ctx_;
  if (ctx.engine == nullptr) return out.Take();
  const EngineStats s = ctx.engine->GetStats();
  const KvCacheStats& c = s.cache;
  const EngineConfig& config = ctx.engine->config();

  // Cache occupancy.
  out.Gauge("kv_cache_usage_ratio", "Fraction of KV cache blocks in use (used + pinned) / total, 0-1.",
            c.usage_ratio);
  MetricFamily& blocks = out.Add("kv_cache_blocks", "KV cache blocks by state.", MetricType::Gauge);
  Families::AddSample(blocks, {{"state", "used"}}, c.used_blocks);
  Families::AddSample(blocks, {{"state", "free"}}, c.free_blocks);
  Families::AddSample(blocks, {{"state", "cached"}}, c.cached_blocks);
  Families::AddSample(blocks, {{"state", "pinned"}}, c.pinned_blocks);
  out.Gauge("kv_cache_capacity_blocks", "KV cache blocks in the pool.", c.total_blocks);
  out.Gauge("kv_cache_tokens", "Token positions held in the KV cache by live sequences.",
            static_cast<double>(c.tokens_stored));
  MetricFamily& bytes = out.Add("kv_cache_bytes", "Bytes of the KV cache pool by storage dtype (scales included).",
                                MetricType::Gauge);
  for (const auto& [dtype, n] : c.bytes_by_dtype) Families::AddSample(bytes, {{"dtype", dtype}}, static_cast<double>(n));
  MetricFamily& host = out.Add("kv_host_blocks", "Host offload tier blocks by state.", MetricType::Gauge);
  Families::AddSample(host, {{"state", "used"}}, c.host_used_blocks);
  Families::AddSample(host, {{"state", "free"}}, c.host_total_blocks - c.host_used_blocks);
  MetricFamily& compact = out.Add("kv_compact_blocks", "Compaction region blocks (old context in a smaller dtype) by state.",
                                  MetricType::Gauge);
  Families::AddSample(compact, {{"state", "used"}}, c.compact_used_blocks);
  Families::AddSample(compact, {{"state", "free"}}, c.compact_total_blocks - c.compact_used_blocks);
  out.Counter("kv_compacted_blocks_total", "KV blocks re-encoded into the compaction region.",
              static_cast<double>(c.compacted_blocks));

  // Throughput and scheduling.
  out.Counter("prompt_tokens_total", "Prompt tokens computed (prefix-cache hits excluded).",
              static_cast<double>(s.prompt_tokens_total));
  out.Counter("generation_tokens_total", "Tokens generated.", static_cast<double>(s.generation_tokens_total));
  out.Gauge("tokens_per_second", "Tokens generated per second over the last few seconds.", s.tokens_per_second);
  MetricFamily& requests = out.Add("requests", "Requests in the engine by state.", MetricType::Gauge);
  Families::AddSample(requests, {{"state", "running"}}, s.running);
  Families::AddSample(requests, {{"state", "waiting"}}, s.waiting);
  Families::AddSample(requests, {{"state", "swapped"}}, s.swapped);
  out.Gauge("batch_tokens", "Tokens in the last engine step.", s.last_batch_tokens);
  out.Gauge("batch_sequences", "Sequences in the last engine step.", s.last_batch_seqs);
  out.Counter("preemptions_total", "Requests preempted to make room in the KV cache.",
              static_cast<double>(s.preemptions_total));
  out.Counter("engine_steps_total", "Engine steps run.", static_cast<double>(s.steps));
  out.Counter("forward_errors_total", "Forward passes that failed.", static_cast<double>(s.forward_errors_total));
  out.Gauge("engine_healthy", "1 while the engine makes progress, 0 after a persistent fault.",
            s.healthy && ctx.engine->Healthy() ? 1 : 0);

  // Eviction, prefix cache, swapping.
  MetricFamily& evictions = out.Add("kv_evictions_total", "KV cache blocks evicted, by reason.", MetricType::Counter);
  for (int r = 0; r < kNumEvictionReasons; ++r) {
    Families::AddSample(evictions, {{"reason", EvictionReasonName(static_cast<EvictionReason>(r))}},
                        static_cast<double>(c.evicted_blocks[static_cast<size_t>(r)]));
  }
  out.Counter("prefix_cache_queries_total", "Prefix-cache lookups.", static_cast<double>(c.prefix_queries));
  out.Counter("prefix_cache_hits_total", "Prefix-cache lookups that reused at least one block.",
              static_cast<double>(c.prefix_hits));
  out.Counter("prefix_cache_query_tokens_total", "Prompt tokens looked up in the prefix cache.",
              static_cast<double>(c.prefix_query_tokens));
  out.Counter("prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache.",
              static_cast<double>(c.prefix_hit_tokens));
  MetricFamily& swapped = out.Add("kv_swapped_blocks_total", "KV blocks moved between device and host tier.",
                                  MetricType::Counter);
  Families::AddSample(swapped, {{"direction", "out"}}, static_cast<double>(c.swapped_out_blocks));
  Families::AddSample(swapped, {{"direction", "in"}}, static_cast<double>(c.swapped_in_blocks));
  out.Gauge("chat_sessions", "Server-side chat sessions alive.", s.chat_sessions);

  // Requests by outcome: the engine counts what it accepted; front ends count refusals.
  MetricFamily& outcomes = out.Add("requests_total", "Finished requests by status.", MetricType::Counter);
  for (int o = 0; o < kNumRequestOutcomes; ++o) {
    const auto outcome = static_cast<RequestOutcome>(o);
    double n = static_cast<double>(s.requests_total[static_cast<size_t>(o)]);
    if (outcome == RequestOutcome::kRejected) n += static_cast<double>(ctx.requests_rejected.load());
    Families::AddSample(outcomes, {{"status", RequestOutcomeName(outcome)}}, n);
  }

  // Latency histograms (seconds).
  out.Histogram("time_to_first_token_seconds", "Time from submission to the first generated token.",
                s.time_to_first_token);
  out.Histogram("inter_token_latency_seconds", "Time between consecutive tokens of a sequence.",
                s.inter_token_latency);
  out.Histogram("request_duration_seconds", "Time from submission to the end of a request.", s.request_duration);
  out.Histogram("step_duration_seconds", "Duration of one engine step.", s.step_duration);

  // Structured outputs.
  MetricFamily& grammars = out.Add("grammar_compiles_total",
                                   "Structured outputs by how their grammar was found: compiled, from the cache, "
                                   "or refused (malformed, unsupported, too slow).",
                                   MetricType::Counter);
  Families::AddSample(grammars, {{"result", "compiled"}}, static_cast<double>(s.grammar_compiles_total));
  Families::AddSample(grammars, {{"result", "cached"}}, static_cast<double>(s.grammar_cache_hits_total));
  Families::AddSample(grammars, {{"result", "error"}}, static_cast<double>(s.grammar_compile_errors_total));
  out.Counter("grammar_forced_tokens_total", "Tokens emitted without sampling: the grammar allowed only one.",
              static_cast<double>(s.grammar_forced_tokens_total));
  out.Histogram("grammar_compile_seconds", "Time to compile a structured output's grammar (cache misses).",
                s.grammar_compile);
  out.Histogram("grammar_mask_seconds", "Time to compute one token mask of a structured output.", s.grammar_mask);
  out.Gauge("grammar_cache_bytes", "Bytes of the compiled grammars kept (--grammar-cache-memory bounds them).",
            static_cast<double>(s.grammar_cache_bytes));
  out.Gauge("grammar_shared_mask_bytes", "Bytes of the token-trie walks all grammars share.",
            static_cast<double>(s.grammar_shared_mask_bytes));
  out.Gauge("grammar_compiling", "Structured-output grammars compiling or waiting for a compile thread.",
            static_cast<double>(s.grammar_compiling));

  const int block_size = c.block_size > 0 ? c.block_size : config.kv.block_size;
  AddModelServerProtocol(s, ctx.model_id, block_size, config.num_blocks, &out);
  out.Counter("responses_not_stored_total", "Responses API responses asked to be stored that were not (answered "
              "with \"store\": false: the state directory failing or full, the byte bounds, deleted while streaming).",
              static_cast<double>(ctx.responses_not_stored.load()));
  if (ctx.state != nullptr) {
    out.Counter("state_write_failures_total", "Records --state-dir failed to write (a full or read-only disk).",
                static_cast<double>(ctx.state->write_failures()));
    out.Gauge("state_bytes", "Bytes of the records in --state-dir.", static_cast<double>(ctx.state->used_bytes()));
  }
  if (ctx.kv_events != nullptr) {
    out.Counter("kv_events_published_total", "KV-event batches published (--kv-events-endpoint), one per engine "
                "step that changed the prefix cache.", static_cast<double>(ctx.kv_events->batches_published.load()));
    out.Counter("kv_events_dropped_total", "KV-event batches dropped before sending (the publisher fell behind): "
                "a router's view of this replica is stale until it replays.",
                static_cast<double>(ctx.kv_events->batches_dropped.load()));
  }

  MetricFamily& info = out.Add("info", "The served model and KV cache configuration (value 1).", MetricType::Gauge);
  Families::AddSample(info,
                      {{"backend", ctx.backend_name},
                       {"block_size", std::to_string(block_size)},
                       {"kv_dtype", std::string(KvDtypeName(config.kv.dtype))},
                       {"model", ctx.model_id}},
                      1);
  return out.Take();
}

std::string SerializeMetrics(const ServerContext& ctx) {
  return prometheus::TextSerializer().Serialize(EngineMetricsCollector(&ctx).Collect());
}

}  // namespace kvserve
