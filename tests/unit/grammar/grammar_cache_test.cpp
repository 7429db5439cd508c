// GrammarCache's bounds (issue 54, item 2): a choice list's size, the compiled grammars' bytes,
// and specs that failed refused again without a compile. Over a real vocabulary (gpt-2).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/structured_output.h"
#include "tests/shared_tokenizer.h"

namespace kvserve {
namespace grammar_cache_test {

using Kind = StructuredOutputSpec::Kind;

StructuredOutputSpec Regex(std::string text) {
  StructuredOutputSpec s;
  s.kind = Kind::kRegex;
  s.text = std::move(text);
  return s;
}

class GrammarCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_SHARED_FILE("tokenizer/ggml-vocab-gpt-2.gguf");
    tokenizer_ = testing::LoadSharedTokenizer("gpt-2");
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

// A guided_choice of 256 KiB cost 256 MiB of automaton; now it is a 400.
TEST_F(GrammarCacheTest, AChoiceListPastItsBoundIsRefused) {
  GrammarCache cache(tokenizer_.get(), 8, std::chrono::seconds(10));
  StructuredOutputSpec choice;
  choice.kind = Kind::kChoice;
  for (int i = 0; i < 4096; ++i) choice.choices.push_back("option number " + std::to_string(i) + std::string(48, 'x'));
  StatusOr<GrammarCache::Compiled> big = cache.Get(choice);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("at most"), std::string::npos) << big.status().message();
  choice.choices.resize(100);
  EXPECT_TRUE(cache.Get(choice).ok());
}

// A spec that failed (a client's retries, a slow schema sent again) is refused from memory.
TEST_F(GrammarCacheTest, AFailedSpecIsRefusedAgainWithoutACompile) {
  GrammarCache cache(tokenizer_.get(), 8, std::chrono::seconds(10));
  const StructuredOutputSpec bad = Regex("((a{1000}){1000}){1000}");
  StatusOr<GrammarCache::Compiled> first = cache.Get(bad);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.num_compiles(), 1);
  StatusOr<GrammarCache::Compiled> again = cache.Get(bad);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().ToString(), first.status().ToString());
  EXPECT_EQ(cache.num_compiles(), 1);
  // A compile past the time limit is remembered too.
  GrammarCache slow(tokenizer_.get(), 8, std::chrono::milliseconds(0));
  EXPECT_EQ(slow.Get(Regex("[a-z]+")).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(slow.Get(Regex("[a-z]+")).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(slow.num_compiles(), 1);
}

// Grammars are kept within a byte budget (their automata and masks), not only a count.
TEST_F(GrammarCacheTest, CompiledGrammarsStayWithinTheirBytes) {
  constexpr size_t kBudget = size_t{4} << 20;
  GrammarCache cache(tokenizer_.get(), 64, std::chrono::seconds(10), kBudget);
  size_t largest = 0;
  static constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  uint64_t seed = 1;
  for (int i = 0; i < 12; ++i) {
    // Each about 3,000 automaton states of 63 byte classes: 300 random strings of 12 characters.
    StructuredOutputSpec choice;
    choice.kind = Kind::kChoice;
    for (int k = 0; k < 300; ++k) {
      std::string text;
      for (int j = 0; j < 12; ++j) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        text += kAlphabet[(seed >> 33) % kAlphabet.size()];
      }
      choice.choices.push_back(std::move(text));
    }
    StatusOr<GrammarCache::Compiled> c = cache.Get(choice);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    largest = std::max(largest, c->grammar->ApproxBytes());
    EXPECT_LE(cache.cached_bytes(), kBudget + largest);
  }
  EXPECT_GT(largest, size_t{512} << 10);
  EXPECT_LE(cache.cached_bytes(), kBudget);
}

}  // namespace grammar_cache_test
}  // namespace kvserve
