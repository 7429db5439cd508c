// Engine flags -> EngineConfig: KV pool sizing, max model length, layered precision, errors.
#include "cli/engine_options.h"

#include <gtest/gtest.h>

#include "engine/backend/backend_factory.h"
#include "engine/backend/cpu/kernels.h"
#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace engine_options_test {

class EngineOptionsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = testing::Stories(); }
  static void TearDownTestSuite() { model_.reset(); }
  static std::shared_ptr<const Model> model_;
};
std::shared_ptr<const Model> EngineOptionsTest::model_;

TEST_F(EngineOptionsTest, DefaultPoolHoldsMaxNumSeqsFullSequences) {
  EngineFlags f;
  f.max_num_seqs = 4;
  StatusOr<EnginePlan> plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // stories260K: context 2048 = 128 blocks of 16 per sequence.
  EXPECT_EQ(plan->config.num_blocks, 4 * 128);
  EXPECT_EQ(plan->config.max_model_len, 2048);
  EXPECT_EQ(plan->kv_bytes, static_cast<uint64_t>(plan->config.num_blocks) * plan->block_bytes);
  EXPECT_EQ(plan->config.max_num_seqs, 4);
  EXPECT_TRUE(plan->config.enable_prefix_caching);
}

TEST_F(EngineOptionsTest, MemoryFlagSizesThePoolAndCapsTheLength) {
  EngineFlags f;
  StatusOr<EnginePlan> plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok());
  const size_t block = plan->block_bytes;
  f.kv_cache_memory = block * 10 + block / 2;
  plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->config.num_blocks, 10);
  EXPECT_EQ(plan->config.max_model_len, 160);  // a sequence never outgrows the pool

  f.kv_cache_memory = block;  // one block is not a pool
  EXPECT_EQ(PlanEngine(f, *model_).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EngineOptionsTest, BlockSizeDefaultsTo32ForInt4cAndIsKeptWhenNamed) {
  EngineFlags f;
  f.max_num_seqs = 2;
  f.kv_dtype = "int4c";
  StatusOr<EnginePlan> plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->config.kv.block_size, 32);
  EXPECT_EQ(plan->config.num_blocks, 2 * 2048 / 32);
  f.block_size = 16;
  plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->config.kv.block_size, 16);
  // --kv-cache-memory: one staging slot per sequence (F16 keys of a filling block, 5 layers x
  // 4 heads x 16 x 8 x 2 bytes) comes out of it before the pool is sized.
  const size_t staging = 5 * 4 * 16 * 8 * 2;
  f.kv_cache_memory = 10 * plan->block_bytes + 2 * staging;
  plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->config.num_blocks, 10);
  f.kv_cache_memory -= 1;
  EXPECT_EQ(PlanEngine(f, *model_)->config.num_blocks, 9);
  f.kv_cache_memory = 2 * staging + plan->block_bytes;
  const Status small = PlanEngine(f, *model_).status();
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.message().find("key staging"), std::string::npos) << small.message();
  f.kv_cache_memory = 0;
  f.kv_dtype = "int8";
  f.block_size = 0;
  EXPECT_EQ(PlanEngine(f, *model_)->config.kv.block_size, 16);
}

EngineFlags Int8Keeping(std::string keep) {
  EngineFlags f;
  f.kv_dtype = "int8";
  f.kv_keep = std::move(keep);
  return f;
}

TEST_F(EngineOptionsTest, KvKeepAndFlagErrors) {
  StatusOr<EnginePlan> plan = PlanEngine(Int8Keeping("0,4:1"), *model_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->config.kv.keep.size(), 2u);
  EXPECT_EQ(plan->config.kv.keep[0].layer, 0);
  EXPECT_EQ(plan->config.kv.keep[0].head, -1);
  EXPECT_EQ(plan->config.kv.keep[1].layer, 4);
  EXPECT_EQ(plan->config.kv.keep[1].head, 1);

  EXPECT_EQ(PlanEngine(Int8Keeping("x"), *model_).status().code(), StatusCode::kInvalidArgument);
  // stories260K has 5 layers.
  EXPECT_EQ(PlanEngine(Int8Keeping("9"), *model_).status().code(), StatusCode::kInvalidArgument);

  EngineFlags swap;
  swap.preempt = "swap";
  EXPECT_EQ(PlanEngine(swap, *model_).status().code(), StatusCode::kInvalidArgument);
  swap.host_offload_memory = 1 << 20;
  plan = PlanEngine(swap, *model_);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->config.preempt_by_swap);
  EXPECT_GT(plan->config.num_host_blocks, 0);
}

TEST_F(EngineOptionsTest, DeviceIsResolved) {
  EngineFlags f;
  f.device = "cpu";
  StatusOr<EnginePlan> plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->device, "cpu");
  f.device = "auto";
  plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok());
  const StatusOr<std::string> cuda = ResolveDevice("cuda", model_->config());
  EXPECT_EQ(plan->device, cuda.ok() ? "cuda" : "cpu");
  if (!cuda.ok()) {
    // Asking for CUDA where there is none names the reason instead of falling back silently.
    f.device = "cuda";
    plan = PlanEngine(f, *model_);
    EXPECT_EQ(plan.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(plan.status().message(), cuda.status().message());
  }
  // A model the CUDA backend does not implement runs on the CPU under auto, and --device cuda
  // says why it cannot.
  ModelConfig windowed = model_->config();
  windowed.architecture = "phi3";
  windowed.sliding_window = 32;
  EXPECT_EQ(ResolveDevice("auto", windowed).value(), "cpu");
  if (cuda.ok()) {
    const StatusOr<std::string> refused = ResolveDevice("cuda", windowed);
    EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(refused.status().message().find("phi3"), std::string::npos);
  }
  // So does a KV cache type only the CPU backend has.
  EXPECT_EQ(ResolveDevice("auto", model_->config(), {KvDtype::kInt4C}).value(), "cpu");
  EXPECT_EQ(ResolveDevice("auto", model_->config(), {KvDtype::kInt4}).value(), cuda.ok() ? "cuda" : "cpu");
  if (cuda.ok()) {
    EXPECT_EQ(ResolveDevice("cuda", model_->config(), {KvDtype::kF16, KvDtype::kInt4C}).status().code(),
              StatusCode::kUnimplemented);
  }
}

