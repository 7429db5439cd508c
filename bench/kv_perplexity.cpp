// bench_kv_perplexity: perplexity of a text with each KV cache dtype (and the candidate
// schemes of bench/kv_schemes.h), computed the way llama.cpp's llama-perplexity does, so the
// figures sit next to its f16 / q8_0 / q4_0 KV caches on the same GGUF and text
// (bench/kv_perplexity.sh runs both): the text is tokenized with BOS, cut into chunks of --ctx
// tokens, each chunk's first token is replaced by BOS, and the second half of each chunk is
// scored (positions ctx/2 .. ctx-2 predict the next token); PPL = exp(mean NLL). KL is the
// mean KL(F32 KV || setting) of the next-token distributions at the same positions.
//
//   bench_kv_perplexity --model M --text FILE [--ctx 512] [--chunks N] [--kv-dtypes f32,f16]
//                       [--compact int8,int4c --compact-every 512 --compact-keep 1024]
//                       [--output FILE]
//
// --compact adds, per dtype, the --kv-dtypes' second entry (f16 by default) with compaction of
// old context to that dtype on the engine's schedule (KvCompaction); the KV column is the
// cache's bytes at the end of a chunk.
//   bench_kv_perplexity --model M --write-text FILE --tokens N [--ctx 512] [--seed S]
//
// --write-text samples a text from the model (temperature 1, BOS/EOS never sampled, a new
// passage from BOS every --ctx tokens): "stories260K on its own generations".
#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_report.h"
#include "bench/kv_schemes.h"
#include "cache/kv_cache_manager.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model_runner.h"
#include "tools/kv_sensitivity/kv_sensitivity.h"

namespace kvserve {
namespace {

struct Flags {
  std::string model, text, write_text, output;
  std::vector<KvDtype> dtypes;  // --kv-dtypes f32,f16: only these, no candidate schemes
  std::vector<KvDtype> compact;  // --compact int8,int4c
  int compact_every = 512, compact_keep = 1024;
  int ctx = 512, chunks = 0, tokens = 0;
  uint64_t seed = 1;
};

Flags Parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") f.model = v;
    else if (k == "--text") f.text = v;
    else if (k == "--write-text") f.write_text = v;
    else if (k == "--output") f.output = v;
    else if (k == "--ctx") f.ctx = std::stoi(v);
    else if (k == "--chunks") f.chunks = std::stoi(v);
    else if (k == "--tokens") f.tokens = std::stoi(v);
    else if (k == "--seed") f.seed = std::stoull(v);
    else if (k == "--compact-every") f.compact_every = std::stoi(v);
    else if (k == "--compact-keep") f.compact_keep = std::stoi(v);
    else if (k == "--kv-dtypes" || k == "--compact") {
      std::stringstream list(v);
      for (std::string name; std::getline(list, name, ',');) {
        const std::optional<KvDtype> d = ParseKvDtype(name);
        CHECK(d.has_value()) << "unknown KV dtype " << name;
        (k == "--compact" ? f.compact : f.dtypes).push_back(*d);
      }
    }
    else CHECK(false) << "unknown flag " << k;
  }
  CHECK(!f.model.empty() && (f.text.empty() != f.write_text.empty())) << "--model and one of --text / --write-text";
  return f;
}

// `n` tokens sampled in passages of `ctx` tokens (each from BOS), detokenized, one passage
// per paragraph.
std::string SampleText(const Model& model, int n, int ctx, uint64_t seed) {
  const ModelConfig& c = model.config();
  const Tokenizer& tok = model.tokenizer();
  KvSpecConfig kv;
  kv.dtype = KvDtype::kF32;
  kv.num_layers = c.num_layers;
  kv.num_kv_heads = c.num_kv_heads;
  kv.head_dim = c.head_dim;
  kv.block_size = 16;
  const KvSpec spec = *KvSpec::Create(kv);
  const int num_blocks = ctx / 16 + 2;
  CpuBackendOptions bo;
  CpuBackend backend(model, bo);
  CHECK(backend.InitKvCache(spec, num_blocks).ok());
  std::mt19937_64 rng(seed);
  std::vector<float> logits(c.vocab_size), probs(c.vocab_size);
  std::string text;
  for (int produced = 0; produced < n;) {
    KvCacheManager cache(spec, num_blocks);
    ModelRunner runner(&backend, &cache, c.vocab_size);
    std::vector<int32_t> passage = {tok.bos_id()};
    while (static_cast<int>(passage.size()) < ctx && produced < n) {
      CHECK(cache.AllocateSlots(1, 1).has_value());
      const int pos = static_cast<int>(passage.size()) - 1;
      ScheduledSeq s{1, std::span(passage).subspan(pos, 1), pos, true};
      CHECK(runner.Execute(std::span(&s, 1), logits).ok());
      const float max = *std::max_element(logits.begin(), logits.end());
      for (int v = 0; v < c.vocab_size; ++v) probs[v] = std::exp(logits[v] - max);
      probs[tok.bos_id()] = 0;
      if (tok.eos_id() >= 0) probs[tok.eos_id()] = 0;
      std::discrete_distribution<int32_t> pick(probs.begin(), probs.end());
      passage.push_back(pick(rng));
      ++produced;
    }
    passage.erase(passage.begin());
    text += tok.Decode(passage, /*strip_leading_space=*/true, /*render_special=*/false) + "\n\n";
  }
  return text;
}

struct Setting {
  std::string name;
  KvSpecConfig kv;
  KvStoreHook hook;
  std::optional<KvCompaction> compaction = std::nullopt;
};

