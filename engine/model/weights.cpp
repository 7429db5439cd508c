#include "engine/model/weights.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "common/log.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "engine/model/synthetic.h"

namespace kvserve {
namespace {

// Types QuantizeRow writes: what --weight-dtype converts to.
bool Writable(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16 || t == GgmlType::kQ8_0 ||
         t == GgmlType::kQ4_0 || t == GgmlType::kQ4_K || t == GgmlType::kQ6_K;
}

// Rows [first, first + count) of `m`, sharing its bytes (a fused tensor's parts).
WeightMatrix RowsOf(const WeightMatrix& m, int64_t first, int64_t count) {
  WeightMatrix part = m;
  part.rows = count;
  part.data = m.row(first);
  return part;
}

}  // namespace

Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& spec, const ModelLoadOptions& options) {
  std::unique_ptr<GgufFile> file;
  if (IsSyntheticSpec(spec)) {
    ASSIGN_OR_RETURN(file, BuildSyntheticGguf(spec, options));
  } else {
    ASSIGN_OR_RETURN(file, GgufFile::Open(spec));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, FromGguf(std::move(file), options));
  model->source_ = spec;
  return model;
}

StatusOr<std::unique_ptr<Model>> Model::FromGguf(std::unique_ptr<GgufFile> file,
                                                 const ModelLoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  model->file_ = std::move(file);
  ASSIGN_OR_RETURN(model->config_, ReadModelConfig(*model->file_));
  ASSIGN_OR_RETURN(Vocab vocab, LoadVocab(*model->file_));
  if (static_cast<int>(vocab.tokens.size()) != model->config_.vocab_size) {
    return InvalidArgumentError(fmt::format("tokenizer has {} tokens but the model's vocabulary is {}",
                                            vocab.tokens.size(), model->config_.vocab_size));
  }
  ASSIGN_OR_RETURN(model->tokenizer_, Tokenizer::Create(std::move(vocab)));
  RETURN_IF_ERROR(model->BindWeights(options));
  return model;
}

StatusOr<WeightMatrix> Model::BindMatrix(const std::string& name, int64_t rows, int64_t cols,
                                         const ModelLoadOptions& options) {
  const GgufTensorInfo* t = file_->FindTensor(name);
  if (t == nullptr) return InvalidArgumentError("missing tensor '" + name + "'");
  if (t->dims.size() != 2 || static_cast<int64_t>(t->dims[0]) != cols ||
      static_cast<int64_t>(t->dims[1]) != rows) {
    std::string dims;
    for (uint64_t d : t->dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    return InvalidArgumentError(fmt::format("tensor '{}' has dims [{}], expected [{}, {}]", name,
                                            dims, cols, rows));
  }
  std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(static_cast<uint32_t>(t->type));
  if (!info || !info->can_dequantize) {
    return UnimplementedError(fmt::format("tensor '{}' has type {} which kvserve cannot load "
                                          "(supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, "
                                          "iq4_nl, iq4_xs)",
                                          name, GgmlTypeName(t->type)));
  }
  // The backends read every type that loads as stored (CPU: engine/backend/cpu/kernels.h).
  const GgmlType target = options.matrix_type.value_or(t->type);
  WeightMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.type = target;
  ASSIGN_OR_RETURN(m.row_bytes, GgmlRowBytes(target, static_cast<uint64_t>(cols)));
  if (target == t->type) {
    m.data = t->data;
    return m;
  }
  if (!Writable(target)) {
    return InvalidArgumentError(fmt::format("cannot convert weights to {}", GgmlTypeName(target)));
  }
  // Convert row by row through f32.
  auto buffer = std::make_unique<uint8_t[]>(m.nbytes());
  const size_t src_row_bytes = t->nbytes / static_cast<size_t>(rows);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t->type, t->data + static_cast<size_t>(r) * src_row_bytes, row.data(), cols);
    QuantizeRow(target, row.data(), buffer.get() + static_cast<size_t>(r) * m.row_bytes, cols);
  }
  m.data = buffer.get();
  owned_.push_back(std::move(buffer));
  return m;
}

StatusOr<const float*> Model::BindVector(const std::string& name, int64_t size, bool optional) {
  const GgufTensorInfo* t = file_->FindTensor(name);
  if (t == nullptr) {
    if (optional) return static_cast<const float*>(nullptr);
    return InvalidArgumentError("missing tensor '" + name + "'");
  }
  if (static_cast<int64_t>(t->num_elements) != size) {
    return InvalidArgumentError(fmt::format("tensor '{}' has {} elements, expected {}", name,
                                            t->num_elements, size));
  }
  std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(static_cast<uint32_t>(t->type));
  if (!info || !info->can_dequantize) {
    return UnimplementedError("tensor '" + name + "' has an unsupported type");
  }
  if (t->type == GgmlType::kF32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(t->data);
  }
  auto buffer = std::make_unique<uint8_t[]>(static_cast<size_t>(size) * sizeof(float));
  float* out = reinterpret_cast<float*>(buffer.get());
  DequantizeRow(t->type, t->data, out, size);
  owned_.push_back(std::move(buffer));
  return static_cast<const float*>(out);
}

