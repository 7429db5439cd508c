// bench_kv_window: stories260K far beyond its 512-token training window, with a sliding-window
// KV cache with attention sinks (StreamingLLM) against a plain sliding window and the full cache.
//
// 1. Teacher-forced perplexity over a long text (10x the training window) built from
//    in-distribution stories: each story is sampled (temperature 1, seeded) from a fresh cache
//    and the stories are concatenated. Each setting decodes the text one token at a time
//    through KvCacheManager::EvictForWindow + Backend::ShiftKeys, exactly as a chat session.
// 2. Free-running greedy generation of the same length from "Once upon a time": its
//    self-perplexity and the tail of the text.
// Prints Markdown (bench/results/kv_window.md).
//
//   bench_kv_window [--output FILE]
#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cache/kv_cache_manager.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model_runner.h"
#include "bench/bench_report.h"

namespace kvserve {
namespace {

constexpr int kTrainWindow = 512;
constexpr int kLength = 10 * kTrainWindow;

struct Setting {
  std::string name;
  WindowPolicy policy;
  int block_size;
};

// One sequence decoded token by token under a window policy.
class WindowedDecoder {
 public:
  WindowedDecoder(const Model& model, const Setting& s, int max_tokens)
      : model_(model), policy_(s.policy) {
    KvSpecConfig kv;
    kv.num_layers = model.config().num_layers;
    kv.num_kv_heads = model.config().num_kv_heads;
    kv.head_dim = model.config().head_dim;
    kv.block_size = s.block_size;
    kv.dtype = KvDtype::kF32;
    const KvSpec spec = *KvSpec::Create(kv);
    const int blocks = max_tokens / s.block_size + 4;
    cache_ = std::make_unique<KvCacheManager>(spec, blocks);
    CpuBackendOptions bo;
    bo.limits.max_num_tokens = 16;
    backend_ = std::make_unique<CpuBackend>(model, bo);
    CHECK(backend_->InitKvCache(spec, blocks).ok());
    runner_ = std::make_unique<ModelRunner>(backend_.get(), cache_.get(), model.config().vocab_size);
    logits_.resize(model.config().vocab_size);
  }
  // Feeds one token; returns the next-token logits.
  std::span<const float> Feed(int32_t token) {
    if (cache_->Contains(1)) {
      const auto ev = cache_->EvictForWindow(1, policy_, 1);
      if (ev.evicted_tokens > 0) {
        CHECK(backend_->CopyBlocks(ev.copies).ok());
        CHECK(backend_->ShiftKeys(ev.shifted_blocks, -ev.evicted_tokens).ok());
        position_ -= ev.evicted_tokens;
      }
    }
    CHECK(cache_->AllocateSlots(1, 1).has_value());
    ScheduledSeq s{1, std::span(&token, 1), position_, true};
    CHECK(runner_->Execute(std::span(&s, 1), logits_).ok());
    ++position_;
    return logits_;
  }
  int64_t evicted_blocks() const {
    return cache_->stats().evicted_blocks[static_cast<int>(EvictionReason::kWindow)];
  }

