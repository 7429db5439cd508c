// Helpers shared by the kernel tests: random data, encoded matrices, a double-precision
// reference product and the kernel tables this CPU runs.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/model/ggml_types.h"

namespace kvserve::cpu {

inline std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct EncodedMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

inline EncodedMatrix Encode(GgmlType type, const std::vector<float>& values, int64_t rows, int64_t cols) {
  EncodedMatrix m;
  m.w.type = type;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.row_bytes = *GgmlRowBytes(type, cols);
  m.bytes.resize(m.w.row_bytes * rows);
  if (type == GgmlType::kQ5_K) {
    // No Q5_K encoder: random blocks (every byte pattern is a valid block) with small scales.
    std::mt19937 rng(static_cast<uint32_t>(values.size()));
    for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(rng());
    BlockQ5_K* blocks = reinterpret_cast<BlockQ5_K*>(m.bytes.data());
    for (size_t i = 0; i < m.bytes.size() / sizeof(BlockQ5_K); ++i) {
      blocks[i].d = F32ToF16(0.002f);
      blocks[i].dmin = F32ToF16(0.01f);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) QuantizeRow(type, &values[r * cols], &m.bytes[r * m.w.row_bytes], cols);
  }
  m.w.data = m.bytes.data();
  return m;
}

// Reference: y = x * dequant(W)^T in double.
inline std::vector<double> ReferenceMatMul(const WeightMatrix& w, const std::vector<float>& x, int tokens) {
  std::vector<double> y(static_cast<size_t>(tokens) * w.rows);
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.type, w.row(r), row.data(), w.cols);
    for (int t = 0; t < tokens; ++t) {
      double s = 0;
      for (int64_t k = 0; k < w.cols; ++k) s += static_cast<double>(row[k]) * x[t * w.cols + k];
      y[t * w.rows + r] = s;
    }
  }
  return y;
}

inline std::vector<std::string> AvailableIsas() {
  std::vector<std::string> out = {"generic"};
  for (const char* isa : {"avx2", "avx512", "avx512bf16"}) {
    if (KernelsFor(isa) != nullptr) out.push_back(isa);
  }
  return out;
}

}  // namespace kvserve::cpu
