#include "engine/model/model_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include "engine/model/ggml_types.h"
#include "engine/model/gguf.h"

namespace kvserve {

std::vector<double> RopeInverseFrequencies(double base, int rope_dim, std::span<const float> factors) {
  std::vector<double> inv_freq(static_cast<size_t>(std::max(rope_dim / 2, 0)));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = std::pow(base, -2.0 * static_cast<double>(i) / rope_dim);
    if (i < factors.size()) inv_freq[i] /= factors[i];
  }
  return inv_freq;
}

float ModelConfig::QueryScale() const {
  return query_scale > 0 ? query_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

bool ModelConfig::NeedsBeyondLlama() const {
  return sliding_window > 0 || scale_embeddings || gelu_gate || post_norms || attn_logit_softcap > 0 ||
         final_logit_softcap > 0 || query_scale > 0 || qk_norm;
}

std::vector<double> ModelConfig::RopeInvFreq() const {
  return RopeInverseFrequencies(rope_freq_base, rope_dim, rope_freq_factors);
}

Status ModelConfig::Validate() const {
  if (vocab_size <= 0 || dim <= 0 || num_layers <= 0 || num_heads <= 0 || num_kv_heads <= 0 ||
      head_dim <= 0 || ffn_dim <= 0) {
    return InvalidArgumentError("model config has a non-positive size: " + Describe());
  }
  if (num_heads % num_kv_heads != 0) {
    return InvalidArgumentError(fmt::format("head count {} is not a multiple of the KV head count {}",
                                            num_heads, num_kv_heads));
  }
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0) {
    return InvalidArgumentError(fmt::format("rope dimension {} must be even and at most head dim {}",
                                            rope_dim, head_dim));
  }
  if (context_length <= 0) return InvalidArgumentError("context length must be positive");
  if (sliding_window < 0 || sliding_window_every < 1) {
    return InvalidArgumentError("sliding window must be >= 0 and its layer period >= 1");
  }
  if (!rope_freq_factors.empty() && static_cast<int>(rope_freq_factors.size()) != rope_dim / 2) {
    return InvalidArgumentError(fmt::format("rope_freqs has {} factors, expected rope dimension / 2 = {}",
                                            rope_freq_factors.size(), rope_dim / 2));
  }
  for (float f : rope_freq_factors) {
    if (!(f > 0) || !std::isfinite(f)) return InvalidArgumentError("rope_freqs factors must be positive and finite");
  }
  if (!(rms_norm_eps > 0) || !(rope_freq_base > 0) || !(rope_freq_scale > 0)) {
    return InvalidArgumentError("rms eps, rope base and rope scale must be positive");
  }
  return OkStatus();
}

std::string ModelConfig::Describe() const {
  return fmt::format(
      "{} dim={} layers={} heads={} kv_heads={} head_dim={} ffn={} vocab={} ctx={} rope(dim={}, "
      "base={}, scale={}, {})",
      architecture, dim, num_layers, num_heads, num_kv_heads, head_dim, ffn_dim, vocab_size,
      context_length, rope_dim, rope_freq_base, rope_freq_scale,
      rope_layout == RopeLayout::kNeox ? "neox" : "normal");
}

