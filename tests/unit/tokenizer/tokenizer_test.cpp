// Tokenizer parity with the reference: llama.cpp's tokenizer test vectors for every vocabulary
// in shared/tokenizer/, round trips, the stories260K model's tokenization and the golden
// generations (prompt tokens and detokenized text), and encode speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace kvserve {
namespace tokenizer_test {

using ::kvserve::testing::SharedPath;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& relative) {
  auto file = GgufFile::Open(SharedPath(relative));
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return nullptr;
  auto vocab = LoadVocab(**file);
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  if (!vocab.ok()) return nullptr;
  auto tokenizer = Tokenizer::Create(std::move(vocab).value());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  if (!tokenizer.ok()) return nullptr;
  return std::move(tokenizer).value();
}

// NAME.gguf.inp: cases separated by "\n__ggml_vocab_test__\n" (the file ends with one).
std::vector<std::string> ReadCases(const std::string& path) {
  const std::string data = ReadFile(path);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  size_t pos = 0;
  for (size_t hit; (hit = data.find(separator, pos)) != std::string::npos;) {
    cases.push_back(data.substr(pos, hit - pos));
    pos = hit + separator.size();
  }
  return cases;
}

// NAME.gguf.out: one line of space-separated ids per case.
std::vector<std::vector<int32_t>> ReadExpected(const std::string& path) {
  std::istringstream in(ReadFile(path));
  std::vector<std::vector<int32_t>> expected;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    std::vector<int32_t> row;
    for (int32_t id; ids >> id;) row.push_back(id);
    expected.push_back(std::move(row));
  }
  return expected;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      out += "\\x" + std::to_string(c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

// ---- llama.cpp test vectors -------------------------------------------------------------------

class VocabVectorsTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string base() const { return "tokenizer/ggml-vocab-" + GetParam() + ".gguf"; }
};

TEST_P(VocabVectorsTest, TokenizerMatchesReferenceIds) {
  REQUIRE_SHARED_FILE(base());
  REQUIRE_SHARED_FILE(base() + ".inp");
  REQUIRE_SHARED_FILE(base() + ".out");
  const auto tokenizer = LoadTokenizer(base());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> cases = ReadCases(SharedPath(base() + ".inp"));
  const std::vector<std::vector<int32_t>> expected = ReadExpected(SharedPath(base() + ".out"));
  ASSERT_GE(expected.size(), cases.size());
  ASSERT_GT(cases.size(), 40u);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> ids =
        tokenizer->Encode(cases[i], /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, expected[i]) << GetParam() << " case " << i << ": \"" << Escape(cases[i])
                                << "\"";
    if (ids == expected[i]) ++passed;
  }
  std::printf("[ vectors  ] %-15s %zu/%zu cases match\n", GetParam().c_str(), passed,
              cases.size());
  RecordProperty("cases_passed", static_cast<int>(passed));
  RecordProperty("cases_total", static_cast<int>(cases.size()));
}

TEST_P(VocabVectorsTest, DecodeOfEncodeIsIdentity) {
  REQUIRE_SHARED_FILE(base());
  REQUIRE_SHARED_FILE(base() + ".inp");
  const auto tokenizer = LoadTokenizer(base());
  ASSERT_NE(tokenizer, nullptr);
  for (const std::string& text : ReadCases(SharedPath(base() + ".inp"))) {
    const std::vector<int32_t> ids = tokenizer->Encode(text, /*add_special=*/false);
    EXPECT_EQ(tokenizer->Decode(ids), text) << GetParam() << ": \"" << Escape(text) << "\"";
    // With BOS/EOS added as the vocabulary asks, control tokens decode to nothing.
    const std::vector<int32_t> with_special = tokenizer->Encode(text, /*add_special=*/true);
    EXPECT_EQ(tokenizer->Decode(with_special), text) << GetParam();
  }
}

