// ModelConfig: the hyper-parameters of a Llama-family decoder, read from GGUF metadata
// (`<arch>.*` keys for llama, mistral, qwen2 and others with the same layout) or given by a
// synthetic preset. Plain value; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvserve {

class GgufFile;

enum class RopeLayout : uint8_t {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1]) — llama/mistral GGUF files
  kNeox,    // rotate (x[i], x[i + rope_dim/2]) — qwen2, phi3, gemma ...
};

struct ModelConfig {
  std::string architecture = "llama";
  std::string name;
  int vocab_size = 0;
  int dim = 0;             // embedding length
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;        // dim / num_heads unless the file says otherwise
  int ffn_dim = 0;
  int context_length = 2048;
  float rms_norm_eps = 1e-5f;
  int rope_dim = 0;        // rotated dims per head (<= head_dim)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear scaling: position * scale
  RopeLayout rope_layout = RopeLayout::kNormal;
  bool attention_bias = false;   // qwen2 has q/k/v biases
  bool tied_output = false;      // output.weight absent: logits use token_embd

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  // Checks positivity and divisibility (heads % kv_heads, rope_dim even and <= head_dim).
  [[nodiscard]] Status Validate() const;
  std::string Describe() const;
};

// Reads the config of `file`; the vocabulary size comes from tokenizer.ggml.tokens or
// <arch>.vocab_size or the embedding tensor.
[[nodiscard]] StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace kvserve
