// LoadVocab / AddVocabToGguf / ValidateVocab / Tokenizer::Create: defaults, round trips through
// GgufWriter, and INVALID_ARGUMENT errors that name the key at fault.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace kvserve {
namespace tokenizer_vocab_test {

// A small SentencePiece-style vocabulary: unk, BOS, EOS, all 256 byte tokens, a few pieces.
Vocab TinySpmVocab() {
  Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.types.push_back(TokenType::kByte);
  }
  for (const char* piece : {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab"}) {
    v.tokens.push_back(piece);
    v.types.push_back(TokenType::kNormal);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 259; i < v.tokens.size(); ++i) v.scores[i] = -static_cast<float>(i - 258);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  v.chat_template = "{{ messages }}";
  return v;
}

// A byte-level BPE vocabulary over "a", "b", "Ġ" with two merges.
Vocab TinyBpeVocab() {
  Vocab v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  v.tokens = {"a", "b", "\xC4\xA0", "ab", "\xC4\xA0" "ab", "<|endoftext|>"};
  v.types = {TokenType::kNormal, TokenType::kNormal, TokenType::kNormal,
             TokenType::kNormal, TokenType::kNormal, TokenType::kControl};
  v.merges = {"a b", "\xC4\xA0 ab"};
  v.bos_id = 5;
  v.eos_id = 5;
  v.add_bos = false;
  v.add_space_prefix = false;
  return v;
}

StatusOr<Vocab> RoundTrip(const Vocab& vocab) {
  GgufWriter writer;
  writer.AddString("general.architecture", "llama");
  AddVocabToGguf(vocab, &writer);
  auto file = GgufFile::FromBytes(writer.Serialize());
  if (!file.ok()) return file.status();
  return LoadVocab(**file);
}

void ExpectSameVocab(const Vocab& a, const Vocab& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.pre, b.pre);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.scores, b.scores);
  EXPECT_EQ(a.types, b.types);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_id, b.eos_id);
  EXPECT_EQ(a.unk_id, b.unk_id);
  EXPECT_EQ(a.pad_id, b.pad_id);
  EXPECT_EQ(a.add_bos, b.add_bos);
  EXPECT_EQ(a.add_eos, b.add_eos);
  EXPECT_EQ(a.add_space_prefix, b.add_space_prefix);
  EXPECT_EQ(a.chat_template, b.chat_template);
}

// A writer holding everything but the tokenizer keys the test adds itself.
GgufWriter BaseWriter() {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  return w;
}

Status LoadError(const GgufWriter& writer) {
  auto file = GgufFile::FromBytes(writer.Serialize());
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return file.status();
  auto vocab = LoadVocab(**file);
  return vocab.ok() ? OkStatus() : vocab.status();
}

TEST(VocabTest, SpmRoundTripsThroughGgufWriter) {
  const Vocab vocab = TinySpmVocab();
  auto loaded = RoundTrip(vocab);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ExpectSameVocab(vocab, *loaded);
}

TEST(VocabTest, BpeRoundTripsThroughGgufWriter) {
  Vocab vocab = TinyBpeVocab();
  vocab.add_eos = true;
  vocab.pad_id = 0;
  auto loaded = RoundTrip(vocab);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ExpectSameVocab(vocab, *loaded);
}

