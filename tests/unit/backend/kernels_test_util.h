// Helpers shared by the kernel tests: random data, encoded matrices, a double-precision
// reference product and the kernel tables this CPU runs.
#pragma once

#include <cstdint>
#include <cstring>
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
  // Types without an encoder: random blocks (every byte pattern is a valid block) whose f16
  // scale fields are set so that values stay within a few units.
  struct ScaleFields {
    GgmlType type;
    int offset[2];  // byte offsets of f16 fields in a block (-1: none)
    float value[2];
  };
  static constexpr ScaleFields kFields[] = {
      {GgmlType::kQ5_K, {0, 2}, {0.002f, 0.01f}},  {GgmlType::kQ4_1, {0, 2}, {0.1f, -0.75f}},
      {GgmlType::kQ5_0, {0, -1}, {0.05f, 0}},      {GgmlType::kQ5_1, {0, 2}, {0.05f, -0.8f}},
      {GgmlType::kQ2_K, {80, 82}, {0.05f, 0.05f}}, {GgmlType::kQ3_K, {108, -1}, {0.01f, 0}},
      {GgmlType::kIQ4_NL, {0, -1}, {0.008f, 0}},   {GgmlType::kIQ4_XS, {0, -1}, {0.0005f, 0}},
  };
  const ScaleFields* fields = nullptr;
  for (const ScaleFields& f : kFields) fields = f.type == type ? &f : fields;
  if (fields != nullptr) {
    std::mt19937 rng(static_cast<uint32_t>(values.size()));
    for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(rng());
    const size_t block_bytes = GetGgmlTypeInfo(static_cast<uint32_t>(type))->block_bytes;
    for (size_t i = 0; i < m.bytes.size(); i += block_bytes) {
      for (int f = 0; f < 2; ++f) {
        if (fields->offset[f] < 0) continue;
        const uint16_t h = F32ToF16(fields->value[f]);
        std::memcpy(&m.bytes[i + fields->offset[f]], &h, 2);
      }
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

// Every weight type the kernels read.
inline constexpr GgmlType kAllWeightTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
    GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ2_K, GgmlType::kQ3_K,
    GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS};

inline std::vector<std::string> AvailableIsas() {
  std::vector<std::string> out = {"generic"};
  for (const char* isa : {"avx2", "avxvnni", "avx512", "avx512bf16"}) {
    if (KernelsFor(isa) != nullptr) out.push_back(isa);
  }
  return out;
}

}  // namespace kvserve::cpu
