// CudaBackend's weights on the device: the upload of a model's matrices (quantized GGUF types
// exactly as stored, float ones in the activation type, the products' parts stacked where their
// types agree) and the made-up weights of the benchmarks (CreateCudaBackendWithRandomWeights).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include "common/fp16.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_backend_impl.h"

namespace kvserve {
namespace {

GgmlType GgmlTypeOf(cuda::ActType t) {
  switch (t) {
    case cuda::ActType::kF32: return GgmlType::kF32;
    case cuda::ActType::kF16: return GgmlType::kF16;
    case cuda::ActType::kBF16: return GgmlType::kBF16;
  }
  return GgmlType::kF16;
}

// The type a file matrix has on the device: a quantized type as stored, any other the
// activation type.
GgmlType DeviceTypeOf(const WeightMatrix& m, cuda::ActType act) {
  return cuda::ReadsAsStored(m.type) ? m.type : GgmlTypeOf(act);
}

size_t DeviceBytes(const WeightMatrix& m, GgmlType type) {
  return static_cast<size_t>(m.rows) * GgmlRowBytes(type, static_cast<uint64_t>(m.cols)).value();
}

// Rows of `m` converted to the float type `type`, written to host memory at dst ([rows][cols]).
void ConvertMatrix(const WeightMatrix& m, cuda::ActType type, uint8_t* dst) {
  const size_t out_row = static_cast<size_t>(m.cols) * cuda::ActBytes(type);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(m.cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m.rows; ++r) {
      DequantizeRow(m.type, m.row(r), row.data(), m.cols);
      uint8_t* out = dst + static_cast<size_t>(r) * out_row;
      if (type == cuda::ActType::kF32) {
        std::memcpy(out, row.data(), out_row);
      } else {
        uint16_t* o = reinterpret_cast<uint16_t*>(out);
        for (int64_t c = 0; c < m.cols; ++c) {
          o[c] = type == cuda::ActType::kF16 ? F32ToF16(row[c]) : F32ToBf16(row[c]);
        }
      }
    }
  }
}

// The file matrices of one product (rows stacked) split into device matrices: consecutive
// parts of one device type share one.
std::vector<std::vector<const WeightMatrix*>> DeviceGroups(std::initializer_list<const WeightMatrix*> parts,
                                                           cuda::ActType act) {
  std::vector<std::vector<const WeightMatrix*>> groups;
  for (const WeightMatrix* m : parts) {
    if (groups.empty() || DeviceTypeOf(*groups.back().front(), act) != DeviceTypeOf(*m, act)) groups.emplace_back();
    groups.back().push_back(m);
  }
  return groups;
}

}  // namespace