TEST(VocabTest, StoriesVocabRoundTripsAndKeepsItsTokenization) {
  REQUIRE_SHARED_FILE("models/stories260K.gguf");
  auto file = GgufFile::Open(::kvserve::testing::SharedPath("models/stories260K.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto vocab = LoadVocab(**file);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  EXPECT_EQ(vocab->model, "llama");
  EXPECT_EQ(vocab->tokens.size(), 512u);
  EXPECT_EQ(vocab->bos_id, 1);
  EXPECT_EQ(vocab->eos_id, 2);
  EXPECT_EQ(vocab->unk_id, 0);
  EXPECT_EQ(vocab->pad_id, -1);  // stored as 4294967295
  EXPECT_TRUE(vocab->add_bos);   // absent key: the llama default
  EXPECT_FALSE(vocab->add_eos);
  EXPECT_TRUE(vocab->add_space_prefix);
  auto again = RoundTrip(*vocab);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectSameVocab(*vocab, *again);
  auto tokenizer = Tokenizer::Create(std::move(again).value());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  EXPECT_EQ((*tokenizer)->Encode("Once upon a time", true),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
}

TEST(VocabTest, DefaultsForAbsentKeysFollowTheModelAndPreTokenizer) {
  struct Case {
    std::string model;
    std::string pre;
    bool add_bos;
    bool add_space_prefix;
  };
  for (const Case& c : std::vector<Case>{{"llama", "", true, true},
                                         {"gpt2", "gpt-2", false, false},
                                         {"gpt2", "", false, false},
                                         {"gpt2", "llama-bpe", true, false},
                                         {"gpt2", "llama3", true, false}}) {
    GgufWriter w = BaseWriter();
    w.AddString("tokenizer.ggml.model", c.model);
    if (!c.pre.empty()) w.AddString("tokenizer.ggml.pre", c.pre);
    w.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
    if (c.model == "gpt2") w.AddStringArray("tokenizer.ggml.merges", {"a b"});
    auto file = GgufFile::FromBytes(w.Serialize());
    ASSERT_TRUE(file.ok());
    auto vocab = LoadVocab(**file);
    ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
    EXPECT_EQ(vocab->add_bos, c.add_bos) << c.model << " " << c.pre;
    EXPECT_EQ(vocab->add_space_prefix, c.add_space_prefix) << c.model << " " << c.pre;
    EXPECT_FALSE(vocab->add_eos);
    EXPECT_EQ(vocab->bos_id, -1);  // absent
    EXPECT_TRUE(vocab->scores.empty());
    EXPECT_TRUE(vocab->types.empty());
  }
}

TEST(VocabTest, ExplicitFlagsOverrideDefaults) {
  GgufWriter w = BaseWriter();
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", {"<s>", "a"});
  w.AddBool("tokenizer.ggml.add_bos_token", false);
  w.AddBool("tokenizer.ggml.add_eos_token", true);
  w.AddBool("tokenizer.ggml.add_space_prefix", false);
  w.AddInt32("tokenizer.ggml.bos_token_id", 0);
  w.AddInt32("tokenizer.ggml.eos_token_id", -1);
  w.AddString("tokenizer.chat_template", "tmpl");
  auto file = GgufFile::FromBytes(w.Serialize());
  ASSERT_TRUE(file.ok());
  auto vocab = LoadVocab(**file);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  EXPECT_FALSE(vocab->add_bos);
  EXPECT_TRUE(vocab->add_eos);
  EXPECT_FALSE(vocab->add_space_prefix);
  EXPECT_EQ(vocab->bos_id, 0);
  EXPECT_EQ(vocab->eos_id, -1);
  EXPECT_EQ(vocab->chat_template, "tmpl");
}

TEST(VocabTest, ErrorsNameTheKey) {
  struct Case {
    std::string key;
    std::function<void(GgufWriter*)> build;
  };
  const std::vector<Case> cases = {
      {"tokenizer.ggml.model",
       [](GgufWriter* w) { w->AddStringArray("tokenizer.ggml.tokens", {"a"}); }},
      {"tokenizer.ggml.tokens",
       [](GgufWriter* w) { w->AddString("tokenizer.ggml.model", "llama"); }},
      {"tokenizer.ggml.tokens",
       [](GgufWriter* w) {
         w->AddString("tokenizer.ggml.model", "llama");
         w->AddStringArray("tokenizer.ggml.tokens", {});
       }},
      {"tokenizer.ggml.scores",
       [](GgufWriter* w) {
         w->AddString("tokenizer.ggml.model", "llama");
         w->AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c"});
         w->AddFloat32Array("tokenizer.ggml.scores", {0.0f, 1.0f});
       }},
      {"tokenizer.ggml.token_type",
       [](GgufWriter* w) {
         w->AddString("tokenizer.ggml.model", "llama");
         w->AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
         w->AddInt32Array("tokenizer.ggml.token_type", {1});
       }},
      {"tokenizer.ggml.token_type",
       [](GgufWriter* w) {
         w->AddString("tokenizer.ggml.model", "llama");
         w->AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
         w->AddInt32Array("tokenizer.ggml.token_type", {1, 7});
       }},
      {"tokenizer.ggml.bos_token_id",
       [](GgufWriter* w) {
         w->AddString("tokenizer.ggml.model", "llama");
         w->AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
         w->AddUint32("tokenizer.ggml.bos_token_id", 2);
       }},
      {"tokenizer.ggml.eos_token_id",
       [](GgufWriter* w) {
         w->AddString("tokenizer.ggml.model", "llama");
         w->AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
         w->AddInt32("tokenizer.ggml.eos_token_id", -5);
       }},
      {"tokenizer.ggml.unknown_token_id",
       [](GgufWriter* w) {
         w->AddString("tokenizer.ggml.model", "llama");
         w->AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
         w->AddString("tokenizer.ggml.unknown_token_id", "0");
       }},
      {"tokenizer.ggml.merges",
       [](GgufWriter* w) {
         w->AddString("tokenizer.ggml.model", "gpt2");
         w->AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
       }},
      {"tokenizer.ggml.add_bos_token",
       [](GgufWriter* w) {
         w->AddString("tokenizer.ggml.model", "llama");
         w->AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
         w->AddUint32("tokenizer.ggml.add_bos_token", 1);
       }},
  };
  for (const Case& c : cases) {
    GgufWriter w = BaseWriter();
    c.build(&w);
    const Status status = LoadError(w);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.key << ": " << status.ToString();
    EXPECT_NE(status.message().find(c.key), std::string::npos) << status.ToString();
  }
}

TEST(VocabTest, CreateRejectsInconsistentVocabStructs) {
  {
    Vocab v = TinySpmVocab();
    v.scores.pop_back();
    auto t = Tokenizer::Create(v);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("tokenizer.ggml.scores"), std::string::npos);
  }
  {
    Vocab v = TinySpmVocab();
    v.bos_id = static_cast<int32_t>(v.tokens.size());
    auto t = Tokenizer::Create(v);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("tokenizer.ggml.bos_token_id"), std::string::npos);
  }
  {
    Vocab v = TinySpmVocab();
    v.tokens.clear();
    v.scores.clear();
    v.types.clear();
    v.bos_id = v.eos_id = v.unk_id = -1;
    EXPECT_FALSE(Tokenizer::Create(v).ok());
  }
  {
    Vocab v = TinySpmVocab();
    v.types[5] = static_cast<TokenType>(9);
    auto t = Tokenizer::Create(v);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("tokenizer.ggml.token_type"), std::string::npos);
  }
}

