// KV cache sensitivity: which layers suffer most when their K/V are stored in a small dtype,
// so `--kv-keep <layers>` can keep just those at F16 (layered precision).
//
// MeasureKvSensitivity runs the model teacher-forced over sample text (tokenized with the
// model's own tokenizer) once with every layer's cache at F16 (the baseline) and once per
// layer L with only L at the target dtype, and compares next-token distributions at every
// position: mean KL(baseline || quantized), max / mean |logit difference|, top-1 agreement.
// It also measures "every layer at the target dtype" and the recommended keep setting.
// Recommendation: the layers whose KL exceeds twice the median layer's (at most a quarter of
// the layers, at least the worst one).
//
// Runs on the CPU backend of the calling thread (OpenMP inside); takes seconds for the small
// models, minutes for large ones. Pure with respect to the model; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/kv_spec.h"
#include "common/status.h"
#include "engine/backend/backend.h"
#include "engine/model/weights.h"

namespace kvserve {

// How far one cache setting's next-token distributions are from the baseline's.
struct KvErrorStats {
  double mean_kl = 0;             // mean over positions of KL(baseline || setting), nats
  double max_abs_logit_error = 0;
  double mean_abs_logit_error = 0;
  double top1_agreement = 0;      // fraction of positions with the same argmax
};

struct KvLayerSensitivity {
  int layer = 0;
  KvErrorStats error;
};

struct KvSensitivityReport {
  std::string model;                        // Model::source()
  KvDtype dtype = KvDtype::kInt8;
  int num_tokens = 0;                       // positions compared
  std::vector<KvLayerSensitivity> layers;   // one per layer, worst (largest mean KL) first
  KvErrorStats all_layers;                  // every layer at `dtype`
  std::vector<int> recommended_keep;        // ascending layer ids
  KvErrorStats with_recommendation;         // `dtype` except recommended_keep at F16
  // Flags in the syntax server/engine_options parses, e.g. "--kv-dtype int8 --kv-keep 0,3".
  std::string recommended_flag;
};

// A few hundred tokens of plain English (short stories and expository prose).
std::string_view KvSensitivitySampleText();

// REQUIRES nothing; errors: dtype not quantizable in this layout, text too short (< 8 tokens),
// max_tokens < 8. `sample_text` empty: KvSensitivitySampleText(). Tokens beyond max_tokens (and
// beyond the model's context) are dropped.
[[nodiscard]] StatusOr<KvSensitivityReport> MeasureKvSensitivity(const Model& model, KvDtype dtype,
                                                                  const std::string& sample_text, int max_tokens);
// Human-readable table + recommendation.
std::string FormatKvSensitivityReport(const KvSensitivityReport& report);

// Building blocks (also used by bench/kv_quality):
// Logits of every position of `tokens` run through the CPU backend with cache layout `kv`
// (its layers/heads/head_dim are taken from the model; its block size is kept),
// [tokens.size()][vocab]. `hook`
// (benchmarks): see KvStoreHook in engine/backend/backend.h; it acts on F32 layers only.
// `compaction` (optional): the engine's schedule of KvCacheManager::Compact — after every
// `every` positions, full blocks older than the newest `keep` are re-encoded to `dtype`; the
// cache's bytes at the end (both regions) go to *bytes.
struct KvCompaction {
  KvDtype dtype = KvDtype::kInt8;
  int every = 512;
  int keep = 1024;
  int64_t* bytes = nullptr;
};
[[nodiscard]] StatusOr<std::vector<float>> TeacherForcedLogits(const Model& model, KvSpecConfig kv,
                                                               std::span<const int32_t> tokens,
                                                               const KvStoreHook& hook = {},
                                                               std::optional<KvCompaction> compaction = std::nullopt);
// Compares row-major [rows][vocab] logits.
KvErrorStats CompareLogits(std::span<const float> baseline, std::span<const float> other, int vocab);

}  // namespace kvserve
