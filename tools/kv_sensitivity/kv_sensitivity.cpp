#include "tools/kv_sensitivity/kv_sensitivity.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <numeric>

#include "engine/backend/backend_factory.h"

namespace kvserve {
namespace {

constexpr int kChunk = 128;  // tokens (and logits rows) per forward

constexpr std::string_view kSampleText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with "
    "her big red ball. One day, she saw a small dog sitting under a tree. The dog looked sad and "
    "hungry. Lily gave the dog some of her bread and said, \"Do not be sad, little dog. You can be my "
    "friend.\" The dog wagged its tail and licked her hand. From that day on, Lily and the dog played "
    "together every day, and they were very happy.\n"
    "Tom had a toy boat. He liked to sail it in the pond near his house. One morning the wind was "
    "strong and the boat went far away. Tom was scared, but his mom helped him. They walked around "
    "the pond and found the boat in the tall grass. Tom hugged his mom and said thank you.\n"
    "The water cycle describes how water moves between the ground and the sky. The sun warms lakes "
    "and oceans, and some of the water rises into the air as vapor. High in the sky the vapor cools "
    "and forms clouds. When the drops in a cloud grow heavy, they fall back to the ground as rain or "
    "snow. Rivers carry the water back to the sea, and the cycle begins again.\n"
    "A computer program is a list of instructions. The computer reads each instruction and does "
    "exactly what it says, one step after another. Programs can add numbers, draw pictures, play "
    "music and answer questions. People who write programs must think carefully, because a computer "
    "will not guess what they meant.\n";

// Softmax of a row in double precision.
void Softmax(std::span<const float> logits, std::vector<double>* out) {
  out->resize(logits.size());
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += ((*out)[i] = std::exp(static_cast<double>(logits[i]) - mx));
  for (double& p : *out) p /= sum;
}

}  // namespace

std::string_view KvSensitivitySampleText() { return kSampleText; }

StatusOr<std::vector<float>> TeacherForcedLogits(const Model& model, KvSpecConfig kv, std::span<const int32_t> tokens,
                                                 const KvStoreHook& hook, std::optional<KvCompaction> compaction) {
  const ModelConfig& c = model.config();
  kv.num_layers = c.num_layers;
  kv.num_kv_heads = c.num_kv_heads;
  kv.head_dim = c.head_dim;
  ASSIGN_OR_RETURN(KvSpec spec, KvSpec::Create(kv));
  const int T = static_cast<int>(tokens.size());
  if (T == 0) return InvalidArgumentError("no tokens");
  const int num_blocks = (T + kv.block_size - 1) / kv.block_size;
  BackendConfig options;
  options.max_num_batched_tokens = kChunk;
  options.max_num_seqs = 1;
  options.max_logits = kChunk;  // every position of a chunk is scored
  options.kv_store_hook = hook;
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(options, model));
  RETURN_IF_ERROR(backend->InitKvCache(spec, num_blocks));
  // One sequence in blocks 0..num_blocks-1, so slot == position.
  std::vector<int32_t> block_table(num_blocks);
  std::iota(block_table.begin(), block_table.end(), 0);
  std::optional<KvSpec> compact;
  int num_compacted = 0;  // block_table[0, num_compacted) point into the compact region
  if (compaction) {
    ASSIGN_OR_RETURN(compact, CompactSpecFor(spec, compaction->dtype));
    RETURN_IF_ERROR(backend->InitCompactKvCache(*compact, num_blocks));
    if (compaction->every <= 0 || compaction->keep < 0) return InvalidArgumentError("bad compaction schedule");
  }
  std::vector<float> logits(static_cast<size_t>(T) * c.vocab_size);
  std::vector<int32_t> positions, query_start(2), seq_lens(1), logits_indices;
  std::vector<int64_t> slots;
  for (int start = 0, n = 0; start < T; start += n) {
    n = std::min(kChunk, T - start);
    if (compaction) n = std::min(n, compaction->every - start % compaction->every);
    positions.resize(n);
    slots.resize(n);
    logits_indices.resize(n);
    for (int i = 0; i < n; ++i) {
      positions[i] = start + i;
      slots[i] = start + i;
      logits_indices[i] = i;
    }
    query_start = {0, n};
    seq_lens = {start + n};
    ForwardBatch batch;
    batch.token_ids = tokens.subspan(start, n);
    batch.positions = positions;
    batch.slot_mapping = slots;
    batch.query_start = query_start;
    batch.seq_lens = seq_lens;
    batch.block_tables = block_table;
    batch.max_blocks_per_seq = num_blocks;
    batch.logits_indices = logits_indices;
    RETURN_IF_ERROR(backend->Forward(
        batch, std::span(logits).subspan(static_cast<size_t>(start) * c.vocab_size, static_cast<size_t>(n) * c.vocab_size)));
    if (compaction && (start + n) % compaction->every == 0) {
      std::vector<std::pair<int32_t, int32_t>> copies;
      for (; (num_compacted + 1) * spec.block_size() <= start + n - compaction->keep; ++num_compacted) {
        copies.emplace_back(num_compacted, num_blocks + num_compacted);
        block_table[num_compacted] = num_blocks + num_compacted;
      }
      RETURN_IF_ERROR(backend->CopyBlocks(copies));
    }
  }
  if (compaction && compaction->bytes != nullptr) {
    *compaction->bytes = static_cast<int64_t>(num_blocks - num_compacted) * spec.block_bytes() +
                         static_cast<int64_t>(num_compacted) * compact->block_bytes();
  }
  return logits;
}