Status CudaBackend::Impl::UploadWeights(const Model& model) {
  const ModelWeights& w = model.weights();
  const ModelConfig& c = config;
  const bool tied = w.output.data == w.token_embd.data;
  bool biases = false;
  for (const LayerWeights& L : w.layers) biases |= L.bq != nullptr || L.bk != nullptr || L.bv != nullptr;

  // Every product and where its device matrices go, then one region for all of them.
  struct Product {
    std::vector<std::vector<const WeightMatrix*>> groups;
    StackedMatrix* dst;
  };
  std::vector<Product> products;
  StackedMatrix embd;
  products.push_back({DeviceGroups({&w.token_embd}, act), &embd});
  if (!tied) products.push_back({DeviceGroups({&w.output}, act), &output});
  layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    CudaLayerWeights& D = layers[l];
    products.push_back({DeviceGroups({&L.wq, &L.wk, &L.wv}, act), &D.wqkv});
    products.push_back({DeviceGroups({&L.wo}, act), &D.wo});
    products.push_back({DeviceGroups({&L.w_gate, &L.w_up}, act), &D.w_gate_up});
    products.push_back({DeviceGroups({&L.w_down}, act), &D.w_down});
  }
  const size_t vec = DeviceRegion::Align(static_cast<size_t>(c.dim) * sizeof(float));
  size_t total = vec + c.num_layers * (2 * vec + (biases ? DeviceRegion::Align(qkv_dim() * sizeof(float)) : 0));
  for (const Product& p : products) {
    for (const auto& group : p.groups) {
      size_t bytes = 0;
      for (const WeightMatrix* m : group) bytes += DeviceBytes(*m, DeviceTypeOf(*m, act));
      total += DeviceRegion::Align(bytes);
    }
  }
  RETURN_IF_ERROR(weight_region.Allocate(total, "weights"));

  // A device matrix from file matrices of one device type: quantized ones copied as stored,
  // the others converted on the host first.
  std::vector<uint8_t> host;
  auto upload = [&](const std::vector<const WeightMatrix*>& group) -> StatusOr<DeviceMatrix> {
    const GgmlType type = DeviceTypeOf(*group.front(), act);
    const int cols = static_cast<int>(group.front()->cols);
    DeviceMatrix d{nullptr, type, 0, cols, GgmlRowBytes(type, static_cast<uint64_t>(cols)).value()};
    size_t bytes = 0;
    for (const WeightMatrix* m : group) bytes += DeviceBytes(*m, type);
    uint8_t* dst = static_cast<uint8_t*>(weight_region.Take(bytes));
    d.data = dst;
    for (const WeightMatrix* m : group) {
      const size_t part = DeviceBytes(*m, type);
      const uint8_t* src = m->data;
      if (type != m->type) {
        host.resize(part);
        ConvertMatrix(*m, act, host.data());
        src = host.data();
      }
      CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, part, cudaMemcpyHostToDevice));
      dst += part;
      d.rows += static_cast<int>(m->rows);
    }
    if (type != GgmlTypeOf(act)) max_quant_values = std::max<int64_t>(max_quant_values, int64_t{d.rows} * d.cols);
    return d;
  };
  for (const Product& p : products) {
    for (const auto& group : p.groups) {
      ASSIGN_OR_RETURN(DeviceMatrix d, upload(group));
      p.dst->push_back(d);
    }
  }
  token_embd = embd.front();
  if (tied) output = embd;

  auto vector = [&](const float* src, size_t n) -> StatusOr<float*> {
    float* dst = static_cast<float*>(weight_region.Take(n * sizeof(float)));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
    return dst;
  };
  ASSIGN_OR_RETURN(output_norm, vector(w.output_norm, c.dim));
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    CudaLayerWeights& D = layers[l];
    ASSIGN_OR_RETURN(D.attn_norm, vector(L.attn_norm, c.dim));
    ASSIGN_OR_RETURN(D.ffn_norm, vector(L.ffn_norm, c.dim));
    if (biases) {
      std::vector<float> b(static_cast<size_t>(qkv_dim()), 0.0f);
      if (L.bq != nullptr) std::copy_n(L.bq, q_dim(), b.begin());
      if (L.bk != nullptr) std::copy_n(L.bk, kv_dim(), b.begin() + q_dim());
      if (L.bv != nullptr) std::copy_n(L.bv, kv_dim(), b.begin() + q_dim() + kv_dim());
      ASSIGN_OR_RETURN(D.bqkv, vector(b.data(), b.size()));
    }
  }
  return OkStatus();
}

namespace {

// Normal(0, 0.02) rows quantized to `type` on the host ([rows][cols] as a file stores them),
// rows in parallel, each from a generator keyed by (seed, row).
std::vector<uint8_t> RandomQuantizedMatrix(GgmlType type, int64_t rows, int64_t cols, uint64_t seed) {
  const size_t row_bytes = GgmlRowBytes(type, static_cast<uint64_t>(cols)).value();
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
#pragma omp parallel
  {
    std::vector<float> v(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(r));
      std::normal_distribution<float> normal(0.0f, 0.02f);
      for (float& x : v) x = normal(rng);
      QuantizeRow(type, v.data(), out.data() + static_cast<size_t>(r) * row_bytes, cols);
    }
  }
  return out;
}

}  // namespace

