// The kernels that read GGUF weights as stored (cuda_quant.cu) against the CPU reference
// DequantizeRow, for every quantized type the CUDA backend keeps on the device:
//   dequantize (to F32)   bit for bit (the same float operations, none fused);
//   dequantize (F16/BF16) the reference value rounded to nearest even, bit for bit;
//   embedding             bit for bit;
//   matrix-vector         against a double-precision dot product of the decoded weights and the
//                         activations as the device holds them (rounded to the activation type).
//                         The kernel sums in F32, per group of eight scale * sum(q x) + offset *
//                         sum(x) (8 + 8 roundings), per lane cols / 256 groups, then 5 shuffle
//                         additions and the accumulation: its error is at most about
//                         (cols / 128 + 22) * 2^-24 * M, M = sum over values of
//                         (|scale q| + |offset|) |x| (the terms it adds, which may cancel); the
//                         bound used is 1e-5 * M (cols = 1024: over 5x that).
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/ggml_dequant.h"
#include "engine/model/ggml_types.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/unit/backend/ggml_blocks_util.h"

namespace kvserve {
namespace cuda_quant_test {

using cuda::ActType;
using testing::ActName;
using testing::DecodeAct;
using testing::DeviceBuffer;
using testing::EncodeAct;
using testing::QuantCase;
using testing::RandomNormal;

constexpr ActType kActTypes[] = {ActType::kF32, ActType::kF16, ActType::kBF16};

struct Matrix {
  int rows = 0, cols = 0;
  std::vector<uint8_t> bytes;  // as stored
  std::vector<float> values;   // DequantizeRow of every row
  std::vector<double> terms;   // |scale q| + |offset| of every value (the integer form's terms)
};

Matrix RandomMatrix(const QuantCase& c, int rows, int cols, uint32_t seed) {
  Matrix m{rows, cols, testing::RandomQuantRows(c, rows, cols, seed), {}, {}};
  const uint64_t row_bytes = GgmlRowBytes(c.type, cols).value();
  m.values.resize(static_cast<size_t>(rows) * cols);
  m.terms.resize(m.values.size());
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = m.bytes.data() + r * row_bytes;
    DequantizeRow(c.type, row, &m.values[static_cast<size_t>(r) * cols], cols);
    EXPECT_TRUE(cuda::VisitQuantType(c.type, [&](auto tag) {
      for (int g = 0; g < cols / 8; ++g) {
        const cuda::Group8 q = cuda::IntGroup8<decltype(tag)::kType>(row, g);
        for (int k = 0; k < 8; ++k) {
          m.terms[static_cast<size_t>(r) * cols + 8 * g + k] =
              std::fabs(double(q.scale) * q.q[k]) + std::fabs(double(q.offset));
        }
      }
    }));
  }
  return m;
}

class CudaQuant : public ::testing::TestWithParam<QuantCase> {};

TEST_P(CudaQuant, DequantizeGivesTheReferenceValues) {
  REQUIRE_CUDA_DEVICE();
  const QuantCase& c = GetParam();
  const Matrix m = RandomMatrix(c, 5, 768, 11);
  DeviceBuffer<uint8_t> w(m.bytes);
  for (ActType t : kActTypes) {
    DeviceBuffer<uint8_t> out(m.values.size() * cuda::ActBytes(t));
    ASSERT_CUDA_OK(cuda::LaunchDequantize(c.type, w.get(), m.rows, m.cols, out.get(), t, nullptr));
    const std::vector<uint8_t> got = out.Download();
    const std::vector<uint8_t> want = EncodeAct(m.values, t);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < m.values.size(); ++i) {
      const size_t e = cuda::ActBytes(t);
      ASSERT_EQ(std::memcmp(&got[i * e], &want[i * e], e), 0)
          << ActName(t) << " value " << i << " (reference " << m.values[i] << ")";
    }
  }
}

TEST_P(CudaQuant, EmbeddingDecodesTheTokensRows) {
  REQUIRE_CUDA_DEVICE();
  const QuantCase& c = GetParam();
  const int vocab = 40, dim = 512;
  const Matrix table = RandomMatrix(c, vocab, dim, 12);
  const std::vector<int32_t> tokens = {7, 0, 39, 7, 21};
  DeviceBuffer<uint8_t> d_table(table.bytes);
  DeviceBuffer<int32_t> d_tokens(tokens);
  DeviceBuffer<float> x(tokens.size() * dim);
  ASSERT_CUDA_OK(cuda::LaunchQuantEmbedding(c.type, d_table.get(), d_tokens.get(), static_cast<int>(tokens.size()),
                                            dim, x.get(), nullptr));
  const std::vector<float> got = x.Download();
  for (size_t t = 0; t < tokens.size(); ++t) {
    ASSERT_EQ(std::memcmp(&got[t * dim], &table.values[static_cast<size_t>(tokens[t]) * dim], dim * sizeof(float)), 0)
        << "token " << t;
  }
}

