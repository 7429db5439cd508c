// The read-only ggml decoders (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS) against ggml's
// own: tests/data/ggml_blocks/ holds rows that ggml quantized (random normal rows at three
// scales, one skewed, 1 % outliers) and what ggml's decoders made of them (make_vectors.c,
// llama.cpp c392e509). kvserve's decoders must give the same floats: each value is one or two
// float operations on the same operands, so the only allowed difference is a fused
// multiply-add on one side, at most 2^-22 of the row's largest magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/model/ggml_types.h"

namespace kvserve {
namespace ggml_decoders_test {

constexpr int kRows = 3;
constexpr int kCols = 512;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Case {
  GgmlType type;
  const char* file;  // ggml's type name
};

class GgmlDecoders : public ::testing::TestWithParam<Case> {};

TEST_P(GgmlDecoders, MatchGgmlsOwnDecoder) {
  const Case c = GetParam();
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/tests/data/ggml_blocks/";
  const std::string blocks = ReadFile(dir + c.file + ".blocks");
  const std::string expected_bytes = ReadFile(dir + c.file + ".f32");
  const uint64_t row_bytes = GgmlRowBytes(c.type, kCols).value();
  ASSERT_EQ(blocks.size(), kRows * row_bytes) << c.file;
  ASSERT_EQ(expected_bytes.size(), sizeof(float) * kRows * kCols) << c.file;
  std::vector<float> expected(kRows * kCols);
  std::memcpy(expected.data(), expected_bytes.data(), expected_bytes.size());
  for (int r = 0; r < kRows; ++r) {
    std::vector<float> got(kCols);
    DequantizeRow(c.type, blocks.data() + r * row_bytes, got.data(), kCols);
    const auto row = std::span(expected).subspan(r * kCols, kCols);
    float amax = 0;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    ASSERT_GT(amax, 0);
    int exact = 0;
    for (int i = 0; i < kCols; ++i) {
      ASSERT_NEAR(got[i], row[i], std::ldexp(amax, -22)) << c.file << " row " << r << " value " << i;
      exact += got[i] == row[i];
    }
    EXPECT_GE(exact, kCols * 9 / 10) << c.file << " row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(ReadOnlyTypes, GgmlDecoders,
                         ::testing::Values(Case{GgmlType::kQ4_1, "q4_1"}, Case{GgmlType::kQ5_0, "q5_0"},
                                           Case{GgmlType::kQ5_1, "q5_1"}, Case{GgmlType::kQ2_K, "q2_K"},
                                           Case{GgmlType::kQ3_K, "q3_K"}, Case{GgmlType::kIQ4_NL, "iq4_nl"},
                                           Case{GgmlType::kIQ4_XS, "iq4_xs"}),
                         [](const auto& info) { return std::string(info.param.file); });

TEST(GgmlDecoders, TypeTableKnowsTheReadOnlyTypes) {
  EXPECT_EQ(GetGgmlTypeInfo(20)->name, "iq4_nl");
  EXPECT_EQ(GgmlRowBytes(GgmlType::kIQ4_XS, 256).value(), 136u);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kQ3_K, 256).value(), 110u);
  EXPECT_TRUE(GetGgmlTypeInfo(static_cast<uint32_t>(GgmlType::kQ2_K))->can_dequantize);
  EXPECT_FALSE(GetGgmlTypeInfo(static_cast<uint32_t>(GgmlType::kQ8_K))->can_dequantize);
  EXPECT_FALSE(ParseGgmlType("q5_0").has_value());  // read, never written
}

}  // namespace ggml_decoders_test
}  // namespace kvserve
