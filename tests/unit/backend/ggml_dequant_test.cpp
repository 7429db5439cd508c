// The CUDA kernels' block decoders (engine/backend/cuda/ggml_dequant.h), compiled for the host,
// against the CPU reference DequantizeRow for every type the CUDA backend reads as stored. They
// must agree bit for bit: the same float operations in the same order, none fused. Runs
// everywhere (no GPU needed); tests/gpu/cuda_quant_test.cpp checks the device side.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cuda/ggml_dequant.h"
#include "engine/model/ggml_decoders.h"
#include "engine/model/ggml_types.h"
#include "tests/unit/backend/ggml_blocks_util.h"

namespace kvserve {
namespace ggml_dequant_test {

using testing::QuantCase;

std::vector<float> DecodeWithHeader(GgmlType type, const uint8_t* row, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(cols));
  const bool known = cuda::VisitQuantType(type, [&](auto tag) {
    for (int64_t g = 0; g < cols / 8; ++g) cuda::DecodeGroup8<decltype(tag)::kType>(row, g, &out[8 * g]);
  });
  EXPECT_TRUE(known) << GgmlTypeName(type);
  return out;
}

class GgmlDequantHeader : public ::testing::TestWithParam<QuantCase> {};

TEST_P(GgmlDequantHeader, DecodesEveryGroupAsDequantizeRowBitForBit) {
  const QuantCase& c = GetParam();
  constexpr int64_t kRows = 3, kCols = 1024;  // four super-blocks, 32 small blocks
  const std::vector<uint8_t> bytes = testing::RandomQuantRows(c, kRows, kCols, 17 + static_cast<uint32_t>(c.type));
  const uint64_t row_bytes = GgmlRowBytes(c.type, kCols).value();
  int64_t nonzero = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    const uint8_t* row = bytes.data() + r * row_bytes;
    std::vector<float> want(kCols);
    DequantizeRow(c.type, row, want.data(), kCols);
    const std::vector<float> got = DecodeWithHeader(c.type, row, kCols);
    for (int64_t i = 0; i < kCols; ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
          << GgmlTypeName(c.type) << " row " << r << " value " << i << ": " << got[i] << " vs " << want[i];
      nonzero += want[i] != 0.0f;
    }
  }
  EXPECT_GT(nonzero, kRows * kCols / 2) << "the rows should be mostly non-zero values";
}

// Rows real encoders made: kvserve's QuantizeRow for the types it writes, ggml's own for the
// read-only ones (tests/data/ggml_blocks, 3 rows of 512 values). Q5_K has neither here (random
// blocks above; ggml-made ones in the GPU refmodel test).
class GgmlDequantEncoded : public ::testing::TestWithParam<QuantCase> {};

TEST_P(GgmlDequantEncoded, AgreesOnRowsAnEncoderMade) {
  const QuantCase& c = GetParam();
  constexpr int64_t kCols = 512;
  const uint64_t row_bytes = GgmlRowBytes(c.type, kCols).value();
  std::vector<uint8_t> rows;
  if (ParseGgmlType(GgmlTypeName(c.type))) {
    std::vector<float> src(kCols);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& v : src) v = normal(rng);
    rows.resize(row_bytes);
    QuantizeRow(c.type, src.data(), rows.data(), kCols);
  } else {
    // ggml's file names spell the K types with a capital K.
    std::string name(GgmlTypeName(c.type));
    if (name.back() == 'k') name.back() = 'K';
    std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/ggml_blocks/" + name + ".blocks", std::ios::binary);
    rows.assign(std::istreambuf_iterator<char>(in), {});
    ASSERT_EQ(rows.size(), 3 * row_bytes) << name;
  }
  for (size_t at = 0; at < rows.size(); at += row_bytes) {
    std::vector<float> want(kCols);
    DequantizeRow(c.type, rows.data() + at, want.data(), kCols);
    EXPECT_EQ(DecodeWithHeader(c.type, rows.data() + at, kCols), want) << GgmlTypeName(c.type);
  }
}

std::string CaseName(const ::testing::TestParamInfo<QuantCase>& info) {
  return std::string(GgmlTypeName(info.param.type));
}
INSTANTIATE_TEST_SUITE_P(QuantTypes, GgmlDequantHeader, ::testing::ValuesIn(testing::QuantCases()), CaseName);

std::vector<QuantCase> EncodedCases() {
  std::vector<QuantCase> cases;
  for (const QuantCase& c : testing::QuantCases()) {
    if (c.type != GgmlType::kQ5_K) cases.push_back(c);
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(QuantTypes, GgmlDequantEncoded, ::testing::ValuesIn(EncodedCases()), CaseName);

TEST(GgmlDequantHeader, CodebookIsTheIq4One) {
  for (int i = 0; i < 16; ++i) EXPECT_EQ(cuda::Iq4Value(i), kIq4Values[i]) << i;
}

TEST(GgmlDequantHeader, FloatTypesAreNotQuantTypes) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_K}) {
    EXPECT_FALSE(cuda::VisitQuantType(t, [](auto) {})) << GgmlTypeName(t);
  }
}

}  // namespace ggml_dequant_test
}  // namespace kvserve
