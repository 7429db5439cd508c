// Model weights as the backends see them: views of matrices in a GGUF-compatible encoding,
// plus the Model that owns the file mapping, converted buffers, config and tokenizer.
//
// A WeightMatrix is [rows][cols] row-major with rows = output features (GGUF dims
// {cols, rows}); each row is GgmlRowBytes(type, cols) bytes. Types a backend must handle: the
// file's own, every type DequantizeRow decodes (only ModelLoadOptions::matrix_type, the CLI's
// --weight-dtype, converts at load). Vectors (norms, biases) are F32. Immutable after load;
// thread-safe for readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model/ggml_types.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

class GgufFile;

struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  size_t nbytes() const { return row_bytes * static_cast<size_t>(rows); }
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [dim]
  WeightMatrix wq;                   // [q_dim][dim]
  WeightMatrix wk;                   // [kv_dim][dim]
  WeightMatrix wv;                   // [kv_dim][dim]
  const float* bq = nullptr;         // [q_dim] or null
  const float* bk = nullptr;         // [kv_dim] or null
  const float* bv = nullptr;         // [kv_dim] or null
  const float* q_norm = nullptr;     // [head_dim] (qwen3) or null
  const float* k_norm = nullptr;     // [head_dim] (qwen3) or null
  WeightMatrix wo;                   // [dim][q_dim]
  const float* ffn_norm = nullptr;   // [dim]
  WeightMatrix w_gate;               // [ffn][dim]
  WeightMatrix w_up;                 // [ffn][dim]
  WeightMatrix w_down;               // [dim][ffn]
  const float* post_attn_norm = nullptr;  // [dim] (gemma2) or null
  const float* post_ffn_norm = nullptr;   // [dim] (gemma2) or null
};

struct ModelWeights {
  WeightMatrix token_embd;             // [vocab][dim]
  const float* output_norm = nullptr;  // [dim]
  WeightMatrix output;                 // [vocab][dim] (token_embd when tied)
  std::vector<LayerWeights> layers;
  size_t total_bytes = 0;              // bytes of all matrices and vectors as used
};

struct ModelLoadOptions {
  // Convert every matrix to this type at load (F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K);
  // nullopt: keep the file's type (the backends read every type that loads).
  std::optional<GgmlType> matrix_type;
  int num_layers_override = 0;  // synthetic presets only: 0 = the preset's count
  uint64_t seed = 1234;         // synthetic presets only
  GgmlType synthetic_type = GgmlType::kF16;  // synthetic presets only
};

class Model {
 public:
  // `spec` is a GGUF path or "synthetic:<preset>" (see synthetic.h).
  [[nodiscard]] static StatusOr<std::unique_ptr<Model>> Load(const std::string& spec,
                                                             const ModelLoadOptions& options = {});
  // Builds the model from an already opened file (takes ownership).
  [[nodiscard]] static StatusOr<std::unique_ptr<Model>> FromGguf(std::unique_ptr<GgufFile> file,
                                                                 const ModelLoadOptions& options);
  ~Model();

  const std::string& source() const { return source_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return *file_; }

 private:
  Model() = default;
  [[nodiscard]] Status BindWeights(const ModelLoadOptions& options);
  [[nodiscard]] StatusOr<WeightMatrix> BindMatrix(const std::string& name, int64_t rows, int64_t cols,
                                                  const ModelLoadOptions& options);
  [[nodiscard]] StatusOr<const float*> BindVector(const std::string& name, int64_t size, bool optional);

  std::string source_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<GgufFile> file_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;  // converted tensors
};

}  // namespace kvserve
