// ModelConfig: the hyper-parameters of a Llama-family decoder, read from GGUF metadata
// (`<arch>.*` keys of the architectures kvserve runs: llama, mistral, qwen2, phi3, gemma2) or
// given by a synthetic preset. Plain value; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

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
  // Llama 3.1+ (`rope_freqs.weight`): frequency i is divided by rope_freq_factors[i]; empty: 1.
  std::vector<float> rope_freq_factors;
  RopeLayout rope_layout = RopeLayout::kNormal;
  bool attention_bias = false;   // qwen2 has q/k/v biases
  bool tied_output = false;      // output.weight absent: logits use token_embd
  bool qk_norm = false;          // qwen3: RMSNorm of each head's q and k (weights [head_dim]) before RoPE
  // Sliding-window attention (phi3, gemma2): on the layers LayerWindow names, a query at
  // position p sees the keys at positions p - sliding_window + 1 .. p.
  int sliding_window = 0;          // 0: every layer attends to the whole context
  int sliding_window_every = 1;    // windowed layers: those with layer % this == 0 (gemma2: 2)
  // Gemma (1 and 2).
  bool scale_embeddings = false;   // x = embedding row * sqrt(dim)
  bool gelu_gate = false;          // GELU (tanh approximation) on the gate instead of SiLU
  bool post_norms = false;         // RMSNorm of the attention and FFN outputs before the residual add
  float attn_logit_softcap = 0;    // attention scores = cap * tanh(score / cap); 0: off
  float final_logit_softcap = 0;   // logits = cap * tanh(logit / cap); 0: off
  float query_scale = 0;           // q multiplier before the scores; 0: 1 / sqrt(head_dim)

  int q_dim() const { return num_heads * head_dim; }
  // The attention window of `layer` (0: the whole context).
  int LayerWindow(int layer) const {
    return sliding_window > 0 && layer % sliding_window_every == 0 ? sliding_window : 0;
  }
  float QueryScale() const;
  // Uses a feature beyond the Llama computation (windows, Gemma's extras, Q/K norms): what a backend
  // that implements only Llama must refuse.
  bool NeedsBeyondLlama() const;
  // The rotation speed of each of the rope_dim / 2 frequencies (RopeInverseFrequencies).
  std::vector<double> RopeInvFreq() const;
  int kv_dim() const { return num_kv_heads * head_dim; }
  // Checks positivity and divisibility (heads % kv_heads, rope_dim even and <= head_dim).
  [[nodiscard]] Status Validate() const;
  std::string Describe() const;
};

// RoPE's inverse frequencies: inv_freq[i] = base^(-2i / rope_dim) / factors[i] (factors empty:
// no division), for i < rope_dim / 2. Position p rotates pair i by p * freq_scale * inv_freq[i].
std::vector<double> RopeInverseFrequencies(double base, int rope_dim, std::span<const float> factors = {});

// Reads the config of `file`; the vocabulary size comes from tokenizer.ggml.tokens or
// <arch>.vocab_size or the embedding tensor. UNIMPLEMENTED naming the architecture and the
// supported list for any other general.architecture: a model is never run as another.
[[nodiscard]] StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace kvserve
