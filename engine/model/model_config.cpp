#include "engine/model/model_config.h"

#include <fmt/format.h>

#include "engine/model/gguf.h"

namespace kvserve {

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