namespace {

// Architectures whose GGUF files use the NeoX rotation (as the reference implementation
// classifies them).
bool UsesNeoxRope(const std::string& arch) {
  for (const char* a : {"qwen2", "qwen", "qwen3", "phi3", "phi2", "gemma", "gemma2", "stablelm",
                        "gptneox", "starcoder2", "olmo2", "falcon"}) {
    if (arch == a) return true;
  }
  return false;
}

// Architectures whose computation kvserve implements. Others (granite's scales, olmo's norms,
// ...) would load and produce wrong numbers, so they are refused by name.
constexpr std::array<std::string_view, 7> kArchitectures = {"llama", "mistral", "qwen2", "qwen3",
                                                            "phi3",  "gemma",   "gemma2"};

// A soft-capping value: finite and >= 0 (0: off).
StatusOr<float> GetCapOr(const GgufFile& f, const std::string& key, float fallback) {
  if (!f.Has(key)) return fallback;
  ASSIGN_OR_RETURN(double v, f.GetFloat(key));
  if (!std::isfinite(v) || v < 0 || v > 1e6) return InvalidArgumentError("key '" + key + "' out of range");
  return static_cast<float>(v);
}

// A window length in tokens (0: none).
StatusOr<int> GetWindowOr(const GgufFile& f, const std::string& key, int fallback) {
  if (!f.Has(key)) return fallback;
  ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
  if (v > (1u << 30)) return InvalidArgumentError("key '" + key + "' out of range");
  return static_cast<int>(v);
}

// phi3: sliding window on every layer (fused Q/K/V and gate/up tensors are the weights'
// business); longrope (128k models: rope_factors_long/short) is not implemented.
// qwen3: Q/K norms per head before RoPE (no Q/K/V biases; the file says so by omitting them).
// gemma: embeddings scaled by sqrt(dim), GELU-tanh gate, queries scaled by 1/sqrt(head_dim).
// gemma2: the 2B/9B/27B computation as llama.cpp runs it: embeddings scaled by sqrt(dim),
// GELU-tanh gate, post-attention and post-FFN norms, soft-capped attention scores and logits,
// a window on even layers, and queries scaled by 1/sqrt(head_dim), except the 46-layer 27B
// model, which uses 1/sqrt(dim / heads).
Status ReadArchitectureExtras(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->architecture;
  if (a == "phi3") {
    if (f.FindTensor("rope_factors_long.weight") != nullptr) {
      return UnimplementedError("phi3 with longrope scaling (rope_factors_long) is not supported");
    }
    ASSIGN_OR_RETURN(c->sliding_window, GetWindowOr(f, a + ".attention.sliding_window", 0));
  } else if (a == "qwen3") {
    c->qk_norm = true;
  } else if (a == "gemma") {
    c->scale_embeddings = true;
    c->gelu_gate = true;
  } else if (a == "gemma2") {
    ASSIGN_OR_RETURN(c->sliding_window, GetWindowOr(f, a + ".attention.sliding_window", 4096));
    c->sliding_window_every = 2;
    c->scale_embeddings = true;
    c->gelu_gate = true;
    c->post_norms = true;
    ASSIGN_OR_RETURN(c->attn_logit_softcap, GetCapOr(f, a + ".attn_logit_softcapping", 50));
    ASSIGN_OR_RETURN(c->final_logit_softcap, GetCapOr(f, a + ".final_logit_softcapping", 30));
    const int scaled_dim = c->num_layers == 46 ? c->dim / c->num_heads : c->head_dim;
    c->query_scale = 1.0f / std::sqrt(static_cast<float>(scaled_dim));
  }
  return OkStatus();
}

// Llama 3.1+: `rope_freqs.weight`, one divisor per frequency (F32 or F16).
StatusOr<std::vector<float>> ReadRopeFreqFactors(const GgufFile& f) {
  const GgufTensorInfo* t = f.FindTensor("rope_freqs.weight");
  if (t == nullptr) return std::vector<float>();
  if (t->type != GgmlType::kF32 && t->type != GgmlType::kF16) {
    return InvalidArgumentError(fmt::format("rope_freqs.weight has type {}, expected f32 or f16", GgmlTypeName(t->type)));
  }
  std::vector<float> factors(t->num_elements);
  DequantizeRow(t->type, t->data, factors.data(), static_cast<int64_t>(factors.size()));
  return factors;
}

StatusOr<int> GetPositive(const GgufFile& f, const std::string& key) {
  ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
  if (v == 0 || v > (1u << 30)) return InvalidArgumentError("key '" + key + "' out of range");
  return static_cast<int>(v);
}

}  // namespace