std::string Run(const Flags& f, const Model& model, const std::string& text) {
  const int V = model.config().vocab_size;
  const std::vector<int32_t> tokens = model.tokenizer().Encode(text, /*add_bos=*/true);
  int chunks = static_cast<int>(tokens.size()) / f.ctx;
  if (f.chunks > 0) chunks = std::min(chunks, f.chunks);
  CHECK(chunks > 0) << "the text has " << tokens.size() << " tokens, fewer than --ctx " << f.ctx;
  const int first = f.ctx / 2;
  // Logit rows of the scored positions, all chunks.
  // Logit rows and the cache's bytes at the end of a chunk.
  auto scored = [&](Setting s, int64_t* bytes) {
    std::vector<float> rows;
    if (s.compaction) s.compaction->bytes = bytes;
    KvSpecConfig shape = s.kv;
    shape.num_layers = model.config().num_layers;
    shape.num_kv_heads = model.config().num_kv_heads;
    shape.head_dim = model.config().head_dim;
    *bytes = static_cast<int64_t>(KvSpec::Create(shape)->bytes_for_tokens(f.ctx));
    for (int i = 0; i < chunks; ++i) {
      std::vector<int32_t> chunk(tokens.begin() + i * f.ctx, tokens.begin() + (i + 1) * f.ctx);
      chunk[0] = model.tokenizer().bos_id();
      auto logits = TeacherForcedLogits(model, s.kv, chunk, s.hook, s.compaction);
      CHECK(logits.ok()) << logits.status().ToString();
      rows.insert(rows.end(), logits->begin() + static_cast<size_t>(first) * V,
                  logits->begin() + static_cast<size_t>(f.ctx - 1) * V);
    }
    return rows;
  };
  auto nll = [&](const std::vector<float>& rows) {
    double sum = 0;
    size_t r = 0;
    for (int i = 0; i < chunks; ++i) {
      for (int j = first; j < f.ctx - 1; ++j, ++r) {
        const float* row = rows.data() + r * V;
        const float max = *std::max_element(row, row + V);
        double z = 0;
        for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v] - max));
        sum += -(row[tokens[i * f.ctx + j + 1]] - max - std::log(z));
      }
    }
    return sum / static_cast<double>(r);
  };

  std::vector<Setting> settings;
  const bool all = f.dtypes.empty();
  for (KvDtype d : all ? std::vector<KvDtype>{KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8,
                                               KvDtype::kInt4, KvDtype::kInt4C}
                       : f.dtypes) {
    KvSpecConfig kv;
    kv.dtype = d;
    settings.push_back({std::string(KvDtypeName(d)), kv, {}});
  }
  for (KvDtype d : f.compact) {
    KvSpecConfig kv;
    kv.dtype = f.dtypes.size() > 1 ? f.dtypes[1] : KvDtype::kF16;
    settings.push_back({fmt::format("{}, older than {} tokens compacted to {} every {}", KvDtypeName(kv.dtype),
                                    f.compact_keep, KvDtypeName(d), f.compact_every),
                        kv, {}, KvCompaction{d, f.compact_every, f.compact_keep, nullptr}});
  }
  for (int bits : all ? std::vector<int>{8, 4} : std::vector<int>{}) {
    for (const NamedKvStoreHook& c : CandidateHooks(bits)) {
      KvSpecConfig kv;
      kv.dtype = KvDtype::kF32;
      settings.push_back({fmt::format("candidate, {} bits: {}", bits, c.name), kv, c.hook});
    }
  }
  std::string out = fmt::format(
      "{1} tokens of text ({2} with BOS), {3} chunks of {4} tokens, {5} scored tokens per chunk; vocab {6}.\n\n"
      "| kv cache | PPL | PPL vs {0} | mean NLL | mean KL vs {0} | KV MiB at {4} tokens |\n"
      "|---|---|---|---|---|---|\n",
      settings.front().name, tokens.size() - 1, tokens.size(), chunks, f.ctx, f.ctx - 1 - first, V);
  std::vector<float> base;
  double base_ppl = 0;
  for (const Setting& s : settings) {
    int64_t bytes = 0;
    const std::vector<float> rows = scored(s, &bytes);
    if (base.empty()) base = rows;
    const double mean_nll = nll(rows);
    const double ppl = std::exp(mean_nll);
    if (base_ppl == 0) base_ppl = ppl;
    const KvErrorStats e = CompareLogits(base, rows, V);
    out += fmt::format("| {} | {:.4f} | {:+.3f} % | {:.5f} | {:.2e} | {:.2f} |\n", s.name, ppl,
                       100 * (ppl / base_ppl - 1), mean_nll, e.mean_kl, bytes / 1048576.0);
  }
  return out;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  namespace report = kvserve::bench_report;
  const kvserve::Flags f = kvserve::Parse(argc, argv);
  auto model = kvserve::Model::Load(f.model);
  CHECK(model.ok()) << model.status().ToString();
  if (!f.write_text.empty()) {
    CHECK(f.tokens > 0) << "--write-text needs --tokens N";
    return report::WriteMarkdown(f.write_text, kvserve::SampleText(**model, f.tokens, f.ctx, f.seed));
  }
  std::ifstream in(f.text);
  CHECK(in) << "cannot read " << f.text;
  std::stringstream text;
  text << in.rdbuf();
  std::string command = argv[0];
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) != "--output") command += fmt::format(" {} {}", argv[i], argv[i + 1]);
  }
  const std::string title = fmt::format("KV cache dtypes: perplexity of {} on {}", f.model, f.text);
  return report::Emit(f.output, report::Heading(title, command.c_str(), f.output) + kvserve::Run(f, **model, text.str()));
}
