// The token trie, through DfaMask (tests/reference/dfa_mask.h), against the definition, token
// by token (a token is allowed when its bytes keep the automaton alive; end-of-generation only
// where it accepts), on real vocabularies from ../shared/tokenizer: SentencePiece with byte
// tokens, byte-level BPE, a 102k one.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/grammar/grammar.h"
#include "engine/grammar/regex.h"
#include "engine/grammar/token_trie.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/reference/dfa_mask.h"
#include "tests/reference/earley.h"
#include "tests/shared_tokenizer.h"

namespace kvserve {
namespace token_trie_test {


// Token by token, as the definition says.
TokenMask Reference(const TokenTrie& trie, const ByteDfa& dfa, int32_t state) {
  TokenMask mask(trie.vocab_size());
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    if (!trie.bytes(id).empty() && dfa.Walk(state, trie.bytes(id)) >= 0) mask.Set(id);
  }
  if (dfa.Accepts(state)) {
    for (int32_t id : trie.eog_tokens()) mask.Set(id);
  }
  return mask;
}

class TokenTrieTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenTrieTest, DfaMasksAreTheTokensThatKeepTheAutomatonAlive) {
  std::unique_ptr<Tokenizer> tok = fuzz::MemoryTokenizer(GetParam());
  if (tok == nullptr) {
    REQUIRE_SHARED_FILE(std::string("tokenizer/ggml-vocab-") + GetParam() + ".gguf");
    tok = testing::LoadSharedTokenizer(GetParam());
  }
  ASSERT_NE(tok, nullptr);
  const TokenTrie trie(*tok);
  ASSERT_GT(trie.num_nodes(), trie.vocab_size() / 2);
  // Patterns with their prefixes: JSON-ish strings, numbers, a choice, Unicode.
  const std::pair<const char*, std::vector<std::string>> kCases[] = {
      {"^\"[^\"\\\\]*\"$", {"", "\"", "\"hello wor", "\"x\""}},
      {"^-?(0|[1-9][0-9]*)(\\.[0-9]+)?$", {"", "-", "12", "0.", "3.14"}},
      {"^(true|false|null)$", {"", "t", "fal", "null"}},
      {"^[а-я ]{1,12}$", {"", "при", "\xD0"}},
      {"^\\d{4}-\\d{2}-\\d{2}$", {"", "2024-", "2024-01-3"}},
  };
  for (const auto& [pattern, prefixes] : kCases) {
    StatusOr<ByteDfa> dfa = CompileRegex(pattern);
    ASSERT_TRUE(dfa.ok()) << dfa.status().ToString();
    DfaMaskCache cache(&trie, &*dfa);
    for (const std::string& prefix : prefixes) {
      SCOPED_TRACE(std::string(pattern) + " after \"" + prefix + "\"");
      const int32_t state = dfa->Walk(dfa->start, prefix);
      ASSERT_GE(state, 0);
      const TokenMask mask = DfaMask(trie, *dfa, state);
      EXPECT_EQ(mask, Reference(trie, *dfa, state)) << mask.Count() << " tokens vs "
                                                    << Reference(trie, *dfa, state).Count();
      EXPECT_GT(mask.Count(), 0);
      EXPECT_EQ(cache.Mask(state), mask);
      EXPECT_EQ(cache.Mask(state), mask);  // served from the cache
      for (int32_t eog : trie.eog_tokens()) EXPECT_EQ(mask.Test(eog), dfa->Accepts(state));
    }
  }
  EXPECT_EQ(DfaMask(trie, ChoiceDfa({}), ByteDfa::kDead).Count(), 0);
}

TEST_P(TokenTrieTest, GrammarMasksAreTheTokensTheRecognizerCanConsume) {
  std::unique_ptr<Tokenizer> tok = fuzz::MemoryTokenizer(GetParam());
  if (tok == nullptr) {
    REQUIRE_SHARED_FILE(std::string("tokenizer/ggml-vocab-") + GetParam() + ".gguf");
    tok = testing::LoadSharedTokenizer(GetParam());
  }
  ASSERT_NE(tok, nullptr);
  const TokenTrie trie(*tok);
  StatusOr<Grammar> g = ParseGbnf(R"g(
root   ::= "{" ws "\"name\"" ws ":" ws string ws "," ws "\"tags\"" ws ":" ws "[" ws (string ws ("," ws string ws)*)? "]" ws "}"
string ::= "\"" [^"\\]* "\""
ws     ::= [ \n]{0,2}
)g");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const char* prefix : {"", "{ \"na", R"({"name": "Ada Lovelace)", R"({"name": "x", "tags": [)", R"({"name":"x","tags":[]})"}) {
    SCOPED_TRACE(prefix);
    EarleyRecognizer r(&*g);
    ASSERT_TRUE(r.AdvanceAll(prefix));
    const TokenMask mask = ReferenceGrammarMask(trie, &r);
    EXPECT_EQ(r.num_bytes(), static_cast<int>(std::string_view(prefix).size()));
    // Token by token.
    TokenMask reference(trie.vocab_size());
    for (int32_t id = 0; id < trie.vocab_size(); ++id) {
      if (trie.bytes(id).empty() || !r.AdvanceAll(trie.bytes(id))) continue;
      reference.Set(id);
      r.Rollback(static_cast<int>(trie.bytes(id).size()));
    }
    if (r.AcceptsEnd()) {
      for (int32_t id : trie.eog_tokens()) reference.Set(id);
    }
    EXPECT_EQ(mask, reference) << mask.Count() << " tokens vs " << reference.Count();
    EXPECT_GT(mask.Count(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenTrieTest,
                         ::testing::Values("memory-spm", "memory-bpe", "llama-spm", "gpt-2", "deepseek-llm"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::erase(name, '-');
                           return name;
                         });

}  // namespace token_trie_test
}  // namespace kvserve
