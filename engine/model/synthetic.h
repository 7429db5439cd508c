// Synthetic models: Llama-, Gemma-2- and Phi-3-shaped models with seeded random weights
// (normal(0, 0.02), norms 1.0) and a built-in SentencePiece-style vocabulary, so benchmarks of any shape and the quick
// start need no download.
//
// "synthetic:<preset>[:<dtype>]" builds the model in memory; `kvserve mkmodel` writes the very
// same tensors (same generator, same seed) to a GGUF file other GGUF tools can load. Weight
// values depend only on (seed, tensor name, element index), never on thread count.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/ggml_types.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

class GgufFile;
class GgufWriter;
struct ModelLoadOptions;

struct SyntheticPreset {
  std::string_view name;
  int dim;
  int num_layers;
  int num_heads;
  int num_kv_heads;
  int ffn_dim;
  int vocab_size;
  int context_length;
  // "llama"; "gemma2" (tied output, post norms, soft-capping 50 / 30, the window on even
  // layers); "gemma" (tied output); "phi3" (fused attn_qkv and gate/up, the window on every
  // layer); "qwen3" (per-head Q/K norms, weights drawn around 1).
  std::string_view architecture = "llama";
  int head_dim = 0;        // 0: dim / num_heads
  int sliding_window = 0;  // gemma2 and phi3
};

// tiny, 150m, 1b, 7b-shape (shapes of ../shared/docs/BASELINE.md); gemma2-tiny,
// gemma2-2b-shape, phi3-tiny, phi3-mini-shape.
const std::vector<SyntheticPreset>& SyntheticPresets();
[[nodiscard]] std::optional<SyntheticPreset> FindSyntheticPreset(std::string_view name);

bool IsSyntheticSpec(std::string_view spec);  // starts with "synthetic:"

struct SyntheticOptions {
  SyntheticPreset preset;
  GgmlType dtype = GgmlType::kF16;  // matrices; norms are always F32
  int num_layers = 0;               // 0: the preset's
  uint64_t seed = 1234;
  // A real vocabulary (and its chat template) instead of the built-in one: random weights
  // over it make test models that tokenize and render chats as the real model does.
  std::optional<Vocab> vocab;
};

// Parses "synthetic:<preset>[:<dtype>]" (dtype f32, f16, bf16, q8_0, q4_0) on top of `base`.
[[nodiscard]] StatusOr<SyntheticOptions> ParseSyntheticSpec(std::string_view spec,
                                                            const ModelLoadOptions& base);

// A SentencePiece-style vocabulary of `size` tokens: <unk>, <s>, </s>, 256 byte tokens, then
// printable pieces; the last `control.size()` ids are these control tokens (Phi-3's
// <|endoftext|>, <|user|>, ...). REQUIRES: size >= 259 + control.size().
Vocab MakeSyntheticVocab(int size, std::span<const std::string_view> control = {});

// A real vocabulary for SyntheticOptions::vocab, from a GGUF (e.g. a vocab-only one): the
// `control` tokens it lacks appended as control tokens, BOS and EOS set to the tokens of
// these texts when given (else the file's), and `chat_template` as its template.
struct VocabSource {
  std::string path;
  std::vector<std::string> control;
  std::string bos;
  std::string eos;
  std::string chat_template;
};
[[nodiscard]] StatusOr<Vocab> LoadVocabForSynthetic(const VocabSource& source);

// The model as GGUF metadata + tensors.
[[nodiscard]] StatusOr<GgufWriter> MakeSyntheticGguf(const SyntheticOptions& options);

// In memory: the parsed file of MakeSyntheticGguf.
[[nodiscard]] StatusOr<std::unique_ptr<GgufFile>> BuildSyntheticGguf(std::string_view spec,
                                                                     const ModelLoadOptions& options);

}  // namespace kvserve
