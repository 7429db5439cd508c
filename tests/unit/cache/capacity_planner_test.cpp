// Capacity planner: exact byte counts and sequence/block counts for known shapes.
#include "cache/capacity_planner.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace capacity_planner_test {

constexpr int64_t kGiB = int64_t{1} << 30;

LlamaShape Llama7B() { return {.vocab_size = 32000, .dim = 4096, .num_layers = 32, .num_heads = 32,
                               .num_kv_heads = 32, .ffn_dim = 11008}; }

CapacityPlanConfig Plan7B(KvDtype dtype) {
  CapacityPlanConfig c;
  c.kv.num_layers = 32;
  c.kv.num_kv_heads = 32;
  c.kv.head_dim = 128;
  c.kv.block_size = 16;
  c.kv.dtype = dtype;
  c.weight_bytes = EstimateLlamaWeightBytes(Llama7B(), 16);
  c.memory_bytes = 40 * kGiB;
  c.reserve_bytes = 0;
  c.context_tokens = 2048;
  return c;
}

TEST(CapacityPlanner, LlamaParameterCountMatchesTheKnown7BFigure) {
  EXPECT_EQ(LlamaParameterCount(Llama7B()), 6738415616);
  // F16 matrices + F32 norms: (6738415616 - 65 * 4096) * 2 + 65 * 4096 * 4.
  EXPECT_EQ(EstimateLlamaWeightBytes(Llama7B(), 16), 13477363712);
}

TEST(CapacityPlanner, SevenBillionShapeIn40GiB) {
  auto rows = PlanCapacityTable(Plan7B(KvDtype::kF16), AllKvDtypes());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 6u);
  const CapacityPlanRow& f16 = (*rows)[1];
  EXPECT_EQ(f16.dtype, KvDtype::kF16);
  EXPECT_DOUBLE_EQ(f16.kv_bytes_per_token, 524288.0);  // 2 x 32 layers x 4096 x 2 bytes
  EXPECT_EQ(f16.kv_bytes_per_sequence, kGiB);
  EXPECT_EQ(f16.kv_memory_bytes, 40 * kGiB - 13477363712);
  EXPECT_EQ(f16.max_sequences, 27);
  EXPECT_EQ(f16.num_blocks, (40 * kGiB - 13477363712) / (8 * 1024 * 1024));
  EXPECT_DOUBLE_EQ(f16.ratio_to_f16, 1.0);
  const CapacityPlanRow& f32 = (*rows)[0];
  EXPECT_EQ(f32.kv_bytes_per_sequence, 2 * kGiB);
  EXPECT_EQ(f32.max_sequences, 13);
  const CapacityPlanRow& i8 = (*rows)[3];
  // 128 data bytes + an f16 scale and bias per row: 132 / 256.
  EXPECT_DOUBLE_EQ(i8.ratio_to_f16, 132.0 / 256);
  EXPECT_EQ(i8.max_sequences, 53);  // 29472309248 / (128 blocks x 4325376 bytes) = 53.2
  const CapacityPlanRow& i4 = (*rows)[4];
  EXPECT_DOUBLE_EQ(i4.ratio_to_f16, 68.0 / 256);
  EXPECT_EQ(i4.max_sequences, 103);
  EXPECT_TRUE(i4.fits);
  const CapacityPlanRow& i4c = (*rows)[5];
  // K: 64 code bytes + an f16 scale and bias per channel per 16-token block (512 / 16); V as INT4.
  EXPECT_EQ(i4c.dtype, KvDtype::kInt4C);
  EXPECT_DOUBLE_EQ(i4c.ratio_to_f16, (96.0 + 68.0) / 512);
  // Each sequence's filling block keeps its keys in F16 beside the pool: 32 x 32 x 16 x 128 x 2.
  EXPECT_EQ(i4c.staging_bytes_per_sequence, 4 * 1024 * 1024);
  EXPECT_EQ(i4c.kv_bytes_per_sequence, 2048 * 32 * 32 * 164 + 4 * 1024 * 1024);
  EXPECT_EQ(i4c.max_sequences, 84);  // 29472309248 / 348127232 = 84.7 (85.7 without staging)
  EXPECT_EQ(i4c.num_blocks, 10837);  // (29472309248 - 84 x 4 MiB) / 2686976 bytes per block
  EXPECT_EQ(i4.staging_bytes_per_sequence, 0);
  EXPECT_EQ(i4.num_blocks, i4.kv_memory_bytes / static_cast<int64_t>(16 * 32 * 32 * 68 * 2));
}

TEST(CapacityPlanner, LayeredRowAndReserve) {
  CapacityPlanConfig c = Plan7B(KvDtype::kInt8);
  c.kv.keep = {{0, -1}, {1, -1}};
  c.reserve_bytes = 2 * kGiB;
  auto rows = PlanCapacityTable(c, std::span<const KvDtype>());
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  const CapacityPlanRow& r = (*rows)[0];
  EXPECT_TRUE(r.layered);
  // 2 layers at 256 bytes per row-pair-head, 30 at 132: per token 2 x 32 heads x (2 x 256 + 30 x 132).
  EXPECT_DOUBLE_EQ(r.kv_bytes_per_token, 2.0 * 32 * (2 * 256 + 30 * 132));
  EXPECT_EQ(r.kv_memory_bytes, 38 * kGiB - 13477363712);
  EXPECT_NE(r.kv_setting.find("L0,L1"), std::string::npos) << r.kv_setting;
}

