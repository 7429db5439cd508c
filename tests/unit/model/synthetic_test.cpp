// Synthetic models of every architecture: a preset builds a GGUF whose metadata and tensors the
// loader reads as that architecture (Gemma 2: head dim from key_length, post norms, soft-caps,
// the window on even layers, tied output; Phi-3: fused tensors, the window on every layer),
// and the same preset always gives the same weights. That llama.cpp reads the written files the
// same way is measured in bench/results/weight_types.md (perplexity side by side).
#include "engine/model/synthetic.h"

#include <gtest/gtest.h>

#include "engine/model/gguf.h"
#include "engine/model/weights.h"
#include "tests/test_paths.h"

namespace kvserve {
namespace synthetic_test {

std::unique_ptr<Model> Load(const std::string& spec) {
  auto m = Model::Load(spec);
  EXPECT_TRUE(m.ok()) << spec << ": " << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

TEST(SyntheticPresets, Gemma2TinyLoadsAsGemma2) {
  auto m = Load("synthetic:gemma2-tiny:f32");
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "gemma2");
  EXPECT_EQ(c.head_dim, 32);  // key_length, not dim / heads (16)
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_TRUE(c.tied_output);
  EXPECT_TRUE(c.post_norms);
  EXPECT_FLOAT_EQ(c.attn_logit_softcap, 50);
  EXPECT_FLOAT_EQ(c.final_logit_softcap, 30);
  EXPECT_EQ(c.LayerWindow(0), 32);
  EXPECT_EQ(c.LayerWindow(1), 0);
  EXPECT_EQ(c.LayerWindow(2), 32);
  EXPECT_EQ(c.num_layers, 26);
}

TEST(SyntheticPresets, Phi3TinyLoadsAsPhi3) {
  auto m = Load("synthetic:phi3-tiny:f16");
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "phi3");
  EXPECT_FALSE(c.tied_output);
  EXPECT_EQ(c.LayerWindow(0), 32);
  EXPECT_EQ(c.LayerWindow(1), 32);
  // Phi-3's control tokens take the last ids (llama.cpp requires <|endoftext|> in phi3 files).
  const Tokenizer& tok = m->tokenizer();
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.Encode("<|end|>", /*add_bos=*/false, /*parse_special=*/true), std::vector<int32_t>{510});
}

TEST(SyntheticPresets, Qwen3AndGemmaTinyLoadWithTheirExtras) {
  auto q = Load("synthetic:qwen3-tiny:f32");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->config().architecture, "qwen3");
  EXPECT_EQ(q->config().head_dim, 32);  // q_dim 128 != dim 64
  EXPECT_TRUE(q->config().qk_norm);
  ASSERT_NE(q->weights().layers[1].k_norm, nullptr);
  EXPECT_NE(q->weights().layers[1].k_norm[0], q->weights().layers[1].k_norm[1]);  // not all ones
  auto g = Load("synthetic:gemma-tiny:f32");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->config().architecture, "gemma");
  EXPECT_TRUE(g->config().tied_output && g->config().scale_embeddings && g->config().gelu_gate);
  EXPECT_EQ(g->config().num_kv_heads, 1);
}

TEST(SyntheticPresets, ShapesOfThePublishedModels) {
  const SyntheticPreset g = *FindSyntheticPreset("gemma2-2b-shape");
  EXPECT_EQ(g.architecture, "gemma2");
  EXPECT_EQ(g.num_heads * g.head_dim, 2048);
  const SyntheticPreset p = *FindSyntheticPreset("phi3-mini-shape");
  EXPECT_EQ(p.dim, 3072);
  EXPECT_EQ(p.sliding_window, 2047);
}

TEST(SyntheticPresets, SamePresetSameBytes) {
  SyntheticOptions o;
  o.preset = *FindSyntheticPreset("phi3-tiny");
  o.dtype = GgmlType::kQ8_0;
  const std::string a = MakeSyntheticGguf(o)->Serialize();
  EXPECT_EQ(a, MakeSyntheticGguf(o)->Serialize());
  o.seed += 1;
  EXPECT_NE(a, MakeSyntheticGguf(o)->Serialize());
}

// `kvserve mkmodel --vocab`: a real vocabulary with the control tokens a template needs.
TEST(SyntheticVocab, ARealVocabularyGetsItsControlTokensAndTemplate) {
  REQUIRE_SHARED_FILE("tokenizer/ggml-vocab-gpt-2.gguf");
  const std::string path = testing::SharedPath("tokenizer/ggml-vocab-gpt-2.gguf");
  StatusOr<Vocab> v = LoadVocabForSynthetic({path, {"<|im_start|>", "<|im_end|>"}, "", "<|im_end|>", "{{ chatml }}"});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->tokens.size(), 50257u + 2);  // GPT-2's, then the two appended
  EXPECT_EQ(v->tokens[static_cast<size_t>(v->eos_id)], "<|im_end|>");
  EXPECT_EQ(v->types[static_cast<size_t>(v->eos_id)], TokenType::kControl);
  EXPECT_EQ(v->chat_template, "{{ chatml }}");
  // A BOS or EOS the vocabulary does not have is an error, not a silent -1.
  EXPECT_EQ(LoadVocabForSynthetic({path, {}, "<|begin_of_text|>", "", ""}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace synthetic_test
}  // namespace kvserve
