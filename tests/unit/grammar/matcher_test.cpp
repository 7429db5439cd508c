// GrammarMatcher::FillMask against the definition, token by token: a token is in the mask when
// AcceptToken takes it (then Rollback), end-of-generation when CanEnd. Checked at every token
// of real instances on SentencePiece (byte tokens), byte-level BPE and the 102k deepseek
// vocabulary, for JSON Schemas, a GBNF grammar (against the byte-level Earley reference) and
// a regex (against DfaMask); and Rollback restores masks exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/reference/dfa_mask.h"
#include "tests/reference/earley.h"
#include "tests/shared_tokenizer.h"

namespace kvserve {
namespace matcher_test {


TokenMask Reference(GrammarMatcher* m, const TokenTrie& trie) {
  TokenMask mask(trie.vocab_size());
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    if (m->AcceptToken(id)) {
      mask.Set(id);
      m->Rollback(1);
    }
  }
  if (m->CanEnd()) {
    for (int32_t id : trie.eog_tokens()) mask.Set(id);
  }
  return mask;
}

// `text` as the longest tokens from the left (exactly its bytes: a SentencePiece tokenizer
// would add a leading space).
std::vector<int32_t> GreedyTokens(const TokenTrie& trie, const std::string& text) {
  std::vector<int32_t> out;
  for (size_t pos = 0; pos < text.size();) {
    int32_t node = 0, best = -1;
    size_t best_len = 0, len = 0;
    while (pos + len < text.size()) {
      int32_t next = -1;
      for (int32_t c = node + 1; c < trie.node(node).end; c = trie.node(c).end) {
        if (trie.node(c).byte == static_cast<uint8_t>(text[pos + len])) next = c;
      }
      if (next < 0) break;
      node = next, ++len;
      if (!trie.tokens_at(node).empty()) best = trie.tokens_at(node)[0], best_len = len;
    }
    if (best < 0) return {};
    out.push_back(best);
    pos += best_len;
  }
  return out;
}

// At each token of `text`, the mask equals the reference; the text is accepted to its end.
void CheckAlong(const std::shared_ptr<CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  TokenMask mask(g->trie().vocab_size());
  const std::vector<int32_t> tokens = GreedyTokens(g->trie(), text);
  ASSERT_FALSE(tokens.empty()) << text;
  std::vector<TokenMask> seen;
  for (size_t i = 0; i <= tokens.size(); ++i) {
    m.FillMask(&mask);
    const TokenMask ref = Reference(&m, g->trie());
    ASSERT_TRUE(mask == ref) << "at token " << i << " of " << text << ": " << mask.Count() << " vs " << ref.Count();
    seen.push_back(mask);
    if (i == tokens.size()) break;
    ASSERT_TRUE(mask.Test(tokens[i])) << "token " << i << " of " << text;
    ASSERT_TRUE(m.AcceptToken(tokens[i]));
  }
  EXPECT_TRUE(m.CanEnd()) << text;
  // Rollback: back to each earlier position, the same mask.
  for (size_t back = 1; back <= tokens.size(); back += 3) {
    GrammarMatcher r(g);
    for (int32_t t : tokens) ASSERT_TRUE(r.AcceptToken(t));
    r.Rollback(static_cast<int>(back));
    r.FillMask(&mask);
    EXPECT_TRUE(mask == seen[tokens.size() - back]) << "rollback " << back << " of " << text;
  }
}

class MatcherTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    tok_ = fuzz::MemoryTokenizer(GetParam());
    if (tok_ == nullptr) {
      REQUIRE_SHARED_FILE(std::string("tokenizer/ggml-vocab-") + GetParam() + ".gguf");
      tok_ = testing::LoadSharedTokenizer(GetParam());
    }
    ASSERT_NE(tok_, nullptr);
    trie_ = std::make_unique<TokenTrie>(*tok_);
  }
  std::shared_ptr<CompiledGrammar> Schema(const char* schema) {
    StatusOr<CompiledSchema> c = CompileJsonSchema(schema);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::make_shared<CompiledGrammar>(std::move(c->grammar), trie_.get()) : nullptr;
  }
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<TokenTrie> trie_;
};