TEST_P(VocabVectorsTest, EncodesTenKilobytesInAFewMilliseconds) {
  REQUIRE_SHARED_FILE(base());
  REQUIRE_SHARED_FILE(base() + ".inp");
  const auto tokenizer = LoadTokenizer(base());
  ASSERT_NE(tokenizer, nullptr);
  std::string text;
  const std::vector<std::string> cases = ReadCases(SharedPath(base() + ".inp"));
  while (text.size() < 10 * 1024) {
    for (const std::string& c : cases) text += c + "\n";
  }
  (void)tokenizer->Encode(text, false);  // warm up
  const auto start = std::chrono::steady_clock::now();
  constexpr int kRuns = 5;
  size_t num_tokens = 0;
  for (int i = 0; i < kRuns; ++i) num_tokens += tokenizer->Encode(text, false).size();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      kRuns;
  std::printf("[ speed    ] %-15s %zu bytes -> %zu tokens in %.2f ms\n", GetParam().c_str(),
              text.size(), num_tokens / kRuns, ms);
  // "A few ms" in Release; the bound leaves room for sanitizer and debug builds.
  EXPECT_LT(ms, 200.0);
}

TEST_P(VocabVectorsTest, ConcurrentEncodesAgreeWithSerialOnes) {
  REQUIRE_SHARED_FILE(base());
  REQUIRE_SHARED_FILE(base() + ".inp");
  const auto tokenizer = LoadTokenizer(base());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> cases = ReadCases(SharedPath(base() + ".inp"));
  std::vector<std::vector<int32_t>> serial;
  for (const std::string& c : cases) serial.push_back(tokenizer->Encode(c, true));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < cases.size(); ++i) {
          if (tokenizer->Encode(cases[i], true) != serial[i]) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, VocabVectorsTest,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "starcoder", "refact",
                                           "mpt", "falcon", "deepseek-coder", "deepseek-llm"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name;
                           for (char c : info.param) name.push_back(c == '-' ? '_' : c);
                           return name;
                         });

// Invalid UTF-8 survives a round trip where every byte has a token: SentencePiece byte
// fallback, and GPT-2's byte alphabet (all 256 characters are tokens in gpt-2's vocabulary;
// not in falcon's, where bytes such as 0xFF have no token and are dropped, as in llama.cpp).
TEST(InvalidUtf8Test, RoundTripsThroughByteTokens) {
  const std::string text = "\xFF\xFE abc \xC3 \xE2\x82 end \x80\xC0\xAF caf\xC3\xA9 \xED\xA0\x80!";
  for (const char* name : {"tokenizer/ggml-vocab-llama-spm.gguf", "tokenizer/ggml-vocab-gpt-2.gguf",
                           "tokenizer/ggml-vocab-phi-3.gguf", "models/stories260K.gguf"}) {
    if (!::kvserve::testing::SharedFileExists(name)) continue;
    const auto tokenizer = LoadTokenizer(name);
    ASSERT_NE(tokenizer, nullptr);
    const std::vector<int32_t> ids = tokenizer->Encode(text, /*add_special=*/true);
    EXPECT_EQ(tokenizer->Decode(ids), text) << name;
  }
}

// ---- stories260K ------------------------------------------------------------------------------

constexpr const char* kStories = "models/stories260K.gguf";
constexpr const char* kGolden = "golden/stories260K-greedy.jsonl";

TEST(StoriesTokenizerTest, OnceUponATimeWithBos) {
  REQUIRE_SHARED_FILE(kStories);
  const auto tokenizer = LoadTokenizer(kStories);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Encode("Once upon a time", /*add_special=*/true),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tokenizer->Encode("Once upon a time", /*add_special=*/false),
            (std::vector<int32_t>{403, 407, 261, 378}));
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_EQ(tokenizer->FindToken("<0x0A>"), 13);
  EXPECT_EQ(tokenizer->FindToken("no such piece"), -1);
}

