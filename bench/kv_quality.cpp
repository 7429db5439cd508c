// bench_kv_quality: what each KV cache dtype costs in quality, against an F32 KV cache.
//
// stories260K goldens (12 prompts, 48 greedy tokens each) and synthetic models (built-in
// sample text): for F16, BF16, INT8, INT4 and layered settings, teacher-forced over the same
// tokens (mean KL(F32 || setting) of the next-token distributions, max / mean |logit error|,
// top-1 agreement) and free-running greedy generation (tokens equal to the F32-KV run,
// position by position; tokens before the first divergence). Layered settings: INT8 with
// layer 0 at F16, and INT4 with the layers MeasureKvSensitivity recommends kept at F16.
// Prints Markdown (bench/results/kv_quality.md).
//
//   bench_kv_quality [--output FILE]
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cache/kv_cache_manager.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "tools/kv_sensitivity/kv_sensitivity.h"
#include "engine/model_runner.h"
#include "bench/bench_report.h"
#include "bench/kv_schemes.h"

namespace kvserve {
namespace {

struct Setting {
  std::string name;
  KvSpecConfig kv;  // dtype, keep
};

struct Case {
  std::vector<int32_t> prompt;
  std::vector<int32_t> continuation;  // teacher-forced tokens after the prompt
  int generate = 48;
};

// Free-running greedy generation of `n` tokens with cache layout `kv`.
std::vector<int32_t> Greedy(const Model& model, KvSpecConfig kv, const std::vector<int32_t>& prompt, int n) {
  const ModelConfig& c = model.config();
  kv.num_layers = c.num_layers;
  kv.num_kv_heads = c.num_kv_heads;
  kv.head_dim = c.head_dim;
  const KvSpec spec = *KvSpec::Create(kv);
  const int num_blocks = static_cast<int>((prompt.size() + n) / kv.block_size + 2);
  KvCacheManager cache(spec, num_blocks);
  CpuBackendOptions bo;
  bo.limits.max_num_tokens = std::max<int>(256, static_cast<int>(prompt.size()));
  CpuBackend backend(model, bo);
  CHECK(backend.InitKvCache(spec, num_blocks).ok());
  ModelRunner runner(&backend, &cache, c.vocab_size);
  std::vector<int32_t> all = prompt, out;
  std::vector<float> logits(c.vocab_size);
  int computed = 0;
  for (int step = 0; step < n; ++step) {
    const int count = static_cast<int>(all.size()) - computed;
    CHECK(cache.AllocateSlots(1, count).has_value());
    ScheduledSeq s{1, std::span(all).subspan(computed, count), computed, true};
    CHECK(runner.Execute(std::span(&s, 1), logits).ok());
    computed = static_cast<int>(all.size());
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    all.push_back(out.back());
  }
  return out;
}

// Logit rows that predict the continuation: positions prompt-1 .. prompt+cont-2.
std::vector<float> PredictionRows(const Model& model, const KvSpecConfig& kv, const Case& c) {
  std::vector<int32_t> all = c.prompt;
  all.insert(all.end(), c.continuation.begin(), c.continuation.end());
  auto logits = TeacherForcedLogits(model, kv, all);
  CHECK(logits.ok()) << logits.status().ToString();
  const size_t V = model.config().vocab_size;
  return std::vector<float>(logits->begin() + (c.prompt.size() - 1) * V,
                            logits->begin() + (all.size() - 1) * V);
}

double BytesPerToken(const Model& model, KvSpecConfig kv) {
  kv.num_layers = model.config().num_layers;
  kv.num_kv_heads = model.config().num_kv_heads;
  kv.head_dim = model.config().head_dim;
  return KvSpec::Create(kv)->bytes_per_token();
}

// One table for `model` over `cases`; `reference_tokens` (optional) are golden continuations
// to count teacher-forced argmax matches against.
std::string Table(const Model& model, const std::vector<Setting>& settings, const std::vector<Case>& cases,
                  bool golden) {
  const int V = model.config().vocab_size;
  KvSpecConfig f32;
  f32.dtype = KvDtype::kF32;
  std::vector<std::vector<float>> base_rows;
  std::vector<std::vector<int32_t>> base_greedy;
  for (const Case& c : cases) {
    base_rows.push_back(PredictionRows(model, f32, c));
    base_greedy.push_back(Greedy(model, f32, c.prompt, c.generate));
  }
  std::string out = fmt::format(
      "| kv cache | bytes / token | x f32 | TF top-1 = f32 |{} TF mean KL | TF max abs logit err | TF mean abs logit "
      "err | greedy tokens = f32 run | tokens before 1st divergence (mean) | identical runs |\n"
      "|---|---|---|---|{}---|---|---|---|---|---|\n",
      golden ? " TF top-1 = golden |" : "", golden ? "---|" : "");
  const double f32_bytes = BytesPerToken(model, f32);
  for (const Setting& s : settings) {
    std::vector<float> all_base, all_got;
    int golden_same = 0, golden_total = 0, greedy_same = 0, greedy_total = 0, identical = 0;
    double prefix_sum = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const std::vector<float> rows = PredictionRows(model, s.kv, c);
      all_base.insert(all_base.end(), base_rows[i].begin(), base_rows[i].end());
      all_got.insert(all_got.end(), rows.begin(), rows.end());
      for (size_t t = 0; t < c.continuation.size(); ++t) {
        const auto row = std::span(rows).subspan(t * V, V);
        golden_same += std::max_element(row.begin(), row.end()) - row.begin() == c.continuation[t];
        ++golden_total;
      }
      const std::vector<int32_t> greedy = Greedy(model, s.kv, c.prompt, c.generate);
      int prefix = 0;
      while (prefix < c.generate && greedy[prefix] == base_greedy[i][prefix]) ++prefix;
      prefix_sum += prefix;
      identical += prefix == c.generate;
      for (int t = 0; t < c.generate; ++t) greedy_same += greedy[t] == base_greedy[i][t];
      greedy_total += c.generate;
    }
    const KvErrorStats e = CompareLogits(all_base, all_got, V);
    const double bpt = BytesPerToken(model, s.kv);
    out += fmt::format("| {} | {:.1f} | {:.3f} | {:.1f} % |{} {:.2e} | {:.4f} | {:.5f} | {} / {} ({:.1f} %) | {:.1f} | {} / {} |\n",
                       s.name, bpt, bpt / f32_bytes, 100 * e.top1_agreement,
                       golden ? fmt::format(" {:.1f} % |", 100.0 * golden_same / golden_total) : "", e.mean_kl,
                       e.max_abs_logit_error, e.mean_abs_logit_error, greedy_same, greedy_total,
                       100.0 * greedy_same / greedy_total, prefix_sum / cases.size(), identical, cases.size());
  }
  return out;
}

std::vector<Setting> SettingsFor(const Model& model, std::string* note) {
  std::vector<Setting> settings;
  for (KvDtype d : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4C}) {
    KvSpecConfig kv;
    kv.dtype = d;
    settings.push_back({std::string(KvDtypeName(d)), kv});
  }
  KvSpecConfig b32;
  b32.dtype = KvDtype::kInt4C;
  b32.block_size = 32;
  settings.push_back({"int4c, block 32", b32});
  KvSpecConfig l0;
  l0.dtype = KvDtype::kInt8;
  l0.keep = {{0, -1}};
  settings.push_back({"int8, layer 0 f16", l0});
  // Layers kv-sensitivity recommends keeping at F16, for each 4-bit scheme.
  for (KvDtype d : {KvDtype::kInt4, KvDtype::kInt4C}) {
    auto report = MeasureKvSensitivity(model, d, "", 256);
    CHECK(report.ok()) << report.status().ToString();
    KvSpecConfig rec;
    rec.dtype = d;
    for (int l : report->recommended_keep) rec.keep.push_back({l, -1});
    settings.push_back({fmt::format("{}, layer{} {} f16 (kv-sensitivity)", KvDtypeName(d),
                                    report->recommended_keep.size() > 1 ? "s" : "",
                                    fmt::join(report->recommended_keep, ",")),
                        rec});
    *note += "```\n" + FormatKvSensitivityReport(*report) + "```\n";
  }
  return settings;
}