 private:
  const Model& model_;
  WindowPolicy policy_;
  std::unique_ptr<KvCacheManager> cache_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<ModelRunner> runner_;
  std::vector<float> logits_;
  int position_ = 0;
};

double LogSoftmaxAt(std::span<const float> logits, int32_t id) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  return logits[id] - mx - std::log(sum);
}

// In-distribution long text: stories sampled from a fresh cache each, concatenated.
std::vector<int32_t> LongText(const Model& model, int length) {
  const Setting full{"full", WindowPolicy::Full(), 16};
  std::mt19937 rng(2024);
  std::vector<int32_t> text;
  const int32_t bos = model.tokenizer().bos_id();
  while (static_cast<int>(text.size()) < length) {
    WindowedDecoder d(model, full, kTrainWindow + 16);
    int32_t token = bos;
    text.push_back(token);
    for (int i = 0; i < kTrainWindow - 1 && static_cast<int>(text.size()) < length; ++i) {
      const auto logits = d.Feed(token);
      std::vector<double> p(logits.size());
      const float mx = *std::max_element(logits.begin(), logits.end());
      for (size_t v = 0; v < p.size(); ++v) p[v] = std::exp(static_cast<double>(logits[v]) - mx);
      // Inverse-CDF sampling (std::discrete_distribution trips a GCC 12 false warning).
      double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * std::accumulate(p.begin(), p.end(), 0.0);
      token = 0;
      while (token + 1 < static_cast<int32_t>(p.size()) && (u -= p[token]) > 0) ++token;
      if (token == bos || token == model.tokenizer().eos_id()) break;
      text.push_back(token);
    }
  }
  text.resize(length);
  return text;
}

std::string Run(const Model& model) {
  const std::vector<Setting> settings = {
      {"full cache (no window)", WindowPolicy::Full(), 16},
      {"window 512, 4 sink tokens (block 4)", WindowPolicy::Sliding(512, 4), 4},
      {"window 512, no sinks (block 4)", WindowPolicy::Sliding(512, 0), 4},
      {"window 512, 4 sink tokens (block 16: one 16-token sink block)", WindowPolicy::Sliding(512, 4), 16},
      {"window 128, 4 sink tokens (block 4)", WindowPolicy::Sliding(128, 4), 4},
      {"window 128, no sinks (block 4)", WindowPolicy::Sliding(128, 0), 4},
  };
  const std::vector<int32_t> text = LongText(model, kLength);
  std::string out = fmt::format(
      "Model: stories260K (trained on {}-token windows; `llama.context_length` says 2048). F32 KV cache. A "
      "window of W tokens evicts whole blocks after the sinks once full (at least a quarter of the window "
      "at a time) and re-indexes the kept tokens, so positions stay below W.\n\n"
      "## Teacher-forced perplexity over {} tokens ({} concatenated sampled stories)\n\n"
      "| setting | PPL, tokens 1..512 | PPL, tokens 513..{} | PPL, last 512 | window evictions (blocks) |\n|---|---|---|---|---|\n",
      kTrainWindow, kLength, std::count(text.begin(), text.end(), model.tokenizer().bos_id()), kLength);
  const int32_t bos = model.tokenizer().bos_id();
  // Perplexity over steps [from, to) (step i predicts text[i + 1]), story boundaries excluded.
  auto ppl = [&](const std::vector<double>& nll, int from, int to) {
    double sum = 0;
    int n = 0;
    for (int i = from; i < to; ++i) {
      if (text[i + 1] == bos) continue;
      sum += nll[i];
      ++n;
    }
    return std::exp(sum / n);
  };
  auto row = [&](const std::string& name, const std::vector<double>& nll, const std::string& evictions) {
    out += fmt::format("| {} | {:.3f} | {:.3f} | {:.3f} | {} |\n", name, ppl(nll, 0, kTrainWindow - 1),
                       ppl(nll, kTrainWindow - 1, kLength - 1), ppl(nll, kLength - 1 - kTrainWindow, kLength - 1),
                       evictions);
  };
  {
    // Best case: each story read on its own from a fresh cache.
    std::vector<double> nll(kLength - 1, 0.0);
    const Setting full{"full", WindowPolicy::Full(), 16};
    for (int start = 0; start + 1 < kLength;) {
      int end = start + 1;
      while (end < kLength && text[end] != bos) ++end;
      WindowedDecoder d(model, full, end - start + 16);
      for (int i = start; i + 1 < end; ++i) nll[i] = -LogSoftmaxAt(d.Feed(text[i]), text[i + 1]);
      start = end;
    }
    row("each story alone (fresh cache per story)", nll, "-");
  }
  for (const Setting& s : settings) {
    WindowedDecoder d(model, s, kLength + 16);
    std::vector<double> nll;
    for (int i = 0; i + 1 < kLength; ++i) nll.push_back(-LogSoftmaxAt(d.Feed(text[i]), text[i + 1]));
    row(s.name, nll, std::to_string(d.evicted_blocks()));
  }
  out += "\nPredictions of a story's first token (BOS) are left out of every row, since the per-story row has "
         "no context for them.\n\nFindings: without a window the model collapses once positions pass its 512-token "
         "training window (and its free-running text turns to letter soup, below); any sliding window keeps it "
         "within a few percent of the best case. For this 5-layer model the 4 sink tokens make no measurable "
         "difference against a plain window (same figures to about 0.5 %, either way): it evidently does not park "
         "attention on its first tokens the way the large models of the StreamingLLM paper do, so the sinks are "
         "kept for those models and cost one block here.\n";

  out += fmt::format("\n## Free-running greedy generation of {} tokens from \"Once upon a time\"\n\n", kLength);
  const std::vector<int32_t> prompt = model.tokenizer().Encode("Once upon a time", true);
  for (const Setting& s : settings) {
    WindowedDecoder d(model, s, kLength + prompt.size() + 16);
    std::vector<int32_t> generated;
    std::span<const float> logits;
    for (int32_t t : prompt) logits = d.Feed(t);
    double nll = 0;
    for (int i = 0; i < kLength; ++i) {
      const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      nll -= LogSoftmaxAt(logits, next);
      generated.push_back(next);
      logits = d.Feed(next);
    }
    std::string tail = model.tokenizer().Decode(std::span(generated).subspan(kLength - 80));
    std::replace(tail.begin(), tail.end(), '\n', ' ');
    out += fmt::format("- **{}**: self-perplexity {:.3f}; last 80 tokens: \"{}\"\n", s.name, std::exp(nll / kLength),
                       tail);
  }
  return out;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  namespace report = kvserve::bench_report;
  const std::string output = report::OutputFlag(argc, argv);
  auto model = kvserve::Model::Load(std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf");
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  return report::Emit(output, report::Heading("Sliding window with attention sinks: stories260K at 10x its training "
                                              "window", argv[0], output) + kvserve::Run(**model));
}