TEST(StoriesTokenizerTest, NewlineIsByteToken13) {
  REQUIRE_SHARED_FILE(kStories);
  const auto tokenizer = LoadTokenizer(kStories);
  ASSERT_NE(tokenizer, nullptr);
  // The leading space becomes the piece "▁" (410); the newline has no piece and falls back to
  // <0x0A> (as llama-spm's vectors show for "\n": 29871 13).
  EXPECT_EQ(tokenizer->Encode("\n", /*add_special=*/false), (std::vector<int32_t>{410, 13}));
  EXPECT_EQ(tokenizer->TokenToPiece(13), "\n");
  const std::vector<int32_t> two_lines = tokenizer->Encode("a\nb", /*add_special=*/false);
  EXPECT_NE(std::find(two_lines.begin(), two_lines.end(), 13), two_lines.end());
  EXPECT_EQ(tokenizer->Decode(two_lines), "a\nb");
}

TEST(StoriesTokenizerTest, EndOfGenerationIsOnlyEos) {
  REQUIRE_SHARED_FILE(kStories);
  const auto tokenizer = LoadTokenizer(kStories);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(2));
  EXPECT_FALSE(tokenizer->IsEndOfGeneration(1));  // BOS starts a new story
  EXPECT_FALSE(tokenizer->IsEndOfGeneration(13));
  EXPECT_EQ(tokenizer->TokenToPiece(1), "");
  EXPECT_EQ(tokenizer->TokenToPiece(1, /*render_special=*/true), "<s>");
  EXPECT_EQ(tokenizer->TokenToPiece(403), " Once");
}

// Minimal JSON helpers for the golden lines: the value of "key" as a string or an int array.
std::string JsonString(const std::string& line, const std::string& key) {
  size_t pos = line.find("\"" + key + "\": \"");
  if (pos == std::string::npos) return {};
  pos += key.size() + 5;
  std::string out;
  while (pos < line.size() && line[pos] != '"') {
    char c = line[pos++];
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    c = line[pos++];
    switch (c) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'u': {
        const unsigned cp = std::stoul(line.substr(pos, 4), nullptr, 16);
        pos += 4;
        EXPECT_LT(cp, 0x80u) << "golden file: only ASCII \\u escapes are handled here";
        out.push_back(static_cast<char>(cp));
        break;
      }
      default: out.push_back(c); break;  // \" \\ \/
    }
  }
  return out;
}

std::vector<int32_t> JsonIntArray(const std::string& line, const std::string& key) {
  std::vector<int32_t> out;
  size_t pos = line.find("\"" + key + "\": [");
  if (pos == std::string::npos) return out;
  pos += key.size() + 5;
  const size_t end = line.find(']', pos);
  std::string body = line.substr(pos, end - pos);
  for (char& c : body) c = c == ',' ? ' ' : c;
  std::istringstream in(body);
  for (int32_t v; in >> v;) out.push_back(v);
  return out;
}

TEST(StoriesTokenizerTest, GoldenPromptTokensAndText) {
  REQUIRE_SHARED_FILE(kStories);
  REQUIRE_SHARED_FILE(kGolden);
  const auto tokenizer = LoadTokenizer(kStories);
  ASSERT_NE(tokenizer, nullptr);
  std::istringstream lines(ReadFile(SharedPath(kGolden)));
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const std::string prompt = JsonString(line, "prompt");
    const std::vector<int32_t> prompt_tokens = JsonIntArray(line, "prompt_tokens");
    const std::vector<int32_t> tokens = JsonIntArray(line, "tokens");
    const std::string text = JsonString(line, "text");
    ASSERT_FALSE(prompt.empty());
    ASSERT_FALSE(prompt_tokens.empty());
    ASSERT_FALSE(tokens.empty());
    EXPECT_EQ(tokenizer->Encode(prompt, /*add_special=*/true), prompt_tokens) << prompt;
    EXPECT_EQ(tokenizer->Decode(prompt_tokens), prompt);
    // Generated text continues the prompt: its leading space is kept.
    EXPECT_EQ(tokenizer->Decode(tokens, /*strip_leading_space=*/false), text) << prompt;
    StreamingDetokenizer stream(*tokenizer);
    std::string streamed;
    for (int32_t id : tokens) streamed += stream.Push(id);
    streamed += stream.Flush();
    EXPECT_EQ(streamed, text) << prompt;
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

}  // namespace tokenizer_test
}  // namespace kvserve
