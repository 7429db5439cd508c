// ReadModelConfig: architectures kvserve does not implement are refused by name, Llama 3.1+'s
// rope_freqs.weight becomes per-frequency divisors of RoPE, and phi3/gemma2 get their windows
// and Gemma 2's extras from their keys.
#include "engine/model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/model/gguf.h"

namespace kvserve {
namespace model_config_test {

// The keys ReadModelConfig needs: dim 64, 2 layers, 4 heads (head dim 16), rope over 8 dims.
GgufWriter MinimalWriter(const std::string& arch) {
  GgufWriter w;
  w.AddString("general.architecture", arch);
  w.AddUint32(arch + ".embedding_length", 64);
  w.AddUint32(arch + ".block_count", 2);
  w.AddUint32(arch + ".attention.head_count", 4);
  w.AddUint32(arch + ".feed_forward_length", 128);
  w.AddUint32(arch + ".vocab_size", 32);
  w.AddUint32(arch + ".rope.dimension_count", 8);
  w.AddFloat32(arch + ".rope.freq_base", 500000.0f);
  return w;
}

StatusOr<ModelConfig> Read(const GgufWriter& w) {
  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(w.Serialize());
  if (!file.ok()) return file.status();
  return ReadModelConfig(**file);
}

std::string F32Bytes(const std::vector<float>& v) {
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

TEST(ModelConfigTest, SupportedArchitecturesLoad) {
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2"}) {
    StatusOr<ModelConfig> c = Read(MinimalWriter(arch));
    ASSERT_TRUE(c.ok()) << arch << ": " << c.status().ToString();
    EXPECT_EQ(c->architecture, arch);
    EXPECT_EQ(c->head_dim, 16);
  }
  EXPECT_EQ(Read(MinimalWriter("qwen2"))->rope_layout, RopeLayout::kNeox);
  EXPECT_EQ(Read(MinimalWriter("llama"))->rope_layout, RopeLayout::kNormal);
}

TEST(ModelConfigTest, OtherArchitecturesAreRefusedByName) {
  for (const char* arch : {"gemma3", "qwen3moe", "starcoder2", "granite", "phi2"}) {
    StatusOr<ModelConfig> c = Read(MinimalWriter(arch));
    ASSERT_FALSE(c.ok()) << arch;
    EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(c.status().message().find(std::string("architecture '") + arch + "' is not supported"),
              std::string::npos)
        << c.status().message();
    EXPECT_NE(c.status().message().find("llama, mistral, qwen2, qwen3, phi3, gemma, gemma2"), std::string::npos)
        << c.status().message();
  }
}

TEST(ModelConfigTest, Phi3Qwen3AndGemmaReadTheirExtras) {
  GgufWriter phi3 = MinimalWriter("phi3");
  phi3.AddUint32("phi3.attention.sliding_window", 32);
  StatusOr<ModelConfig> p = Read(phi3);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rope_layout, RopeLayout::kNeox);
  EXPECT_EQ(p->LayerWindow(0), 32);
  EXPECT_EQ(p->LayerWindow(1), 32);
  EXPECT_FALSE(p->gelu_gate);
  EXPECT_TRUE(p->NeedsBeyondLlama());

  GgufWriter gemma2 = MinimalWriter("gemma2");
  gemma2.AddUint32("gemma2.attention.sliding_window", 16);
  gemma2.AddFloat32("gemma2.attn_logit_softcapping", 50.0f);
  gemma2.AddFloat32("gemma2.final_logit_softcapping", 30.0f);
  StatusOr<ModelConfig> g = Read(gemma2);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->LayerWindow(0), 16);  // even layers
  EXPECT_EQ(g->LayerWindow(1), 0);   // odd layers: the whole context
  EXPECT_TRUE(g->scale_embeddings && g->gelu_gate && g->post_norms);
  EXPECT_EQ(g->attn_logit_softcap, 50.0f);
  EXPECT_EQ(g->final_logit_softcap, 30.0f);
  EXPECT_FLOAT_EQ(g->QueryScale(), 0.25f);  // 1 / sqrt(head_dim 16)

  StatusOr<ModelConfig> qwen3 = Read(MinimalWriter("qwen3"));
  EXPECT_TRUE(qwen3->qk_norm && qwen3->NeedsBeyondLlama());
  EXPECT_EQ(qwen3->rope_layout, RopeLayout::kNeox);
  StatusOr<ModelConfig> gemma = Read(MinimalWriter("gemma"));
  EXPECT_TRUE(gemma->scale_embeddings && gemma->gelu_gate);
  EXPECT_FALSE(gemma->post_norms || gemma->attn_logit_softcap > 0 || gemma->LayerWindow(0) > 0);
  EXPECT_FLOAT_EQ(gemma->QueryScale(), 0.25f);

  StatusOr<ModelConfig> llama = Read(MinimalWriter("llama"));
  EXPECT_FALSE(llama->NeedsBeyondLlama() || llama->qk_norm);
  EXPECT_EQ(llama->LayerWindow(0), 0);
  EXPECT_FLOAT_EQ(llama->QueryScale(), 0.25f);
}

TEST(ModelConfigTest, HostileWindowAndCapValuesAreRefused) {
  GgufWriter huge_window = MinimalWriter("phi3");
  huge_window.AddUint32("phi3.attention.sliding_window", 0xFFFFFFFFu);
  EXPECT_EQ(Read(huge_window).status().code(), StatusCode::kInvalidArgument);
  for (float cap : {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    GgufWriter w = MinimalWriter("gemma2");
    w.AddFloat32("gemma2.final_logit_softcapping", cap);
    EXPECT_EQ(Read(w).status().code(), StatusCode::kInvalidArgument) << cap;
  }
}

TEST(ModelConfigTest, RopeFreqsDivideEachFrequency) {
  GgufWriter w = MinimalWriter("llama");
  const std::vector<float> factors = {1.0f, 2.0f, 8.0f, 32.0f};  // rope_dim / 2 of them
  w.AddTensor("rope_freqs.weight", GgmlType::kF32, {4}, F32Bytes(factors));
  StatusOr<ModelConfig> c = Read(w);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_freq_factors, factors);
  const std::vector<double> inv = c->RopeInvFreq();
  ASSERT_EQ(inv.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(inv[i], std::pow(500000.0, -2.0 * i / 8) / factors[i]) << i;
  }
  // Without the tensor: the plain frequencies.
  const std::vector<double> plain = Read(MinimalWriter("llama"))->RopeInvFreq();
  EXPECT_DOUBLE_EQ(plain[3], std::pow(500000.0, -6.0 / 8));
}

TEST(ModelConfigTest, RopeFreqsOfTheWrongSizeOrSignAreRefused) {
  GgufWriter wrong_size = MinimalWriter("llama");
  wrong_size.AddTensor("rope_freqs.weight", GgmlType::kF32, {8}, F32Bytes(std::vector<float>(8, 1.0f)));
  StatusOr<ModelConfig> c = Read(wrong_size);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("rope_freqs has 8 factors, expected rope dimension / 2 = 4"), std::string::npos)
      << c.status().message();
  GgufWriter negative = MinimalWriter("llama");
  negative.AddTensor("rope_freqs.weight", GgmlType::kF32, {4}, F32Bytes({1.0f, -1.0f, 1.0f, 1.0f}));
  EXPECT_FALSE(Read(negative).ok());
}

}  // namespace model_config_test
}  // namespace kvserve