TEST_P(MatcherTest, JsonSchemaMasksAreTheTokensTheMatcherAccepts) {
  const auto g = Schema(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0},
      "tags": {"type": "array", "items": {"enum": ["a", "b c", "été"]}},
      "score": {"type": "number"}, "when": {"type": "string", "format": "date"}},
      "required": ["name"], "additionalProperties": {"type": "boolean"}})");
  ASSERT_NE(g, nullptr);
  CheckAlong(g, R"({"name": "Zoë \"Z\"", "age": 42, "tags": ["b c", "été"], "score": -1.5e3, "when": "2024-01-31", "x": true})");
  CheckAlong(g, R"({"name":"a","extra":false})");
  const auto any = Schema("{}");
  ASSERT_NE(any, nullptr);
  CheckAlong(any, R"([1, {"a": null, "b": [true, "x\ny"]}, -0.5])");
}

// Walks shared between grammars (SharedMaskCache: counts far from a bound share one walk,
// plain subtrees marked at once) give each grammar its exact masks: strings counted near and
// far from their bounds, keys that must differ from the named ones, a searched pattern.
TEST_P(MatcherTest, SharedWalksGiveEveryGrammarItsExactMasks) {
  auto shared = std::make_shared<SharedMaskCache>();
  auto compile = [&](const char* schema) {
    StatusOr<CompiledSchema> c = CompileJsonSchema(schema);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::make_shared<CompiledGrammar>(std::move(c->grammar), trie_.get(), shared) : nullptr;
  };
  const char* kSchemas[] = {
      R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 12},
          "b": {"type": "string", "minLength": 3, "maxLength": 90}, "c": {"type": "string", "minLength": 5}},
          "required": ["a", "b"], "additionalProperties": false})",
      R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 12}, "cat": {"type": "integer"}},
          "additionalProperties": {"type": "string", "pattern": "id-[0-9]+"}})",
  };
  const std::string long_b = R"(Once upon a time, 从前有一座山, a \"long\" string\twith escapes and words)";
  for (int round = 0; round < 2; ++round) {  // the second round finds every walk in the cache
    const auto g0 = compile(kSchemas[0]);
    const auto g1 = compile(kSchemas[1]);
    ASSERT_NE(g0, nullptr);
    ASSERT_NE(g1, nullptr);
    CheckAlong(g0, R"({"a": "twelve chars", "b": ")" + long_b + R"(", "c": "more than five"})");
    CheckAlong(g0, R"({"a": "", "b": "abc"})");
    CheckAlong(g1, R"({"a": "é\n", "cat": 3, "ca": "x id-42 y", "catalog": "id-7"})");
  }
  EXPECT_GT(shared->size(), 0u);
}