KvErrorStats CompareLogits(std::span<const float> baseline, std::span<const float> other, int vocab) {
  CHECK_EQ(baseline.size(), other.size());
  CHECK_GT(vocab, 0);
  const size_t rows = baseline.size() / vocab;
  KvErrorStats e;
  if (rows == 0) return e;
  std::vector<double> p, q;
  double kl_sum = 0, abs_sum = 0;
  int agree = 0;
  for (size_t r = 0; r < rows; ++r) {
    const auto a = baseline.subspan(r * vocab, vocab);
    const auto b = other.subspan(r * vocab, vocab);
    Softmax(a, &p);
    Softmax(b, &q);
    double kl = 0;
    for (int i = 0; i < vocab; ++i) {
      if (p[i] > 0) kl += p[i] * (std::log(p[i]) - std::log(std::max(q[i], 1e-300)));
      const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
      e.max_abs_logit_error = std::max(e.max_abs_logit_error, d);
      abs_sum += d;
    }
    kl_sum += std::max(kl, 0.0);
    agree += std::max_element(a.begin(), a.end()) - a.begin() == std::max_element(b.begin(), b.end()) - b.begin();
  }
  e.mean_kl = kl_sum / rows;
  e.mean_abs_logit_error = abs_sum / (static_cast<double>(rows) * vocab);
  e.top1_agreement = static_cast<double>(agree) / rows;
  return e;
}

StatusOr<KvSensitivityReport> MeasureKvSensitivity(const Model& model, KvDtype dtype, const std::string& sample_text,
                                                   int max_tokens) {
  if (max_tokens < 8) return InvalidArgumentError("kv-sensitivity needs at least 8 tokens");
  const ModelConfig& c = model.config();
  const std::string_view text = sample_text.empty() ? KvSensitivitySampleText() : std::string_view(sample_text);
  std::vector<int32_t> tokens = model.tokenizer().Encode(text, /*add_special=*/true);
  tokens.resize(std::min<size_t>(tokens.size(), static_cast<size_t>(std::min(max_tokens, c.context_length))));
  if (tokens.size() < 8) return InvalidArgumentError("sample text is shorter than 8 tokens");

  KvSpecConfig base;
  base.dtype = KvDtype::kF16;
  ASSIGN_OR_RETURN(std::vector<float> baseline, TeacherForcedLogits(model, base, tokens));
  auto measure = [&](const std::vector<int>& keep) -> StatusOr<KvErrorStats> {
    KvSpecConfig kv;
    kv.dtype = dtype;
    kv.keep_dtype = KvDtype::kF16;
    for (int l : keep) kv.keep.push_back({l, -1});
    ASSIGN_OR_RETURN(std::vector<float> logits, TeacherForcedLogits(model, kv, tokens));
    return CompareLogits(baseline, logits, c.vocab_size);
  };

  KvSensitivityReport report;
  report.model = model.source();
  report.dtype = dtype;
  report.num_tokens = static_cast<int>(tokens.size());
  for (int layer = 0; layer < c.num_layers; ++layer) {
    std::vector<int> others;  // every layer but `layer` stays at F16
    for (int l = 0; l < c.num_layers; ++l) {
      if (l != layer) others.push_back(l);
    }
    ASSIGN_OR_RETURN(KvErrorStats e, measure(others));
    report.layers.push_back({layer, e});
  }
  ASSIGN_OR_RETURN(report.all_layers, measure({}));

  std::vector<double> kls;
  for (const auto& l : report.layers) kls.push_back(l.error.mean_kl);
  std::sort(kls.begin(), kls.end());
  const double median = kls[kls.size() / 2];
  std::stable_sort(report.layers.begin(), report.layers.end(),
                   [](const KvLayerSensitivity& a, const KvLayerSensitivity& b) { return a.error.mean_kl > b.error.mean_kl; });
  const size_t cap = std::max<size_t>(1, report.layers.size() / 4);
  for (const auto& l : report.layers) {  // worst first
    const bool worst = report.recommended_keep.empty();
    if (report.recommended_keep.size() >= cap || !((worst && l.error.mean_kl > 0) || l.error.mean_kl > 2 * median)) break;
    report.recommended_keep.push_back(l.layer);
  }
  std::sort(report.recommended_keep.begin(), report.recommended_keep.end());
  ASSIGN_OR_RETURN(report.with_recommendation, measure(report.recommended_keep));
  report.recommended_flag = fmt::format("--kv-dtype {}", KvDtypeName(dtype));
  if (!report.recommended_keep.empty()) {
    report.recommended_flag += fmt::format(" --kv-keep layers={}", fmt::join(report.recommended_keep, ","));
  }
  return report;
}

std::string FormatKvSensitivityReport(const KvSensitivityReport& r) {
  std::string out = fmt::format("kv-sensitivity: {} with {} KV, {} tokens of sample text, baseline all layers f16\n",
                                r.model, KvDtypeName(r.dtype), r.num_tokens);
  out += fmt::format("{:>8} {:>12} {:>14} {:>14} {:>10}\n", "layer", "mean KL", "max |dlogit|", "mean |dlogit|",
                     "top-1");
  auto row = [&](const std::string& name, const KvErrorStats& e) {
    out += fmt::format("{:>8} {:>12.3e} {:>14.4f} {:>14.5f} {:>9.1f}%\n", name, e.mean_kl, e.max_abs_logit_error,
                       e.mean_abs_logit_error, 100 * e.top1_agreement);
  };
  for (const auto& l : r.layers) row(std::to_string(l.layer), l.error);
  row("all", r.all_layers);
  row("keep", r.with_recommendation);
  out += fmt::format("recommended: {}  (layers above 2x the median layer's KL, at most a quarter of them)\n",
                     r.recommended_flag);
  return out;
}

}  // namespace kvserve
