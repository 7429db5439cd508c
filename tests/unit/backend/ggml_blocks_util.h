// Test data for the GGUF block decoders of the CUDA backend (tests/unit/backend/ggml_dequant_test.cpp
// on the host, tests/gpu/cuda_quant_test.cpp on the device): the quantized types the CUDA
// kernels read as stored, and rows of random blocks of them.
#pragma once

#include <cstdint>
#include <ostream>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "engine/model/ggml_types.h"

namespace kvserve::testing {

struct QuantCase {
  GgmlType type;
  std::vector<int> f16_fields;  // byte offsets of the block's f16 scales
};

inline void PrintTo(const QuantCase& c, std::ostream* os) { *os << GgmlTypeName(c.type); }

inline const std::vector<QuantCase>& QuantCases() {
  static const std::vector<QuantCase> cases = {
      {GgmlType::kQ8_0, {0}},    {GgmlType::kQ4_0, {0}},   {GgmlType::kQ4_1, {0, 2}}, {GgmlType::kQ5_0, {0}},
      {GgmlType::kQ5_1, {0, 2}}, {GgmlType::kIQ4_NL, {0}}, {GgmlType::kQ2_K, {80, 82}}, {GgmlType::kQ3_K, {108}},
      {GgmlType::kQ4_K, {0, 2}}, {GgmlType::kQ5_K, {0, 2}}, {GgmlType::kQ6_K, {208}},  {GgmlType::kIQ4_XS, {0}}};
  return cases;
}

// Rows of random bytes whose f16 scales are finite numbers of either sign (normal(0, 0.05),
// every seventh block's 1e-4 times smaller, down to subnormals): every quant bit pattern and
// scale code occurs.
inline std::vector<uint8_t> RandomQuantRows(const QuantCase& c, int64_t rows, int64_t cols, uint32_t seed) {
  const GgmlTypeInfo info = *GetGgmlTypeInfo(static_cast<uint32_t>(c.type));
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / info.block_values * info.block_bytes));
  std::mt19937 rng(seed);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::normal_distribution<float> scale(0.0f, 0.05f);
  for (size_t block = 0; block < bytes.size(); block += info.block_bytes) {
    for (int off : c.f16_fields) {
      const float s = (block / info.block_bytes) % 7 == 3 ? scale(rng) * 1e-4f : scale(rng);
      const uint16_t h = F32ToF16(s);
      bytes[block + off] = static_cast<uint8_t>(h & 0xFF);
      bytes[block + off + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  return bytes;
}

}  // namespace kvserve::testing
