#include "cache/kv_spec.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace kv_spec_test {

KvSpec MakeSpec(KvDtype dtype, int layers, int kv_heads, int head_dim, int block = 16) {
  KvSpecConfig c;
  c.num_layers = layers;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.block_size = block;
  c.dtype = dtype;
  auto s = KvSpec::Create(c);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

TEST(KvSpec, F16BlockBytesAndOffsets) {
  // 150m shape: 8 layers, 8 kv heads, head dim 64.
  const KvSpec s = MakeSpec(KvDtype::kF16, 8, 8, 64);
  EXPECT_EQ(s.row_bytes(0, 0), 128u);
  EXPECT_EQ(s.block_bytes(), 8u * 2 * 8 * 16 * 128);  // 262144
  EXPECT_EQ(s.segment_offset(0, 0, 0), 0u);
  EXPECT_EQ(s.segment_offset(0, 0, 1), 2048u);
  EXPECT_EQ(s.segment_offset(0, 1, 0), 8u * 2048);
  EXPECT_EQ(s.segment_offset(1, 0, 0), 16u * 2048);
  EXPECT_DOUBLE_EQ(s.bytes_per_token(), 16384.0);
  EXPECT_EQ(s.bytes_for_tokens(17), 2 * s.block_bytes());
}

TEST(KvSpec, QuantizedSizesIncludeScales) {
  const KvSpec f16 = MakeSpec(KvDtype::kF16, 8, 8, 128);
  const KvSpec i8 = MakeSpec(KvDtype::kInt8, 8, 8, 128);
  const KvSpec i4 = MakeSpec(KvDtype::kInt4, 8, 8, 128);
  // INT8 row: 128 bytes + an f16 scale and bias (group 128) => 132 / 256.
  EXPECT_EQ(i8.group_size(), 128);
  EXPECT_EQ(i8.params_per_row(), 2);
  EXPECT_EQ(i8.block_bytes(), 8u * 2 * 8 * (16 * 128 + 16 * 4));
  EXPECT_LE(i8.bytes_per_token() / f16.bytes_per_token(), 0.53);  // issue 16's budget at head dim 128
  // INT4 row: 64 bytes + scale and bias => 68 / 256.
  EXPECT_EQ(i4.block_bytes(), 8u * 2 * 8 * (16 * 64 + 16 * 4));
  EXPECT_LE(i4.bytes_per_token() / f16.bytes_per_token(), 0.30);
  EXPECT_EQ(i8.scales_offset(0, 0), 16u * 128);
}

TEST(KvSpec, LayeredPrecisionKeepsChosenLayersAndHeads) {
  KvSpecConfig c;
  c.num_layers = 3;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.dtype = KvDtype::kInt8;
  c.keep = {{0, -1}, {2, 1}};
  auto s = KvSpec::Create(c);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dtype(0, 0), KvDtype::kF16);
  EXPECT_EQ(s->dtype(0, 1), KvDtype::kF16);
  EXPECT_EQ(s->dtype(1, 0), KvDtype::kInt8);
  EXPECT_EQ(s->dtype(2, 0), KvDtype::kInt8);
  EXPECT_EQ(s->dtype(2, 1), KvDtype::kF16);
  EXPECT_FALSE(s->is_uniform());
  // Segments follow each other, each 32-byte aligned: f16 = 16*64 = 1024; int8 = 512 + 16*4.
  EXPECT_EQ(s->segment_offset(0, 1, 0), 2048u);
  EXPECT_EQ(s->segment_offset(1, 0, 1), 4096u + 576u);
  EXPECT_EQ(s->Describe(), "int8 (kept: L0,L2:h1), block 16, group 32");
}

TEST(KvSpec, RejectsBadConfigs) {
  KvSpecConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 48;
  c.group_size = 32;  // does not divide 48
  EXPECT_EQ(KvSpec::Create(c).status().code(), StatusCode::kInvalidArgument);
  c.group_size = 0;
  c.block_size = -1;
  EXPECT_FALSE(KvSpec::Create(c).ok());
  c.block_size = 16;
  c.keep = {{5, -1}};
  EXPECT_FALSE(KvSpec::Create(c).ok());
  c.keep = {{1, 2}};
  EXPECT_FALSE(KvSpec::Create(c).ok());
}

TEST(KvSpec, BlockSizeZeroMeansTheDtypesDefault) {
  KvSpecConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.block_size = 0;
  EXPECT_EQ(KvSpec::Create(c)->block_size(), 16);
  c.dtype = KvDtype::kInt4C;  // per-channel key parameters spread over 32 tokens
  const KvSpec int4c = *KvSpec::Create(c);
  EXPECT_EQ(int4c.block_size(), 32);
  c.dtype = KvDtype::kF16;
  EXPECT_NEAR(int4c.bytes_per_token() / KvSpec::Create(c)->bytes_per_token(), 0.289, 0.001);
  c.keep = {{1, -1}};
  c.keep_dtype = KvDtype::kInt4C;
  EXPECT_EQ(KvSpec::Create(c)->block_size(), 32);
  c.block_size = 8;  // a block size named is kept
  EXPECT_EQ(KvSpec::Create(c)->block_size(), 8);
}

TEST(KvSpec, ParsesDtypeNames) {
  EXPECT_EQ(ParseKvDtype("int8"), KvDtype::kInt8);
  EXPECT_EQ(ParseKvDtype("fp16"), KvDtype::kF16);
  EXPECT_EQ(ParseKvDtype("bf16"), KvDtype::kBF16);
  EXPECT_FALSE(ParseKvDtype("int3").has_value());
}

}  // namespace kv_spec_test
}  // namespace kvserve