Status Model::BindWeights(const ModelLoadOptions& options) {
  const ModelConfig& c = config_;
  ModelWeights& w = weights_;
  // Embeddings are looked up row by row; keep the file's encoding unless it is one the
  // backends cannot read.
  ModelLoadOptions embd_options = options;
  embd_options.matrix_type.reset();
  ASSIGN_OR_RETURN(w.token_embd, BindMatrix("token_embd.weight", c.vocab_size, c.dim, embd_options));
  ASSIGN_OR_RETURN(w.output_norm, BindVector("output_norm.weight", c.dim, false));
  if (c.tied_output) {
    w.output = w.token_embd;
  } else {
    ASSIGN_OR_RETURN(w.output, BindMatrix("output.weight", c.vocab_size, c.dim, options));
  }
  w.layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& L = w.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    ASSIGN_OR_RETURN(L.attn_norm, BindVector(p + "attn_norm.weight", c.dim, false));
    const bool fused = c.architecture == "phi3";  // attn_qkv: Q, K, V rows; ffn_up: gate, up rows
    if (fused) {
      ASSIGN_OR_RETURN(WeightMatrix qkv, BindMatrix(p + "attn_qkv.weight", c.q_dim() + 2 * c.kv_dim(), c.dim, options));
      L.wq = RowsOf(qkv, 0, c.q_dim());
      L.wk = RowsOf(qkv, c.q_dim(), c.kv_dim());
      L.wv = RowsOf(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
    } else {
      ASSIGN_OR_RETURN(L.wq, BindMatrix(p + "attn_q.weight", c.q_dim(), c.dim, options));
      ASSIGN_OR_RETURN(L.wk, BindMatrix(p + "attn_k.weight", c.kv_dim(), c.dim, options));
      ASSIGN_OR_RETURN(L.wv, BindMatrix(p + "attn_v.weight", c.kv_dim(), c.dim, options));
    }
    ASSIGN_OR_RETURN(L.bq, BindVector(p + "attn_q.bias", c.q_dim(), true));
    ASSIGN_OR_RETURN(L.bk, BindVector(p + "attn_k.bias", c.kv_dim(), true));
    ASSIGN_OR_RETURN(L.bv, BindVector(p + "attn_v.bias", c.kv_dim(), true));
    if (c.qk_norm) {
      ASSIGN_OR_RETURN(L.q_norm, BindVector(p + "attn_q_norm.weight", c.head_dim, false));
      ASSIGN_OR_RETURN(L.k_norm, BindVector(p + "attn_k_norm.weight", c.head_dim, false));
    }
    ASSIGN_OR_RETURN(L.wo, BindMatrix(p + "attn_output.weight", c.dim, c.q_dim(), options));
    ASSIGN_OR_RETURN(L.ffn_norm, BindVector(p + "ffn_norm.weight", c.dim, false));
    if (fused) {
      ASSIGN_OR_RETURN(WeightMatrix gate_up, BindMatrix(p + "ffn_up.weight", 2 * c.ffn_dim, c.dim, options));
      L.w_gate = RowsOf(gate_up, 0, c.ffn_dim);
      L.w_up = RowsOf(gate_up, c.ffn_dim, c.ffn_dim);
    } else {
      ASSIGN_OR_RETURN(L.w_gate, BindMatrix(p + "ffn_gate.weight", c.ffn_dim, c.dim, options));
      ASSIGN_OR_RETURN(L.w_up, BindMatrix(p + "ffn_up.weight", c.ffn_dim, c.dim, options));
    }
    ASSIGN_OR_RETURN(L.w_down, BindMatrix(p + "ffn_down.weight", c.dim, c.ffn_dim, options));
    if (c.post_norms) {
      ASSIGN_OR_RETURN(L.post_attn_norm, BindVector(p + "post_attention_norm.weight", c.dim, false));
      ASSIGN_OR_RETURN(L.post_ffn_norm, BindVector(p + "post_ffw_norm.weight", c.dim, false));
    }
  }
  size_t total = w.token_embd.nbytes() + (c.tied_output ? 0 : w.output.nbytes()) + c.dim * 4;
  for (const LayerWeights& L : w.layers) {
    total += L.wq.nbytes() + L.wk.nbytes() + L.wv.nbytes() + L.wo.nbytes() + L.w_gate.nbytes() +
             L.w_up.nbytes() + L.w_down.nbytes() + (c.post_norms ? 4 : 2) * c.dim * 4 +
             (c.qk_norm ? 2 * c.head_dim * 4 : 0);
  }
  w.total_bytes = total;
  return OkStatus();
}

}  // namespace kvserve
