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
    if (!t || !(*t == GgmlType::kF32 || *t == GgmlType::kF16 || *t == GgmlType::kBF16 || *t == GgmlType::kQ8_0)) {
      return InvalidArgumentError(fmt::format("synthetic weight type '{}' (choose f32, f16, bf16, q8_0)", dtype_name));
    }
    o.dtype = *t;
  }
  if (o.num_layers < 0 || o.num_layers > 1024) return InvalidArgumentError("layer count out of range");
  return o;
}

Vocab MakeSyntheticVocab(int size) {
  CHECK_GE(size, 259);
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
  for (size_t i = 0; static_cast<int>(v.tokens.size()) < size && i < pieces.size(); ++i) {
    v.tokens.push_back(pieces[i]);
    v.types.push_back(TokenType::kNormal);
  }
  // Pad an oversized request with unused placeholder tokens.
  while (static_cast<int>(v.tokens.size()) < size) {
    v.tokens.push_back(fmt::format("<unused{}>", v.tokens.size()));
    v.types.push_back(TokenType::kUnused);
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
  const int layers = o.num_layers > 0 ? o.num_layers : p.num_layers;
  const int head_dim = p.dim / p.num_heads;
  const int kv_dim = p.num_kv_heads * head_dim;
  for (int cols : {p.dim, p.ffn_dim}) {
    if (!GgmlRowBytes(o.dtype, static_cast<uint64_t>(cols)).ok()) {
      return InvalidArgumentError(fmt::format("preset {} has rows of {} values, not a multiple of the {} block",
                                              p.name, cols, GgmlTypeName(o.dtype)));
    }
  }
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("general.name", fmt::format("kvserve-synthetic-{}", p.name));
  w.AddUint32("general.file_type", o.dtype == GgmlType::kF32 ? 0 : o.dtype == GgmlType::kF16 ? 1
                                   : o.dtype == GgmlType::kQ8_0 ? 7 : 32);
  w.AddUint32("llama.context_length", static_cast<uint32_t>(p.context_length));
  w.AddUint32("llama.embedding_length", static_cast<uint32_t>(p.dim));
  w.AddUint32("llama.block_count", static_cast<uint32_t>(layers));
  w.AddUint32("llama.feed_forward_length", static_cast<uint32_t>(p.ffn_dim));
  w.AddUint32("llama.attention.head_count", static_cast<uint32_t>(p.num_heads));
  w.AddUint32("llama.attention.head_count_kv", static_cast<uint32_t>(p.num_kv_heads));
  w.AddUint32("llama.rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.AddFloat32("llama.rope.freq_base", 10000.0f);
  w.AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddUint32("llama.vocab_size", static_cast<uint32_t>(p.vocab_size));
  AddVocabToGguf(MakeSyntheticVocab(p.vocab_size), &w);

  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    w.AddTensor(name, o.dtype, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)},
                RandomMatrix(name, rows, cols, o.dtype, o.seed));
  };
  auto ones = [&](const std::string& name, int64_t n) {
    w.AddTensor(name, GgmlType::kF32, {static_cast<uint64_t>(n)}, OnesVector(n));
  };
  matrix("token_embd.weight", p.vocab_size, p.dim);
  ones("output_norm.weight", p.dim);
  matrix("output.weight", p.vocab_size, p.dim);
  for (int l = 0; l < layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ones(b + "attn_norm.weight", p.dim);
    matrix(b + "attn_q.weight", p.dim, p.dim);
    matrix(b + "attn_k.weight", kv_dim, p.dim);
    matrix(b + "attn_v.weight", kv_dim, p.dim);
    matrix(b + "attn_output.weight", p.dim, p.dim);
    ones(b + "ffn_norm.weight", p.dim);
    matrix(b + "ffn_gate.weight", p.ffn_dim, p.dim);
    matrix(b + "ffn_up.weight", p.ffn_dim, p.dim);
    matrix(b + "ffn_down.weight", p.dim, p.ffn_dim);
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