TEST(CapacityPlanner, DoesNotFitAndBadInputs) {
  CapacityPlanConfig c = Plan7B(KvDtype::kF16);
  c.memory_bytes = 12 * kGiB;  // less than the weights
  auto row = PlanCapacity(c);
  ASSERT_TRUE(row.ok());
  EXPECT_FALSE(row->fits);
  EXPECT_EQ(row->kv_memory_bytes, 0);
  EXPECT_EQ(row->max_sequences, 0);
  EXPECT_EQ(row->num_blocks, 0);
  c.memory_bytes = 0;
  EXPECT_EQ(PlanCapacity(c).status().code(), StatusCode::kInvalidArgument);
  c.memory_bytes = kGiB;
  c.context_tokens = 0;
  EXPECT_EQ(PlanCapacity(c).status().code(), StatusCode::kInvalidArgument);
  c.context_tokens = 16;
  c.kv.head_dim = 0;
  EXPECT_FALSE(PlanCapacity(c).ok());
}

TEST(CapacityPlanner, CompactedRowSplitsTheMemoryAndCountsWorstCaseBlocks) {
  CapacityPlanConfig c = Plan7B(KvDtype::kF16);
  c.context_tokens = 8192;
  const int64_t kv_memory = 40 * kGiB - 13477363712;  // 29472309248
  CompactionPlan p;  // int8, every 512, keep 1024
  p.share = 0.7;
  auto row = PlanCapacityCompacted(c, p);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  // Main: min(512, ceil(1536 / 16) + 1) = 97 F16 blocks of 8 MiB; compacted: (8192 - 1024) / 16
  // = 448 INT8 blocks of 4325376 bytes.
  EXPECT_EQ(row->kv_bytes_per_sequence, 97 * 8388608LL + 448 * 4325376LL);
  EXPECT_EQ(row->compact_bytes_per_sequence, 448 * 4325376LL);
  const int64_t compact_memory = static_cast<int64_t>(static_cast<double>(kv_memory) * 0.7);
  EXPECT_EQ(row->max_sequences, std::min((kv_memory - compact_memory) / (97 * 8388608LL),
                                         compact_memory / (448 * 4325376LL)));
  EXPECT_EQ(row->max_sequences, 10);  // F16 alone: 29472309248 / 4 GiB = 6
  EXPECT_EQ(PlanCapacity(c)->max_sequences, 6);
  EXPECT_EQ(row->num_blocks, (kv_memory - compact_memory) / 8388608);
  EXPECT_DOUBLE_EQ(row->ratio_to_f16, static_cast<double>(row->kv_bytes_per_sequence) / (8192 * 524288.0));
  EXPECT_EQ(row->kv_setting, "f16, block 16 + old int8 (group 128)");

  // A context within `keep` never compacts: the share set aside only costs sequences.
  c.context_tokens = 1024;
  p.share = 0.5;
  row = PlanCapacityCompacted(c, p);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->kv_bytes_per_sequence, 64 * 8388608LL);
  EXPECT_EQ(row->max_sequences, (kv_memory - kv_memory / 2) / (64 * 8388608LL));  // 27, not 54

  p.share = 1.0;
  EXPECT_EQ(PlanCapacityCompacted(c, p).status().code(), StatusCode::kInvalidArgument);
  p.share = 0.5;
  p.dtype = KvDtype::kF32;  // not smaller than the main dtype
  EXPECT_FALSE(PlanCapacityCompacted(c, p).ok());
}

TEST(CapacityPlanner, NumBlocksForMemoryRoundsDown) {
  KvSpecConfig k;
  k.num_layers = 5;
  k.num_kv_heads = 4;
  k.head_dim = 8;
  k.block_size = 16;
  const KvSpec spec = *KvSpec::Create(k);
  ASSERT_EQ(spec.block_bytes(), 5u * 2 * 4 * 256);
  EXPECT_EQ(NumBlocksForMemory(spec, 10240 * 3 + 10239), 3);
  EXPECT_EQ(NumBlocksForMemory(spec, -5), 0);
}

TEST(CapacityPlanner, ParsesAndFormatsByteSizes) {
  EXPECT_EQ(*ParseByteSize("40GiB"), 40 * kGiB);
  EXPECT_EQ(*ParseByteSize("40 GB"), 40000000000);
  EXPECT_EQ(*ParseByteSize("1.5G"), 3 * kGiB / 2);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512 << 20);
  EXPECT_EQ(*ParseByteSize("123"), 123);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("GiB").ok());
  EXPECT_FALSE(ParseByteSize("12 parsecs").ok());
  EXPECT_FALSE(ParseByteSize("-3GiB").ok());
  EXPECT_EQ(FormatBytes(96), "96 B");
  EXPECT_EQ(FormatBytes(512 * 1024), "512.00 KiB");
  EXPECT_EQ(FormatBytes(static_cast<double>(kGiB)), "1.00 GiB");
}

}  // namespace capacity_planner_test
}  // namespace kvserve
