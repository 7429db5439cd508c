// GrammarCache's bounds (issue 54, item 2): a choice list's size, the compiled grammars' bytes,
// and specs that failed refused again without a compile; compiles on their own threads.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/grammar/structured_output.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace grammar_cache_test {

using Kind = StructuredOutputSpec::Kind;

template <typename F>
bool WaitFor(F condition) {
  for (int i = 0; i < 2000; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

StructuredOutputSpec Regex(std::string text) {
  StructuredOutputSpec s;
  s.kind = Kind::kRegex;
  s.text = std::move(text);
  return s;
}

class GrammarCacheTest : public ::testing::Test {
 protected:
  // A byte-level BPE vocabulary built in memory: the cache's bounds do not depend on it.
  void SetUp() override { tokenizer_ = fuzz::MakeBpeTokenizer("gpt-2"); }
  std::unique_ptr<Tokenizer> tokenizer_;
};

// A guided_choice of 256 KiB cost 256 MiB of automaton; now it is a 400.
TEST_F(GrammarCacheTest, AChoiceListPastItsBoundIsRefused) {
  GrammarCache cache(tokenizer_.get(), {.cache_entries = 8});
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
  GrammarCache cache(tokenizer_.get(), {.cache_entries = 8});
  const StructuredOutputSpec bad = Regex("((a{1000}){1000}){1000}");
  StatusOr<GrammarCache::Compiled> first = cache.Get(bad);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.num_compiles(), 1);
  StatusOr<GrammarCache::Compiled> again = cache.Get(bad);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().ToString(), first.status().ToString());
  EXPECT_EQ(cache.num_compiles(), 1);
  // A compile past the time limit is remembered too. A caller that stops waiting while the
  // compile is queued is told to retry (429), while it runs that it is slow (400).
  GrammarCache slow(tokenizer_.get(), {.compile_timeout = std::chrono::milliseconds(0)});
  for (int i = 0; i < 2; ++i) {
    const StatusCode code = slow.Get(Regex("[a-z]+")).status().code();
    EXPECT_TRUE(code == StatusCode::kResourceExhausted || code == StatusCode::kDeadlineExceeded) << static_cast<int>(code);
  }
  ASSERT_TRUE(WaitFor([&] { return slow.num_compiling() == 0; }));
  EXPECT_EQ(slow.Get(Regex("[a-z]+")).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(slow.num_compiles(), 1);
}

// A schema of `n` string properties, each with a pattern of its own: a compile that takes a
// while (every pattern is an automaton, intersected with the string's).
StructuredOutputSpec ManyPatterns(int n, const std::string& salt) {
  std::string properties;
  for (int i = 0; i < n; ++i) {
    properties += (i ? "," : "") + fmt::format(R"("{0}{1}":{{"type":"string","pattern":"^{0}{1}[a-z]{{2,{2}}}-[0-9]{{{3}}}$"}})",
                                               salt, i, i % 17 + 3, i % 13 + 1);
  }
  StructuredOutputSpec s;
  s.kind = Kind::kJsonSchema;
  s.text = R"({"type":"object","properties":{)" + properties + "}}";
  return s;
}

// Compiles run on the cache's threads: requests of one spec share one compile, and past
// max_waiting_compiles queued ones a new spec is refused at once (a 429), not run.
TEST_F(GrammarCacheTest, CompilesRunOnTheirOwnBoundedThreads) {
  GrammarCache cache(tokenizer_.get(), {.compile_threads = 1, .max_waiting_compiles = 1});
  ASSERT_TRUE(cache.Get(Regex("warm")).ok());  // the token trie is built by the first compile
  const StructuredOutputSpec big = ManyPatterns(1200, "p");  // about 0.3 s in Release
  std::vector<std::thread> threads;
  std::vector<StatusOr<GrammarCache::Compiled>> results(6, InternalError("not run"));
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = cache.Get(big); });
  }
  ASSERT_TRUE(WaitFor([&] { return cache.num_compiling() == 1; }));
  // One compile runs; a second spec waits; a third finds the queue full.
  std::thread second([&] { EXPECT_TRUE(cache.Get(ManyPatterns(20, "q")).ok()); });
  ASSERT_TRUE(WaitFor([&] { return cache.num_compiling() == 2; }));
  const Status third = cache.Get(ManyPatterns(20, "r")).status();
  const bool big_still_compiling = cache.num_compiling() == 2;
  for (std::thread& t : threads) t.join();
  second.join();
  int compiled = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    compiled += r->cache_hit ? 0 : 1;
  }
  EXPECT_EQ(compiled, 1);
  EXPECT_EQ(cache.num_compiles(), 3);  // warm, big, the second spec
  if (big_still_compiling) {
    EXPECT_EQ(third.code(), StatusCode::kResourceExhausted) << third.ToString();
  } else {
    ADD_FAILURE() << "the 1,200-pattern schema compiled before the third request: too fast to test the queue";
  }
  EXPECT_TRUE(cache.Get(ManyPatterns(20, "r")).ok());  // room again
}

// Grammars are kept within a byte budget (their automata and masks), not only a count.
TEST_F(GrammarCacheTest, CompiledGrammarsStayWithinTheirBytes) {
  constexpr size_t kBudget = size_t{4} << 20;
  GrammarCache cache(tokenizer_.get(), {.cache_bytes = kBudget});
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