Status CudaBackend::Impl::RandomWeights(uint64_t seed) {
  const ModelConfig& c = config;
  const GgmlType type = random_matrix_type.value_or(GgmlTypeOf(act));
  const bool quantized = cuda::ReadsAsStored(type);
  auto bytes_of = [&](int64_t rows, int64_t cols) {
    return static_cast<size_t>(rows) * GgmlRowBytes(type, static_cast<uint64_t>(cols)).value();
  };
  const int64_t dim = c.dim, ffn = c.ffn_dim, qkv = qkv_dim();
  using R = DeviceRegion;
  const size_t layer = 2 * R::Align(dim * 4) + R::Align(bytes_of(qkv, dim)) + R::Align(bytes_of(dim, c.q_dim())) +
                       R::Align(bytes_of(2 * ffn, dim)) + R::Align(bytes_of(dim, ffn));
  RETURN_IF_ERROR(weight_region.Allocate(2 * R::Align(bytes_of(c.vocab_size, dim)) + R::Align(dim * 4) +
                                             c.num_layers * layer,
                                         "weights"));
  // Float matrices are generated on the device; quantized ones on the host, once per shape
  // (every layer gets the same values: the step's work and bytes are those of a real model).
  std::map<std::pair<int64_t, int64_t>, std::vector<uint8_t>> host;
  uint64_t tensor = 0;
  constexpr float kStddev = 0.02f;
  auto matrix = [&](int64_t rows, int64_t cols) -> StatusOr<StackedMatrix> {
    void* p = weight_region.Take(bytes_of(rows, cols));
    const uint64_t key = seed * 0x9E3779B97F4A7C15ull + (++tensor) * 0xD1B54A32D192ED03ull;
    if (quantized) {
      std::vector<uint8_t>& h = host[{rows, cols}];
      if (h.empty()) h = RandomQuantizedMatrix(type, rows, cols, key);
      CUDA_RETURN_IF_ERROR(cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice));
      max_quant_values = std::max(max_quant_values, rows * cols);
    } else {
      CUDA_RETURN_IF_ERROR(cuda::LaunchFillNormal(p, act, rows * cols, key, kStddev, stream));
    }
    return StackedMatrix{DeviceMatrix{p, type, static_cast<int>(rows), static_cast<int>(cols), bytes_of(1, cols)}};
  };
  auto ones = [&](int64_t n) -> StatusOr<float*> {
    float* p = static_cast<float*>(weight_region.Take(n * sizeof(float)));
    CUDA_RETURN_IF_ERROR(cuda::LaunchFillConstant(p, n, 1.0f, stream));
    return p;
  };
  ASSIGN_OR_RETURN(StackedMatrix embd, matrix(c.vocab_size, dim));
  token_embd = embd.front();
  ASSIGN_OR_RETURN(output, matrix(c.vocab_size, dim));
  ASSIGN_OR_RETURN(output_norm, ones(dim));
  layers.resize(c.num_layers);
  for (CudaLayerWeights& D : layers) {
    ASSIGN_OR_RETURN(D.attn_norm, ones(dim));
    ASSIGN_OR_RETURN(D.ffn_norm, ones(dim));
    ASSIGN_OR_RETURN(D.wqkv, matrix(qkv, dim));
    ASSIGN_OR_RETURN(D.wo, matrix(dim, c.q_dim()));
    ASSIGN_OR_RETURN(D.w_gate_up, matrix(2 * ffn, dim));
    ASSIGN_OR_RETURN(D.w_down, matrix(dim, ffn));
  }
  return OkStatus();
}

std::string CudaBackend::Impl::DescribeWeights() const {
  std::vector<GgmlType> types;
  auto note = [&](const StackedMatrix& m) {
    for (const DeviceMatrix& p : m) {
      if (std::find(types.begin(), types.end(), p.type) == types.end()) types.push_back(p.type);
    }
  };
  note({token_embd});
  note(output);
  for (const CudaLayerWeights& L : layers) {
    for (const StackedMatrix* m : {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down}) note(*m);
  }
  std::string quant, floats;
  for (GgmlType t : types) {
    std::string& list = cuda::ReadsAsStored(t) ? quant : floats;
    list += fmt::format("{}{}", list.empty() ? "" : ", ", GgmlTypeName(t));
  }
  return (quant.empty() ? "" : quant + " as stored") + (quant.empty() || floats.empty() ? "" : "; ") + floats;
}

}  // namespace kvserve