TEST_F(EngineOptionsTest, CompactionSplitsTheMemoryAndRefusesWhatItCannotDo) {
  EngineFlags f;
  f.device = "cpu";
  f.kv_dtype = "f16";
  StatusOr<EnginePlan> plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok());
  const size_t block = plan->block_bytes;
  f.kv_cache_memory = block * 40;
  f.kv_compact_dtype = "int8";
  f.kv_compact_share = 0.25;
  plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->config.num_blocks, 30);  // three quarters of the memory
  KvSpecConfig kv = plan->config.kv;
  const KvSpec compact = *CompactSpecFor(*KvSpec::Create(kv), KvDtype::kInt8);
  EXPECT_EQ(plan->config.num_compact_blocks, static_cast<int>(block * 10 / compact.block_bytes()));
  EXPECT_GT(plan->config.num_compact_blocks, 10);  // int8 blocks are smaller
  EXPECT_EQ(plan->kv_bytes, 30 * block + plan->config.num_compact_blocks * compact.block_bytes());
  EXPECT_EQ(plan->config.compact_dtype, KvDtype::kInt8);
  EXPECT_NE(plan->kv_description.find("compacted to int8"), std::string::npos);
  // It serves, compacting as it goes.
  f.threads = 1;
  f.kv_compact_every = 8;
  f.kv_compact_keep = 16;
  plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok());
  StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(&*plan, model_);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  testing::RunResult r = testing::RunRequest(**engine, testing::Greedy({1, 400}, 64));
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.choices[0].tokens.size(), 64u);
  EXPECT_TRUE(testing::WaitFor([&] { return (*engine)->GetStats().cache.compacted_blocks > 0; }));
  (*engine)->Stop();

  f.kv_dtype = "int4c";  // staged per-channel keys are not compacted
  EXPECT_EQ(PlanEngine(f, *model_).status().code(), StatusCode::kInvalidArgument);
  f.kv_dtype = "int8";
  f.kv_compact_dtype = "int8";  // nothing to gain
  EXPECT_EQ(PlanEngine(f, *model_).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EngineOptionsTest, CreateEngineServes) {
  EngineFlags f;
  f.device = "cpu";
  f.max_num_seqs = 2;
  f.threads = 1;
  StatusOr<EnginePlan> plan = PlanEngine(f, *model_);
  ASSERT_TRUE(plan.ok());
  StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(&*plan, model_);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  testing::RunResult r = testing::RunRequest(**engine, testing::Greedy({1, 400}, 4));
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.choices[0].tokens.size(), 4u);
  (*engine)->Stop();
}

}  // namespace engine_options_test
}  // namespace kvserve

namespace kvserve {
namespace engine_options_test {

TEST_F(EngineOptionsTest, ComputeDtypeIsResolvedForTheDevice) {
  EngineFlags f;
  f.device = "cpu";
  EXPECT_EQ(PlanEngine(f, *model_)->compute_dtype, ComputeDtype::kInt8);  // the default
  f.compute_dtype = "f32";
  EXPECT_EQ(PlanEngine(f, *model_)->compute_dtype, ComputeDtype::kF32);
  f.compute_dtype = "bf16";
  EXPECT_EQ(PlanEngine(f, *model_)->compute_dtype, ComputeDtype::kBF16);
  f.compute_dtype = "auto";
  EXPECT_EQ(PlanEngine(f, *model_)->compute_dtype, ResolveComputeDtype("auto", "cpu").value());
  // auto picks bf16 only where the CPU multiplies BF16 pairs natively.
  if (ResolveComputeDtype("auto", "cpu").value() == ComputeDtype::kBF16) {
    EXPECT_TRUE(cpu::CpuHasBf16Dot());
  }
  EXPECT_EQ(ResolveComputeDtype("auto", "cuda").value(), ComputeDtype::kF32);
  EXPECT_EQ(ResolveComputeDtype("int8", "cuda").value(), ComputeDtype::kF32);  // the default there
  EXPECT_EQ(ResolveComputeDtype("bf16", "cuda").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveComputeDtype("fp8", "cpu").status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseKvKeepTest, AcceptsLayersHeadsAndBareForms) {
  auto layers = ParseKvKeep("layers=0,1,31");
  ASSERT_TRUE(layers.ok());
  ASSERT_EQ(layers->size(), 3u);
  EXPECT_EQ((*layers)[2].layer, 31);
  EXPECT_EQ((*layers)[2].head, -1);
  auto heads = ParseKvKeep("heads=0:2,5:1");
  ASSERT_TRUE(heads.ok());
  ASSERT_EQ(heads->size(), 2u);
  EXPECT_EQ((*heads)[1].layer, 5);
  EXPECT_EQ((*heads)[1].head, 1);
  auto bare = ParseKvKeep("0,3:1");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ((*bare)[1].head, 1);
  EXPECT_EQ(ParseKvKeep("heads=3").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseKvKeep("layers=x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseKvKeep("").ok());
}

}  // namespace engine_options_test
}  // namespace kvserve
