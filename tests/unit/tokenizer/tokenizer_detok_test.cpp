// StreamingDetokenizer: deltas hold back incomplete UTF-8, Flush replaces leftovers with
// U+FFFD, control tokens give no text, and the deltas concatenate to Decode(ids, false).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace kvserve {
namespace tokenizer_detok_test {

using ::kvserve::testing::SharedPath;

constexpr const char* kStories = "models/stories260K.gguf";
constexpr const char* kReplacement = "\xEF\xBF\xBD";

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

// Strict UTF-8 check (no overlongs, surrogates or truncated sequences).
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (c < 0x80) {
      n = 1;
    } else if (c >= 0xC2 && c < 0xE0) {
      n = 2;
    } else if (c >= 0xE0 && c < 0xF0) {
      n = 3;
      lo = c == 0xE0 ? 0xA0 : 0x80;
      hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c < 0xF5) {
      n = 4;
      lo = c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

// Streams `ids`, checking that every delta is whole UTF-8; returns the concatenation.
std::string StreamAll(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  StreamingDetokenizer stream(tokenizer);
  std::string text;
  for (int32_t id : ids) {
    const std::string delta = stream.Push(id);
    EXPECT_TRUE(IsValidUtf8(delta)) << "delta after token " << id;
    text += delta;
  }
  const std::string rest = stream.Flush();
  EXPECT_TRUE(IsValidUtf8(rest));
  return text + rest;
}

class StoriesDetokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!::kvserve::testing::SharedFileExists(kStories)) {
      GTEST_SKIP() << "reference file missing: " << SharedPath(kStories);
    }
    tokenizer_ = LoadTokenizer(kStories);
    ASSERT_NE(tokenizer_, nullptr);
  }
  int32_t Byte(int b) const {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const int32_t id = tokenizer_->FindToken(name);
    EXPECT_GE(id, 0) << name;
    return id;
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(StoriesDetokenizerTest, ByteTokensOfOneCharacterComeOutWhole) {
  StreamingDetokenizer stream(*tokenizer_);
  EXPECT_EQ(stream.Push(Byte(0xE2)), "");
  EXPECT_EQ(stream.Push(Byte(0x96)), "");
  EXPECT_EQ(stream.Push(Byte(0x81)), "\xE2\x96\x81");  // U+2581 as text, not a space
  EXPECT_EQ(stream.Flush(), "");
  // A four-byte emoji after ASCII text.
  EXPECT_EQ(stream.Push(tokenizer_->FindToken("\xE2\x96\x81Once")), " Once");
  EXPECT_EQ(stream.Push(Byte(0xF0)), "");
  EXPECT_EQ(stream.Push(Byte(0x9F)), "");
  EXPECT_EQ(stream.Push(Byte(0x98)), "");
  EXPECT_EQ(stream.Push(Byte(0x80)), "\xF0\x9F\x98\x80");
}

TEST_F(StoriesDetokenizerTest, FlushReplacesAnIncompleteCharacter) {
  StreamingDetokenizer stream(*tokenizer_);
  EXPECT_EQ(stream.Push(Byte(0xE2)), "");
  EXPECT_EQ(stream.Push(Byte(0x96)), "");
  EXPECT_EQ(stream.Flush(), kReplacement);
  EXPECT_EQ(stream.Flush(), "");
}

TEST_F(StoriesDetokenizerTest, InvalidBytesBecomeReplacementCharacters) {
  StreamingDetokenizer stream(*tokenizer_);
  // Bytes that can never start a character are replaced at once, not held back.
  EXPECT_EQ(stream.Push(Byte(0xFF)), kReplacement);
  EXPECT_EQ(stream.Push(Byte(0x80)), kReplacement);
  // A lead byte followed by a non-continuation: one U+FFFD, then the byte itself.
  EXPECT_EQ(stream.Push(Byte(0xE2)), "");
  EXPECT_EQ(stream.Push(Byte(0x41)), std::string(kReplacement) + "A");
  // Overlong encodings and surrogates are invalid too.
  EXPECT_EQ(stream.Push(Byte(0xC0)), kReplacement);
  EXPECT_EQ(stream.Push(Byte(0xED)), "");
  EXPECT_EQ(stream.Push(Byte(0xA0)), std::string(kReplacement) + kReplacement);
  EXPECT_EQ(stream.Flush(), "");
}

TEST_F(StoriesDetokenizerTest, ControlTokensProduceNoText) {
  StreamingDetokenizer stream(*tokenizer_);
  EXPECT_EQ(stream.Push(tokenizer_->bos_id()), "");
  EXPECT_EQ(stream.Push(tokenizer_->eos_id()), "");
  EXPECT_EQ(stream.Push(0), "");  // <unk>
  EXPECT_EQ(stream.Flush(), "");
}

TEST_F(StoriesDetokenizerTest, DeltasConcatenateToDecodeWithoutStripping) {
  const std::string text =
      "H\xC3\xA9llo w\xC3\xB6rld \xE2\x98\x83 \xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC\n"
      "Once upon a time, there was a little girl.";
  const std::vector<int32_t> ids = tokenizer_->Encode(text, /*add_special=*/true);
  const std::string decoded = tokenizer_->Decode(ids, /*strip_leading_space=*/false);
  EXPECT_EQ(decoded, " " + text);
  EXPECT_EQ(tokenizer_->Decode(ids), text);
  EXPECT_EQ(StreamAll(*tokenizer_, ids), decoded);
}

TEST(BpeDetokenizerTest, DeltasConcatenateToDecodeForEveryTestInput) {
  const std::string base = "tokenizer/ggml-vocab-gpt-2.gguf";
  REQUIRE_SHARED_FILE(base);
  REQUIRE_SHARED_FILE(base + ".inp");
  const auto tokenizer = LoadTokenizer(base);
  ASSERT_NE(tokenizer, nullptr);
  std::ifstream in(SharedPath(base + ".inp"), std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string all = buffer.str();
  const std::string separator = "\n__ggml_vocab_test__\n";
  int checked = 0;
  size_t pos = 0;
  for (size_t hit; (hit = all.find(separator, pos)) != std::string::npos;) {
    const std::string text = all.substr(pos, hit - pos);
    pos = hit + separator.size();
    const std::vector<int32_t> ids = tokenizer->Encode(text, false);
    EXPECT_EQ(StreamAll(*tokenizer, ids), tokenizer->Decode(ids, false));
    EXPECT_EQ(StreamAll(*tokenizer, ids), text);
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

}  // namespace tokenizer_detok_test
}  // namespace kvserve