// y = W x for 1, 3, 8 (one pass) and 13 (two passes) tokens, into columns [5, 5 + rows) of a
// wider output (as a part of a stacked product writes), with and without accumulation.
TEST_P(CudaQuant, MatVecMatchesTheDecodedProduct) {
  REQUIRE_CUDA_DEVICE();
  const QuantCase& c = GetParam();
  const int rows = 37, cols = 1024, ldy = rows + 9, offset = 5;  // 37: not a multiple of the CTA's 4 rows
  const Matrix m = RandomMatrix(c, rows, cols, 13);
  DeviceBuffer<uint8_t> w(m.bytes);
  for (ActType t : kActTypes) {
    for (int num_tokens : {1, 3, 8, 13}) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(::testing::Message() << ActName(t) << ", " << num_tokens << " tokens"
                                          << (accumulate ? ", accumulating" : ""));
        const std::vector<uint8_t> x_bytes = EncodeAct(RandomNormal(static_cast<size_t>(num_tokens) * cols, 14), t);
        const std::vector<float> x = DecodeAct(x_bytes, t);
        const std::vector<float> y0 = RandomNormal(static_cast<size_t>(num_tokens) * ldy, 15);
        DeviceBuffer<uint8_t> d_x(x_bytes);
        DeviceBuffer<float> d_y(y0);
        cuda::QuantMatVecArgs a;
        a.type = c.type;
        a.w = w.get();
        a.rows = rows;
        a.cols = cols;
        a.x = d_x.get();
        a.x_type = t;
        a.ldx = cols;
        a.num_tokens = num_tokens;
        a.y = d_y.get() + offset;
        a.ldy = ldy;
        a.accumulate = accumulate;
        ASSERT_CUDA_OK(cuda::LaunchQuantMatVec(a, nullptr));
        const std::vector<float> y = d_y.Download();
        for (int k = 0; k < num_tokens; ++k) {
          for (int j = 0; j < ldy; ++j) {
            const float got = y[static_cast<size_t>(k) * ldy + j];
            const float before = y0[static_cast<size_t>(k) * ldy + j];
            const int r = j - offset;
            if (r < 0 || r >= rows) {
              ASSERT_EQ(got, before) << "column " << j << " is outside the matrix's rows";
              continue;
            }
            double dot = 0, mag = 0;
            for (int i = 0; i < cols; ++i) {
              const double xi = x[static_cast<size_t>(k) * cols + i];
              dot += double(m.values[static_cast<size_t>(r) * cols + i]) * xi;
              mag += m.terms[static_cast<size_t>(r) * cols + i] * std::fabs(xi);
            }
            if (accumulate) dot += before, mag += std::fabs(before);
            ASSERT_NEAR(got, dot, 1e-5 * mag + 1e-30) << "token " << k << " row " << r;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(QuantTypes, CudaQuant, ::testing::ValuesIn(testing::QuantCases()),
                         [](const auto& info) { return std::string(GgmlTypeName(info.param.type)); });

TEST(CudaQuant, RefusesWhatTheKernelsCannotRead) {
  REQUIRE_CUDA_DEVICE();
  EXPECT_FALSE(cuda::ReadsAsStored(GgmlType::kF16));
  EXPECT_FALSE(cuda::ReadsAsStored(GgmlType::kQ8_K));
  EXPECT_TRUE(cuda::ReadsAsStored(GgmlType::kIQ4_XS));
  DeviceBuffer<uint8_t> w(4096);
  DeviceBuffer<uint8_t> x(4096);
  DeviceBuffer<float> y(64);
  cuda::QuantMatVecArgs a;
  a.type = GgmlType::kQ4_K;
  a.w = w.get();
  a.rows = 1;
  a.cols = 128;  // half a Q4_K super-block
  a.x = x.get();
  a.ldx = 128;
  a.num_tokens = 1;
  a.y = y.get();
  a.ldy = 1;
  EXPECT_EQ(cuda::LaunchQuantMatVec(a, nullptr), cudaErrorInvalidValue);
  a.type = GgmlType::kF16;
  a.cols = 256;
  EXPECT_EQ(cuda::LaunchQuantMatVec(a, nullptr), cudaErrorInvalidValue);
  a.type = GgmlType::kQ8_0;
  a.x = x.get() + 2;  // activations must start 16-byte aligned
  EXPECT_EQ(cuda::LaunchQuantMatVec(a, nullptr), cudaErrorMisalignedAddress);
  EXPECT_EQ(cuda::LaunchDequantize(GgmlType::kQ6_K, w.get(), 1, 100, y.get(), ActType::kF32, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace cuda_quant_test
}  // namespace kvserve
