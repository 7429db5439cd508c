#include "engine/model/synthetic.h"

#include <cmath>
#include <cstring>
#include <fmt/format.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "engine/model/weights.h"

namespace kvserve {
namespace {

constexpr float kWeightStddev = 0.02f;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t HashName(std::string_view name, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Element i of a normal(0, stddev) tensor: Box-Muller on two counter-based uniforms.
float NormalAt(uint64_t stream, uint64_t i, float stddev) {
  const uint64_t pair = i / 2;
  const uint64_t a = SplitMix64(stream ^ (pair * 2 + 0x1234567ull));
  const uint64_t b = SplitMix64(stream ^ (pair * 2 + 1 + 0x89ABCDEFull));
  const double u1 = (static_cast<double>(a >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
  const double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;          // [0, 1)
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * M_PI * u2;
  return static_cast<float>((i % 2 == 0 ? r * std::cos(angle) : r * std::sin(angle)) * stddev);
}

// An encoded [rows][cols] random matrix.
std::string RandomMatrix(const std::string& name, int64_t rows, int64_t cols, GgmlType type, uint64_t seed) {
  const size_t row_bytes = *GgmlRowBytes(type, static_cast<uint64_t>(cols));
  std::string bytes(row_bytes * static_cast<size_t>(rows), '\0');
  const uint64_t stream = HashName(name, seed);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) row[c] = NormalAt(stream, static_cast<uint64_t>(r * cols + c), kWeightStddev);
    QuantizeRow(type, row.data(), bytes.data() + static_cast<size_t>(r) * row_bytes, cols);
  }
  return bytes;
}

// n values drawn uniformly around 1 ([0.5, 1.5)): norm weights whose indexing a test can see.
std::string AroundOneVector(const std::string& name, int64_t n, uint64_t seed) {
  std::string bytes(sizeof(float) * static_cast<size_t>(n), '\0');
  const uint64_t stream = HashName(name, seed);
  for (int64_t i = 0; i < n; ++i) {
    const float v = 0.5f + static_cast<float>(SplitMix64(stream ^ static_cast<uint64_t>(i)) >> 40) / 16777216.0f;
    std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof(float));
  }
  return bytes;
}

std::string OnesVector(int64_t n) {
  std::string bytes(sizeof(float) * static_cast<size_t>(n), '\0');
  const float one = 1.0f;
  for (int64_t i = 0; i < n; ++i) std::memcpy(bytes.data() + i * sizeof(float), &one, sizeof(float));
  return bytes;
}

}  // namespace

const std::vector<SyntheticPreset>& SyntheticPresets() {
  static const std::vector<SyntheticPreset> presets = {
      {"tiny", 64, 2, 4, 2, 192, 512, 2048},
      {"150m", 1024, 8, 16, 8, 2816, 32000, 4096},
      {"1b", 2048, 22, 32, 4, 5632, 32000, 4096},
      {"7b-shape", 4096, 32, 32, 32, 11008, 32000, 4096},
      // 26 layers: llama.cpp runs Gemma 2 of 26 (2B), 42 (9B) or 46 (27B) layers only.
      {"gemma2-tiny", 64, 26, 4, 2, 192, 512, 2048, "gemma2", 32, 32},
      {"gemma2-2b-shape", 2304, 26, 8, 4, 9216, 32000, 8192, "gemma2", 256, 4096},
      {"phi3-tiny", 64, 2, 4, 4, 192, 512, 2048, "phi3", 0, 32},
      {"phi3-mini-shape", 3072, 32, 32, 32, 8192, 32064, 4096, "phi3", 0, 2047},
      // Head dim 32 with 4 heads of a 64-wide model: q_dim != dim, as in Qwen3.
      {"qwen3-tiny", 64, 2, 4, 2, 192, 512, 2048, "qwen3", 32},
      {"gemma-tiny", 64, 2, 4, 1, 192, 512, 2048, "gemma", 32},
  };
  return presets;
}

std::optional<SyntheticPreset> FindSyntheticPreset(std::string_view name) {
  for (const SyntheticPreset& p : SyntheticPresets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

bool IsSyntheticSpec(std::string_view spec) { return spec.rfind("synthetic:", 0) == 0; }

StatusOr<SyntheticOptions> ParseSyntheticSpec(std::string_view spec, const ModelLoadOptions& base) {
  if (!IsSyntheticSpec(spec)) return InvalidArgumentError("not a synthetic model spec: " + std::string(spec));
  std::string_view rest = spec.substr(std::string_view("synthetic:").size());
  std::string_view preset_name = rest.substr(0, rest.find(':'));
  std::optional<SyntheticPreset> preset = FindSyntheticPreset(preset_name);
  if (!preset) {
    std::string names;
    for (const SyntheticPreset& p : SyntheticPresets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
    return InvalidArgumentError(fmt::format("unknown synthetic preset '{}' (choose from {})", preset_name, names));
  }
  SyntheticOptions o;
  o.preset = *preset;
  o.dtype = base.synthetic_type;
  o.num_layers = base.num_layers_override;
  o.seed = base.seed;
  if (rest.find(':') != std::string_view::npos) {
    std::string_view dtype_name = rest.substr(rest.find(':') + 1);
    std::optional<GgmlType> t = ParseGgmlType(dtype_name);
    if (!t || !(*t == GgmlType::kF32 || *t == GgmlType::kF16 || *t == GgmlType::kBF16 || *t == GgmlType::kQ8_0 ||
                *t == GgmlType::kQ4_0 || *t == GgmlType::kQ4_K || *t == GgmlType::kQ6_K)) {
      return InvalidArgumentError(
          fmt::format("synthetic weight type '{}' (choose f32, f16, bf16, q8_0, q4_0, q4_k, q6_k)", dtype_name));
    }
    o.dtype = *t;
  }
  if (o.num_layers < 0 || o.num_layers > 1024) return InvalidArgumentError("layer count out of range");
  return o;
}

StatusOr<Vocab> LoadVocabForSynthetic(const VocabSource& source) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(source.path));
  ASSIGN_OR_RETURN(Vocab v, LoadVocab(*file));
  auto find = [&](const std::string& text) -> int32_t {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      if (v.tokens[i] == text) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (v.types.empty()) v.types.assign(v.tokens.size(), TokenType::kNormal);
  for (const std::string& c : source.control) {
    if (find(c) >= 0) continue;
    v.tokens.push_back(c);
    v.types.push_back(TokenType::kControl);
    if (!v.scores.empty()) v.scores.push_back(0);
  }
  for (const auto& [text, id] : {std::pair{&source.bos, &v.bos_id}, std::pair{&source.eos, &v.eos_id}}) {
    if (text->empty()) continue;
    *id = find(*text);
    if (*id < 0) return InvalidArgumentError("the vocabulary has no token '" + *text + "'");
  }
  v.chat_template = source.chat_template;
  return v;
}

Vocab MakeSyntheticVocab(int size, std::span<const std::string_view> control) {
  CHECK_GE(size, 259 + static_cast<int>(control.size()));
  const int pieces_end = size - static_cast<int>(control.size());
  Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(fmt::format("<0x{:02X}>", b));
    v.types.push_back(TokenType::kByte);
  }
  const std::string space = "\xE2\x96\x81";  // U+2581
  std::vector<std::string> pieces = {space};
  for (char c = 33; c < 127; ++c) pieces.push_back(std::string(1, c));
  for (char c = 33; c < 127; ++c) pieces.push_back(space + c);
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) {
      pieces.push_back(space + a + b);
      pieces.push_back(std::string{a, b});
    }
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b)
      for (char c = 'a'; c <= 'z'; ++c) {
        pieces.push_back(space + a + b + c);
        pieces.push_back(std::string{a, b, c});
      }
  for (size_t i = 0; static_cast<int>(v.tokens.size()) < pieces_end && i < pieces.size(); ++i) {
    v.tokens.push_back(pieces[i]);
    v.types.push_back(TokenType::kNormal);
  }
  // Pad an oversized request with unused placeholder tokens.
  while (static_cast<int>(v.tokens.size()) < pieces_end) {
    v.tokens.push_back(fmt::format("<unused{}>", v.tokens.size()));
    v.types.push_back(TokenType::kUnused);
  }
  for (std::string_view c : control) {
    v.tokens.emplace_back(c);
    v.types.push_back(TokenType::kControl);
  }
  v.scores.resize(v.tokens.size(), 0.0f);
  for (size_t i = 259; i < v.tokens.size(); ++i) v.scores[i] = -static_cast<float>(i - 259) * 0.001f;
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

StatusOr<GgufWriter> MakeSyntheticGguf(const SyntheticOptions& o) {
  const SyntheticPreset& p = o.preset;
  const std::string arch(p.architecture);
  const bool gemma2 = arch == "gemma2", phi3 = arch == "phi3", qwen3 = arch == "qwen3";
  const bool tied = gemma2 || arch == "gemma";  // Gemma ties the output to the embeddings
  const int layers = o.num_layers > 0 ? o.num_layers : p.num_layers;
  const int head_dim = p.head_dim > 0 ? p.head_dim : p.dim / p.num_heads;
  const int q_dim = p.num_heads * head_dim;
  const int kv_dim = p.num_kv_heads * head_dim;
  for (int cols : {p.dim, p.ffn_dim, q_dim}) {
    if (!GgmlRowBytes(o.dtype, static_cast<uint64_t>(cols)).ok()) {
      return InvalidArgumentError(fmt::format("preset {} has rows of {} values, not a multiple of the {} block",
                                              p.name, cols, GgmlTypeName(o.dtype)));
    }
  }
  // Phi-3's chat and end tokens (llama.cpp looks them up in files named phi3).
  static constexpr std::string_view kPhi3Tokens[] = {"<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>",
                                                     "<|user|>"};
  const Vocab vocab = o.vocab ? *o.vocab
                              : MakeSyntheticVocab(p.vocab_size, phi3 ? std::span(kPhi3Tokens)
                                                                      : std::span<const std::string_view>());
  const int vocab_size = static_cast<int>(vocab.tokens.size());
  GgufWriter w;
  const auto u32 = [&](const std::string& key, int v) { w.AddUint32(arch + "." + key, static_cast<uint32_t>(v)); };
  w.AddString("general.architecture", arch);
  w.AddString("general.name", fmt::format("kvserve-synthetic-{}", p.name));
  w.AddUint32("general.file_type", o.dtype == GgmlType::kF32 ? 0 : o.dtype == GgmlType::kF16 ? 1
                                   : o.dtype == GgmlType::kQ8_0 ? 7 : o.dtype == GgmlType::kQ4_0 ? 2 : 32);
  u32("context_length", p.context_length);
  u32("embedding_length", p.dim);
  u32("block_count", layers);
  u32("feed_forward_length", p.ffn_dim);
  u32("attention.head_count", p.num_heads);
  u32("attention.head_count_kv", p.num_kv_heads);
  u32("rope.dimension_count", head_dim);
  w.AddFloat32(arch + ".rope.freq_base", 10000.0f);
  w.AddFloat32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  u32("vocab_size", vocab_size);
  if (gemma2 || head_dim * p.num_heads != p.dim) {
    u32("attention.key_length", head_dim);
    u32("attention.value_length", head_dim);
  }
  if (gemma2) {
    w.AddFloat32(arch + ".attn_logit_softcapping", 50.0f);
    w.AddFloat32(arch + ".final_logit_softcapping", 30.0f);
  }
  if (p.sliding_window > 0) u32("attention.sliding_window", p.sliding_window);
  AddVocabToGguf(vocab, &w);

  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    w.AddTensor(name, o.dtype, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)},
                RandomMatrix(name, rows, cols, o.dtype, o.seed));
  };
  auto ones = [&](const std::string& name, int64_t n) {
    w.AddTensor(name, GgmlType::kF32, {static_cast<uint64_t>(n)}, OnesVector(n));
  };
  matrix("token_embd.weight", vocab_size, p.dim);
  ones("output_norm.weight", p.dim);
  if (!tied) matrix("output.weight", vocab_size, p.dim);
  for (int l = 0; l < layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ones(b + "attn_norm.weight", p.dim);
    if (phi3) {
      matrix(b + "attn_qkv.weight", q_dim + 2 * kv_dim, p.dim);  // Q rows, then K, then V
    } else {
      matrix(b + "attn_q.weight", q_dim, p.dim);
      matrix(b + "attn_k.weight", kv_dim, p.dim);
      matrix(b + "attn_v.weight", kv_dim, p.dim);
    }
    if (qwen3) {
      for (const char* n : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
        w.AddTensor(b + n, GgmlType::kF32, {static_cast<uint64_t>(head_dim)}, AroundOneVector(b + n, head_dim, o.seed));
      }
    }
    matrix(b + "attn_output.weight", p.dim, q_dim);
    if (gemma2) ones(b + "post_attention_norm.weight", p.dim);
    ones(b + "ffn_norm.weight", p.dim);
    if (phi3) {
      matrix(b + "ffn_up.weight", 2 * p.ffn_dim, p.dim);  // gate rows, then up rows
    } else {
      matrix(b + "ffn_gate.weight", p.ffn_dim, p.dim);
      matrix(b + "ffn_up.weight", p.ffn_dim, p.dim);
    }
    matrix(b + "ffn_down.weight", p.dim, p.ffn_dim);
    if (gemma2) ones(b + "post_ffw_norm.weight", p.dim);
  }
  return w;
}

StatusOr<std::unique_ptr<GgufFile>> BuildSyntheticGguf(std::string_view spec, const ModelLoadOptions& options) {
  ASSIGN_OR_RETURN(SyntheticOptions o, ParseSyntheticSpec(spec, options));
  std::string bytes;
  {
    ASSIGN_OR_RETURN(GgufWriter w, MakeSyntheticGguf(o));
    bytes = w.Serialize();
  }
  return GgufFile::FromBytes(std::move(bytes));
}

}  // namespace kvserve