TEST(VocabTest, CreateNamesUnsupportedModelsAndPreTokenizers) {
  for (const char* model : {"bert", "t5", "rwkv", "whatever"}) {
    Vocab v = TinySpmVocab();
    v.model = model;
    auto t = Tokenizer::Create(v);
    ASSERT_FALSE(t.ok()) << model;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(std::string("'") + model + "'"), std::string::npos)
        << t.status().ToString();
  }
  Vocab v = TinyBpeVocab();
  v.pre = "no-such-pre";
  auto t = Tokenizer::Create(v);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("tokenizer.ggml.pre"), std::string::npos);
  EXPECT_NE(t.status().message().find("no-such-pre"), std::string::npos);
}

TEST(TinyTokenizerTest, SpmMergesByScoreAndFallsBackToBytes) {
  auto t = Tokenizer::Create(TinySpmVocab());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const Tokenizer& tok = **t;
  const int32_t space = tok.FindToken("\xE2\x96\x81");
  const int32_t space_ab = tok.FindToken("\xE2\x96\x81" "ab");
  const int32_t b = tok.FindToken("b");
  ASSERT_GE(space_ab, 0);
  // "▁ab" scores below "▁a" and "ab", but merges happen pairwise by best score: "▁"+"a"
  // (score -4) beats "a"+"b" (-5); then "▁a"+"b" is "▁ab" (-6).
  EXPECT_EQ(tok.Encode("ab", false), (std::vector<int32_t>{space_ab}));
  EXPECT_EQ(tok.Encode("ab", true), (std::vector<int32_t>{1, space_ab}));
  // 'c' has no piece: byte fallback <0x63> = id 3 + 0x63.
  EXPECT_EQ(tok.Encode("c", false), (std::vector<int32_t>{space, 3 + 0x63}));
  EXPECT_EQ(tok.Encode("bc", false), (std::vector<int32_t>{space, b, 3 + 0x63}));
  EXPECT_EQ(tok.Decode(tok.Encode(" ab c\xC3\xA9", true)), " ab c\xC3\xA9");
  EXPECT_EQ(tok.Encode("", false), std::vector<int32_t>{});
  EXPECT_EQ(tok.Encode("", true), std::vector<int32_t>{1});
  // Control tokens are text unless parse_special.
  EXPECT_EQ(tok.Encode("</s>", false, /*parse_special=*/true), (std::vector<int32_t>{2}));
  EXPECT_NE(tok.Encode("</s>", false, /*parse_special=*/false), (std::vector<int32_t>{2}));
}