std::string Run() {
  std::string out;
  out += "TF = teacher-forced: the same tokens are fed to every setting and the next-token distributions are "
         "compared with the F32-KV run's at every predicting position (KL in nats). Greedy = free-running "
         "generation, compared position by position with the F32-KV greedy run. Block 16 unless the row says "
         "otherwise; group size = min(head dim, 128). int4c: keys per channel over each full block, the "
         "filling block in F16 (docs/kv-int4-channel-keys.md).\n\n";

  // stories260K goldens.
  const std::string shared = KVSERVE_SHARED_DIR;
  auto stories = Model::Load(shared + "/models/stories260K.gguf");
  if (stories.ok()) {
    std::vector<Case> cases;
    std::ifstream in(shared + "/golden/stories260K-greedy.jsonl");
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const auto g = nlohmann::json::parse(line);
      Case c;
      c.prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
      c.continuation = g["tokens"].get<std::vector<int32_t>>();
      c.generate = static_cast<int>(c.continuation.size());
      cases.push_back(std::move(c));
    }
    std::string note;
    const auto settings = SettingsFor(**stories, &note);
    out += fmt::format("## stories260K goldens ({} prompts x 48 tokens; 5 layers, 4 kv heads, head dim 8)\n\n",
                       cases.size());
    out += Table(**stories, settings, cases, /*golden=*/true);
    out += "\nThe F32-KV greedy run reproduces every golden token (tests/golden), so \"= f32 run\" is also "
           "agreement with the goldens; \"TF top-1 = golden\" is what tests/unit/backend/kv_quant_golden_test "
           "asserts.\n\nkv-sensitivity for INT4 and INT4C (used for the layered rows):\n\n" +
           note + "\n";
    std::vector<ScoredText> texts;
    for (const Case& c : cases) {
      std::vector<int32_t> all = c.prompt;
      all.insert(all.end(), c.continuation.begin(), c.continuation.end());
      texts.push_back({all, c.prompt.size()});
    }
    out += "### Candidate schemes on stories260K (simulated in an F32 cache, teacher-forced)\n\n" +
           CandidateSchemesTable(**stories, texts) + "\n";
  } else {
    out += "stories260K not found under " + shared + "/models: section skipped.\n\n";
  }

  // Synthetic models on the built-in sample text.
  struct Synth {
    std::string spec;
    int layers;
    bool candidates;
  };
  for (const Synth& s : {Synth{"synthetic:tiny:f32", 0, false}, Synth{"synthetic:150m:f16", 0, true},
                         Synth{"synthetic:1b:f16", 4, false}}) {
    ModelLoadOptions o;
    o.num_layers_override = s.layers;
    auto model = Model::Load(s.spec, o);
    CHECK(model.ok()) << model.status().ToString();
    const ModelConfig& c = (*model)->config();
    std::vector<int32_t> text = (*model)->tokenizer().Encode(KvSensitivitySampleText(), true);
    text.resize(std::min<size_t>(text.size(), 256));
    Case cs;
    cs.prompt.assign(text.begin(), text.begin() + 32);
    cs.continuation.assign(text.begin() + 32, text.end());
    cs.generate = 48;
    std::string note;
    const auto settings = SettingsFor(**model, &note);
    out += fmt::format("## {}{} ({} layers, {} kv heads, head dim {}; {} sample-text tokens teacher-forced, 32-token "
                       "prompt + 48 greedy)\n\n",
                       s.spec, s.layers > 0 ? fmt::format(" with {} layers", s.layers) : "", c.num_layers,
                       c.num_kv_heads, c.head_dim, text.size());
    out += Table(**model, settings, {cs}, /*golden=*/false);
    out += "\n" + note + "\n";
    if (s.candidates) {
      out += fmt::format("### Candidate schemes on {} (simulated, teacher-forced)\n\n", s.spec) +
             CandidateSchemesTable(**model, {{text, cs.prompt.size()}}) + "\n";
    }
  }
  out += "Synthetic models have random weights (normal(0, 0.02)): their next-token distributions are nearly flat, "
         "so their greedy argmax is decided by tiny margins and flips easily; KL and logit errors are the "
         "meaningful columns there.\n";
  return out;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  namespace report = kvserve::bench_report;
  const std::string output = report::OutputFlag(argc, argv);
  return report::Emit(output, report::Heading("KV cache dtypes: quality against an F32 KV cache", argv[0], output) + kvserve::Run());
}