// Issue 54, D2: an ambiguous grammar made the Earley work per token grow without bound (2-12 s
// per step for the whole batch). The parser now stops at GrammarLimits{}.max_parser_work_per_token per
// token and the matcher says so; a large unambiguous grammar (llama.cpp's json.gbnf) stays far
// below the bound over a real vocabulary.
TEST_P(MatcherTest, AnAmbiguousGrammarExhaustsItsWorkBoundAndJsonGbnfStaysFarBelow) {
  StatusOr<Grammar> json = ParseGbnf(R"g(root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20})g");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  GrammarMatcher jm(std::make_shared<CompiledGrammar>(ByteGrammar(*json), trie_.get()));
  TokenMask mask(trie_->vocab_size());
  int64_t most = 0;
  const std::vector<int32_t> doc = GreedyTokens(*trie_, R"({"name": "kvserve", "tags": ["a", "b c"], "n": -12.5e3, "ok": true, "o": {"x": null}})");
  ASSERT_FALSE(doc.empty());
  for (int32_t t : doc) {
    const int64_t before = jm.parser_work();
    jm.FillMask(&mask);
    ASSERT_TRUE(mask.Test(t));
    ASSERT_TRUE(jm.AcceptToken(t));
    most = std::max(most, jm.parser_work() - before);
  }
  EXPECT_FALSE(jm.exhausted());
  EXPECT_LT(most * 4, GrammarLimits{}.max_parser_work_per_token) << "json.gbnf's busiest token: " << most;
  std::printf("json.gbnf: at most %lld parser steps for one token (bound %lld)\n", static_cast<long long>(most),
              static_cast<long long>(GrammarLimits{}.max_parser_work_per_token));

  // The ambiguous grammar under a bound of 2^20: reaching the default one takes a sanitized
  // build minutes on a vocabulary of single bytes (the work before it grows with every token).
  StatusOr<Grammar> ambiguous = ParseGbnf("root ::= s\ns ::= s s s | s s | [a-z ]");
  ASSERT_TRUE(ambiguous.ok());
  constexpr int64_t kBound = int64_t{1} << 20;
  GrammarMatcher am(std::make_shared<CompiledGrammar>(ByteGrammar(*ambiguous), trie_.get(), nullptr, kBound));
  const std::vector<int32_t> words = GreedyTokens(*trie_, "the quick brown fox jumps over the lazy dog ");
  ASSERT_FALSE(words.empty());
  int tokens = 0;
  for (; tokens < 2000 && !am.exhausted(); ++tokens) {
    am.FillMask(&mask);
    if (am.exhausted()) break;
    ASSERT_TRUE(am.AcceptToken(words[static_cast<size_t>(tokens) % words.size()])) << tokens;
  }
  EXPECT_TRUE(am.exhausted()) << "after " << tokens << " tokens";
  std::printf("the ambiguous grammar ran out of its bound after %d tokens\n", tokens);
}

TEST_P(MatcherTest, GbnfMasksEqualTheByteLevelEarleyReference) {
  StatusOr<Grammar> gbnf = ParseGbnf(R"g(root ::= "(" expr ")"
expr ::= term (("+" | "-") term)*
term ::= [0-9]+ | "x" | "(" expr ")")g");
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().ToString();
  const auto g = std::make_shared<CompiledGrammar>(ByteGrammar(*gbnf), trie_.get());
  CheckAlong(g, "(12+(x-3)+456)");
  // The same masks as ReferenceGrammarMask over the byte-level recognizer.
  EarleyRecognizer rec(&*gbnf);
  GrammarMatcher m(g);
  TokenMask mask(trie_->vocab_size());
  for (char c : std::string("(1+(x")) {
    ASSERT_TRUE(rec.Advance(static_cast<uint8_t>(c)));
    ASSERT_TRUE(m.AcceptBytes(std::string(1, c)));
    m.FillMask(&mask);
    EXPECT_TRUE(mask == ReferenceGrammarMask(*trie_, &rec)) << "after " << c;
  }
}

TEST_P(MatcherTest, RegexAndChoiceMasksEqualDfaMasks) {
  StatusOr<LexGrammar> re = RegexGrammar("[a-z]{2,5}-\\d+");
  ASSERT_TRUE(re.ok());
  const auto g = std::make_shared<CompiledGrammar>(*std::move(re), trie_.get());
  const ByteDfa dfa = *CompileRegex("[a-z]{2,5}-\\d+", {.anchored = true});
  GrammarMatcher m(g);
  TokenMask mask(trie_->vocab_size());
  int32_t state = dfa.start;
  for (char c : std::string("abc-12")) {
    m.FillMask(&mask);
    EXPECT_TRUE(mask == DfaMask(*trie_, dfa, state));
    ASSERT_TRUE(m.AcceptBytes(std::string(1, c)));
    state = dfa.Step(state, static_cast<uint8_t>(c));
  }
  const auto choice = std::make_shared<CompiledGrammar>(ChoiceGrammar({"yes", "no", "maybe so"}), trie_.get());
  CheckAlong(choice, "maybe so");
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, MatcherTest,
                         ::testing::Values("memory-spm", "memory-bpe", "llama-spm", "gpt-2", "deepseek-llm"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace matcher_test
}  // namespace kvserve
