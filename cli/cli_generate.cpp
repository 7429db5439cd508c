// `kvserve generate`: one completion through the engine (Engine::Create + Submit +
// RequestStream), streamed to stdout, with prompt and generation speed on stderr; or, with
// --json, one JSON object with the prompt tokens, generated tokens, text and the top-5
// log-probabilities of the first generated position.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>

#include "cache/kv_spec.h"
#include "engine/engine.h"
#include "cli/cli.h"
#include "cli/engine_options.h"

namespace kvserve::cli {
namespace generate_command {

constexpr char kCommand[] = "generate";
constexpr int kTopLogprobs = 5;

struct GenerateOptions {
  std::string model = "synthetic:tiny";
  std::string prompt;
  int max_tokens = 64;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int threads = 0;
  std::string kv_dtype = "f16";
  std::string weight_dtype = "auto";
  std::string compute_dtype = "int8";
  int block_size = 0;  // 0: DefaultBlockSize
  uint64_t kv_cache_memory = 0;
  bool json = false;
  // Set after parsing: whether --seed was given.
  const CLI::Option* seed_option = nullptr;
};

SamplingParams MakeSamplingParams(const GenerateOptions& o) {
  SamplingParams p;
  p.max_tokens = o.max_tokens;
  p.temperature = o.temperature;
  p.top_k = o.top_k;
  p.top_p = o.top_p;
  p.min_p = o.min_p;
  p.repetition_penalty = o.repetition_penalty;
  p.presence_penalty = o.presence_penalty;
  p.frequency_penalty = o.frequency_penalty;
  p.stop = o.stop;
  p.ignore_eos = o.ignore_eos;
  if (o.seed_option->count() > 0) p.seed = o.seed;
  p.logprobs = o.json ? kTopLogprobs : -1;
  return p;
}

// The KV pool: --kv-cache-memory bytes, or just enough blocks for this one request
// (prompt + max tokens) plus one spare.
StatusOr<int> NumKvBlocks(const GenerateOptions& o, const KvSpec& spec, int needed_tokens) {
  const int bs = spec.block_size();
  if (o.kv_cache_memory == 0) return (needed_tokens + bs - 1) / bs + 1;
  const uint64_t blocks = o.kv_cache_memory / spec.block_bytes();
  if (blocks * static_cast<uint64_t>(bs) < static_cast<uint64_t>(needed_tokens)) {
    return InvalidArgumentError(fmt::format(
        "--kv-cache-memory {} bytes holds {} tokens ({} blocks of {} bytes); this request needs {}",
        o.kv_cache_memory, blocks * bs, blocks, spec.block_bytes(), needed_tokens));
  }
  return static_cast<int>(std::min<uint64_t>(blocks, 1u << 30));
}

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<std::pair<int32_t, float>> top_first;
  std::optional<FinishReason> finish;
};

// Reads the stream to its end, writing text to stdout as it arrives unless `quiet`.
void Drain(RequestStream& stream, bool quiet, Collected* out) {
  std::vector<StreamDelta> deltas;
  while (stream.Next(&deltas)) {
    for (StreamDelta& d : deltas) {
      if (out->tokens.empty() && !d.logprobs.empty()) out->top_first = d.logprobs.front().top;
      out->tokens.insert(out->tokens.end(), d.token_ids.begin(), d.token_ids.end());
      out->text += d.text;
      if (d.finish_reason) out->finish = d.finish_reason;
      if (!quiet && !d.text.empty()) {
        std::fwrite(d.text.data(), 1, d.text.size(), stdout);
        std::fflush(stdout);
      }
    }
    deltas.clear();
  }
}

void PrintSpeed(const RequestUsage& u, const Collected& c) {
  const double prompt_s = u.time_to_first_token_s;
  const double gen_s = u.duration_s - u.time_to_first_token_s;
  // The first token comes out of the prompt step, so decode speed counts the others.
  const int decoded = std::max(0, u.completion_tokens - 1);
  std::fprintf(stderr, "prompt: %d tokens in %.2f ms (%.1f tokens/s); generation: %d tokens in %.2f ms"
                       " (%.1f tokens/s); finish: %s\n",
               u.prompt_tokens, prompt_s * 1e3, prompt_s > 0 ? u.prompt_tokens / prompt_s : 0.0,
               u.completion_tokens, gen_s * 1e3, gen_s > 0 && decoded > 0 ? decoded / gen_s : 0.0,
               c.finish ? std::string(FinishReasonName(*c.finish)).c_str() : "none");
}

void PrintJson(const std::vector<int32_t>& prompt_tokens, const Collected& c) {
  nlohmann::json top = nlohmann::json::array();
  for (const auto& [id, logprob] : c.top_first) top.push_back({id, logprob});
  nlohmann::json j;
  j["prompt_tokens"] = prompt_tokens;
  j["tokens"] = c.tokens;
  j["text"] = c.text;
  j["top_logprobs_first"] = std::move(top);
  const std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::printf("%s\n", s.c_str());
}

int RunGenerate(const GenerateOptions& o) {
  std::unique_ptr<Model> loaded;
  if (int rc = LoadModel(kCommand, o.model, WeightLoadOptions(o.weight_dtype), &loaded); rc != kExitOk) return rc;
  std::shared_ptr<const Model> model = std::move(loaded);
  const ModelConfig& mc = model->config();

  GenerationRequest request;
  request.prompt_tokens = model->tokenizer().Encode(o.prompt, /*add_special=*/true);
  request.sampling = MakeSamplingParams(o);
  if (Status s = request.sampling.Validate(mc.vocab_size); !s.ok()) return ReportError(kCommand, s.message(), kExitUsageError);
  const std::vector<int32_t> prompt_tokens = request.prompt_tokens;

  EngineConfig config;
  config.max_num_seqs = 1;
  config.kv.num_layers = mc.num_layers;
  config.kv.num_kv_heads = mc.num_kv_heads;
  config.kv.head_dim = mc.head_dim;
  config.kv.block_size = o.block_size;
  config.kv.dtype = *ParseKvDtype(o.kv_dtype);  // checked by the option's validator
  StatusOr<KvSpec> spec = KvSpec::Create(config.kv);
  if (!spec.ok()) return ReportError(kCommand, spec.status().message(), kExitUsageError);
  config.kv.block_size = spec->block_size();  // the default resolved
  StatusOr<int> blocks = NumKvBlocks(o, *spec, static_cast<int>(prompt_tokens.size()) + o.max_tokens);
  if (!blocks.ok()) return ReportError(kCommand, blocks.status().message(), kExitUsageError);
  config.num_blocks = *blocks;
  // No sequence can outgrow the pool; saying so keeps the engine from warning about it.
  config.max_model_len = std::min(mc.context_length, *blocks * spec->block_size());

  BackendConfig backend_config = BackendConfigFor(config);
  backend_config.num_threads = o.threads;
  StatusOr<ComputeDtype> compute = ResolveComputeDtype(o.compute_dtype, backend_config.device);
  if (!compute.ok()) return ReportError(kCommand, compute.status().message(), kExitUsageError);
  backend_config.compute_dtype = *compute;
  StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(backend_config, *model);
  if (!backend.ok()) return ReportError(kCommand, backend.status().message(), kExitRuntimeError);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(config, model, std::move(*backend));
  if (!engine.ok()) return ReportError(kCommand, engine.status().message(), kExitRuntimeError);

  StatusOr<std::shared_ptr<RequestStream>> stream = (*engine)->Submit(std::move(request));
  if (!stream.ok()) return ReportError(kCommand, stream.status());
  Collected collected;
  Drain(**stream, o.json, &collected);
  (*engine)->Stop();
  if (Status s = (*stream)->status(); !s.ok()) return ReportError(kCommand, s.message(), kExitRuntimeError);

  if (o.json) {
    PrintJson(prompt_tokens, collected);
  } else if (!collected.text.empty() && collected.text.back() != '\n') {
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  PrintSpeed((*stream)->usage(), collected);
  return kExitOk;
}

}  // namespace generate_command

void RegisterGenerateCommand(CommandRegistry& registry) {
  using namespace generate_command;
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* sub = registry.Add(kCommand, "Generate one completion of a prompt (CPU) and stream it to stdout",
                               [o] { return RunGenerate(*o); });
  sub->add_option("-m,--model", o->model,
                  "GGUF file, or synthetic:<preset>[:<dtype>] (presets tiny, 150m, 1b, 7b-shape, gemma2-tiny, "
                  "gemma2-2b-shape, phi3-tiny, phi3-mini-shape; dtypes f32, f16, bf16, q8_0, q4_0) built in memory");
  sub->add_option("-p,--prompt", o->prompt, "Prompt text (BOS is added when the model wants one)")->required();
  sub->add_option("-n,--max-tokens", o->max_tokens, "Tokens to generate")->check(CLI::Range(0, 1 << 20));
  sub->add_option("--temperature", o->temperature, "0 = greedy")->check(CLI::Range(0.0f, 100.0f));
  sub->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = off)")->check(CLI::Range(-1, 1 << 30));
  sub->add_option("--top-p", o->top_p, "Nucleus sampling mass (1 = off)");
  sub->add_option("--min-p", o->min_p, "Keep tokens with p >= min_p * p_max (0 = off)");
  o->seed_option = sub->add_option("--seed", o->seed, "Sampling seed (default: derived from the request)")
                       ->default_str("");
  sub->add_option("--repetition-penalty", o->repetition_penalty, "1 = off");
  sub->add_option("--presence-penalty", o->presence_penalty, "[-2, 2]");
  sub->add_option("--frequency-penalty", o->frequency_penalty, "[-2, 2]");
  sub->add_option("--stop", o->stop, "Stop string (repeatable); never printed")->take_all()->expected(1)->default_str("");
  sub->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-sequence tokens");
  sub->add_option("-t,--threads", o->threads, "CPU threads (0 = all cores)")->check(CLI::Range(0, 1024));
  AddWeightDtypeOption(sub, &o->weight_dtype);
  AddComputeDtypeOption(sub, &o->compute_dtype);
  AddKvDtypeOption(sub, &o->kv_dtype);
  sub->add_option("--block-size", o->block_size, "KV cache block size in tokens (default 16; 32 with int4c)")->check(CLI::Range(1, 4096));
  sub->add_option("--kv-cache-memory", o->kv_cache_memory,
                  "KV pool size in bytes, e.g. 2GiB (default: just enough for this request)")
      ->transform(CLI::AsSizeValue(true));
  sub->add_flag("--json", o->json,
                "Print one JSON object {prompt_tokens, tokens, text, top_logprobs_first} instead of text");
}

}  // namespace kvserve::cli