TEST(TinyTokenizerTest, SpmWithoutByteTokensUsesUnknown) {
  Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "\xE2\x96\x81", "a"};
  v.types = {TokenType::kUnknown, TokenType::kNormal, TokenType::kNormal};
  v.unk_id = 0;
  auto t = Tokenizer::Create(v);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // One unknown token per character that has no piece (here the 2-byte 'é').
  EXPECT_EQ((*t)->Encode("a\xC3\xA9" "a", false), (std::vector<int32_t>{1, 2, 0, 2}));
}

TEST(TinyTokenizerTest, BpeMergesByRank) {
  auto t = Tokenizer::Create(TinyBpeVocab());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.Encode("ab", false), (std::vector<int32_t>{3}));
  EXPECT_EQ(tok.Encode("ab ab", false), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(tok.Encode("ba", false), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(tok.Decode(tok.Encode("ab ab", false)), "ab ab");
  EXPECT_EQ(tok.TokenToPiece(4), " ab");
  EXPECT_EQ(tok.Encode("ab<|endoftext|>", false, true), (std::vector<int32_t>{3, 5}));
  EXPECT_TRUE(tok.IsEndOfGeneration(5));
  EXPECT_EQ(tok.Encode("ab", true), (std::vector<int32_t>{3}));  // add_bos is false
}

// Harmony (gpt-oss): <|end|> ends a message, not the reply (<|return|> and <|call|> do), and
// the markup a reply is read by can be shown in the output while other control tokens are not.
TEST(TinyTokenizerTest, HarmonyEndsAndShownControls) {
  Vocab v = TinyBpeVocab();
  for (const char* c : {"<|end|>", "<|return|>", "<|call|>", "<|channel|>", "<|message|>"}) {
    v.tokens.push_back(c);
    v.types.push_back(TokenType::kControl);
  }
  const int32_t end = static_cast<int32_t>(v.tokens.size()) - 5;
  auto t = Tokenizer::Create(v);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const Tokenizer& tok = **t;
  EXPECT_FALSE(tok.IsEndOfGeneration(end));
  EXPECT_TRUE(tok.IsEndOfGeneration(end + 1));
  EXPECT_TRUE(tok.IsEndOfGeneration(end + 2));
  StreamingDetokenizer shown(tok, {end + 3, end + 4});
  std::string text;
  for (int32_t id : {end + 3, 3, end + 4, 3, end}) text += shown.Push(id);
  EXPECT_EQ(text + shown.Flush(), "<|channel|>ab<|message|>ab");  // <|end|> is not shown
  // Without harmony's <|return|>, <|end|> ends generation (Phi-3).
  Vocab phi = TinyBpeVocab();
  phi.tokens.push_back("<|end|>");
  phi.types.push_back(TokenType::kControl);
  auto p = Tokenizer::Create(phi);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE((*p)->IsEndOfGeneration(static_cast<int32_t>(phi.tokens.size()) - 1));
}

}  // namespace tokenizer_vocab_test
}  // namespace kvserve