StatusOr<ModelConfig> ReadModelConfig(const GgufFile& f) {
  ModelConfig c;
  ASSIGN_OR_RETURN(c.architecture, f.GetString("general.architecture"));
  const std::string& a = c.architecture;
  if (std::find(kArchitectures.begin(), kArchitectures.end(), a) == kArchitectures.end()) {
    return UnimplementedError(fmt::format("architecture '{}' is not supported by kvserve (supported: {})", a,
                                          fmt::join(kArchitectures, ", ")));
  }
  if (auto n = f.GetString("general.name"); n.ok()) c.name = *n;
  ASSIGN_OR_RETURN(c.dim, GetPositive(f, a + ".embedding_length"));
  ASSIGN_OR_RETURN(c.num_layers, GetPositive(f, a + ".block_count"));
  ASSIGN_OR_RETURN(c.num_heads, GetPositive(f, a + ".attention.head_count"));
  ASSIGN_OR_RETURN(c.ffn_dim, GetPositive(f, a + ".feed_forward_length"));
  c.num_kv_heads = c.num_heads;
  if (f.Has(a + ".attention.head_count_kv")) {
    ASSIGN_OR_RETURN(c.num_kv_heads, GetPositive(f, a + ".attention.head_count_kv"));
  }
  if (c.dim % c.num_heads != 0 && !f.Has(a + ".attention.key_length")) {
    return InvalidArgumentError("embedding length is not a multiple of the head count");
  }
  c.head_dim = c.dim / c.num_heads;
  if (f.Has(a + ".attention.key_length")) {
    ASSIGN_OR_RETURN(c.head_dim, GetPositive(f, a + ".attention.key_length"));
  }
  if (f.Has(a + ".context_length")) {
    ASSIGN_OR_RETURN(c.context_length, GetPositive(f, a + ".context_length"));
  }
  if (f.Has(a + ".attention.layer_norm_rms_epsilon")) {
    ASSIGN_OR_RETURN(double eps, f.GetFloat(a + ".attention.layer_norm_rms_epsilon"));
    c.rms_norm_eps = static_cast<float>(eps);
  }
  c.rope_dim = c.head_dim;
  if (f.Has(a + ".rope.dimension_count")) {
    ASSIGN_OR_RETURN(c.rope_dim, GetPositive(f, a + ".rope.dimension_count"));
  }
  if (f.Has(a + ".rope.freq_base")) {
    ASSIGN_OR_RETURN(double base, f.GetFloat(a + ".rope.freq_base"));
    c.rope_freq_base = static_cast<float>(base);
  }
  std::string scaling_type = "none";
  if (f.Has(a + ".rope.scaling.type")) {
    ASSIGN_OR_RETURN(scaling_type, f.GetString(a + ".rope.scaling.type"));
  }
  if (scaling_type == "linear") {
    double factor = 1.0;
    if (f.Has(a + ".rope.scaling.factor")) {
      ASSIGN_OR_RETURN(factor, f.GetFloat(a + ".rope.scaling.factor"));
    } else if (f.Has(a + ".rope.scale_linear")) {
      ASSIGN_OR_RETURN(factor, f.GetFloat(a + ".rope.scale_linear"));
    }
    if (!(factor > 0)) return InvalidArgumentError("rope scaling factor must be positive");
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling_type != "none") {
    return UnimplementedError("rope scaling type '" + scaling_type + "' is not supported (none, linear)");
  } else if (f.Has(a + ".rope.scale_linear")) {
    ASSIGN_OR_RETURN(double factor, f.GetFloat(a + ".rope.scale_linear"));
    if (!(factor > 0)) return InvalidArgumentError("rope scale_linear must be positive");
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  }
  c.rope_layout = UsesNeoxRope(a) ? RopeLayout::kNeox : RopeLayout::kNormal;
  ASSIGN_OR_RETURN(c.rope_freq_factors, ReadRopeFreqFactors(f));
  RETURN_IF_ERROR(ReadArchitectureExtras(f, &c));

  if (const GgufValue* tokens = f.Find("tokenizer.ggml.tokens"); tokens && tokens->type == GgufType::kArray) {
    c.vocab_size = static_cast<int>(tokens->array.size());
  } else if (f.Has(a + ".vocab_size")) {
    ASSIGN_OR_RETURN(c.vocab_size, GetPositive(f, a + ".vocab_size"));
  } else if (const GgufTensorInfo* emb = f.FindTensor("token_embd.weight"); emb && emb->dims.size() == 2) {
    c.vocab_size = static_cast<int>(emb->dims[1]);
  }
  c.tied_output = f.FindTensor("output.weight") == nullptr;
  c.attention_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace kvserve
