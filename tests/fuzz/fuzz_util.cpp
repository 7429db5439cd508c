#include "tests/fuzz/fuzz_util.h"

#include "engine/model/synthetic.h"

namespace kvserve::fuzz {
namespace {

std::string Utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others to 256 + n.
std::vector<std::string> ByteAlphabet() {
  std::vector<std::string> chars(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    chars[b] = Utf8(printable ? b : next++);
  }
  return chars;
}

}  // namespace

std::unique_ptr<Tokenizer> MakeSpmTokenizer(int size) {
  StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(MakeSyntheticVocab(size));
  FUZZ_CHECK(t.ok());
  return std::move(t).value();
}

std::unique_ptr<Tokenizer> MakeBpeTokenizer(const std::string& pre) {
  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  const std::vector<std::string> bytes = ByteAlphabet();
  v.tokens = bytes;
  const std::string space = bytes[' '];
  auto merge = [&](const std::string& a, const std::string& b) {
    v.merges.push_back(a + " " + b);
    v.tokens.push_back(a + b);
  };
  for (char c = 'a'; c <= 'z'; ++c) merge(space, std::string(1, c));
  for (const char* pair : {"th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "st", "es", "or", "te"}) {
    merge(std::string(1, pair[0]), std::string(1, pair[1]));
  }
  merge(space + "t", "he");
  merge("t", "he");
  merge(space + "a", "nd");
  v.tokens.push_back("<|endoftext|>");
  v.tokens.push_back("<|im_start|>");
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.types[v.tokens.size() - 2] = TokenType::kControl;
  v.types[v.tokens.size() - 1] = TokenType::kUserDefined;
  v.eos_id = static_cast<int32_t>(v.tokens.size() - 2);
  v.bos_id = v.eos_id;
  v.add_bos = false;
  v.add_space_prefix = false;
  StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(v));
  FUZZ_CHECK(t.ok());
  return std::move(t).value();
}

std::unique_ptr<Tokenizer> MemoryTokenizer(std::string_view name) {
  if (name == "memory-spm") return MakeSpmTokenizer();
  if (name == "memory-bpe") return MakeBpeTokenizer("gpt-2");
  return nullptr;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + static_cast<size_t>(k) >= s.size()) return false;
      const auto cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

}  // namespace kvserve::fuzz
