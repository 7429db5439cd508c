// Tokenizer base (dispatch, special-token splitting, Decode) and StreamingDetokenizer.
// The algorithms live in spm_tokenizer.cpp and bpe_tokenizer.cpp; vocab.cpp reads/writes GGUF.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <bitset>

#include "engine/tokenizer/bpe_tokenizer.h"
#include "engine/tokenizer/spm_tokenizer.h"

namespace kvserve {
namespace {

// Token texts that end a turn (llama.cpp's end-of-generation names).
constexpr std::string_view kEndOfTurnNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "<|return|>", "<|call|>",
};
// Harmony (gpt-oss): <|end|> ends a message (the reasoning's), not the reply, which ends with
// <|return|> or <|call|>.
constexpr std::string_view kHarmonyEnd = "<|return|>";

// One step of UTF-8 validation at the start of [p, p + n), n >= 1.
struct Utf8Step {
  enum Kind { kComplete, kIncomplete, kInvalid } kind;
  size_t length;  // bytes of the character, of the valid prefix, or of the invalid subpart
};

Utf8Step CheckUtf8(const unsigned char* p, size_t n) {
  const unsigned char c = p[0];
  if (c < 0x80) return {Utf8Step::kComplete, 1};
  size_t need;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c < 0xC2) {
    return {Utf8Step::kInvalid, 1};  // continuation byte or overlong lead
  } else if (c < 0xE0) {
    need = 2;
  } else if (c < 0xF0) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c < 0xF5) {
    need = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return {Utf8Step::kInvalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (k >= n) return {Utf8Step::kIncomplete, k};
    const unsigned char b = p[k];
    const unsigned char min = k == 1 ? lo : 0x80;
    const unsigned char max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return {Utf8Step::kInvalid, k};
  }
  return {Utf8Step::kComplete, need};
}

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

// ---- Tokenizer --------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(Vocab vocab) {
  RETURN_IF_ERROR(ValidateVocab(vocab));
  if (vocab.model == "llama") {
    return std::unique_ptr<Tokenizer>(std::make_unique<SpmTokenizer>(std::move(vocab)));
  }
  if (vocab.model == "gpt2") return BpeTokenizer::Create(std::move(vocab));
  return InvalidArgumentError("tokenizer.ggml.model '" + vocab.model +
                              "' is not supported (supported: 'llama' = SentencePiece-style, "
                              "'gpt2' = byte-level BPE; not 'bert' WordPiece, 't5' Unigram, "
                              "'rwkv' or 'none')");
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  const size_t n = vocab_.tokens.size();
  piece_to_id_.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = vocab_.tokens[id];
    if (text.empty()) continue;
    piece_to_id_.insert_or_assign(text, static_cast<int32_t>(id));  // last one wins
  }

  for (size_t id = 0; id < n; ++id) {
    const TokenType type = token_type(static_cast<int32_t>(id));
    if ((type == TokenType::kControl || type == TokenType::kUserDefined ||
         type == TokenType::kUnknown) &&
        !vocab_.tokens[id].empty()) {
      special_ids_.push_back(static_cast<int32_t>(id));
    }
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[static_cast<size_t>(a)].size() > vocab_.tokens[static_cast<size_t>(b)].size();
  });

  if (vocab_.eos_id >= 0) end_of_generation_ids_.push_back(vocab_.eos_id);
  const bool harmony = FindToken(kHarmonyEnd) >= 0;
  for (std::string_view name : kEndOfTurnNames) {
    const int32_t id = FindToken(name);
    if (id < 0 || (harmony && name == "<|end|>" && id != vocab_.eos_id)) continue;
    const TokenType type = token_type(id);
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      end_of_generation_ids_.push_back(id);
    }
  }
  std::sort(end_of_generation_ids_.begin(), end_of_generation_ids_.end());
  end_of_generation_ids_.erase(
      std::unique(end_of_generation_ids_.begin(), end_of_generation_ids_.end()),
      end_of_generation_ids_.end());
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special, bool parse_special) const {
  return EncodeFragments(text, SplitOnSpecialTokens(text, parse_special), add_special);
}

std::vector<int32_t> Tokenizer::EncodeWithLiteralRanges(std::string_view text, bool add_special,
                                                        std::span<const TextRange> literal) const {
  return EncodeFragments(text, SplitOnSpecialTokens(text, /*parse_special=*/true, literal), add_special);
}

std::vector<Tokenizer::Fragment> Tokenizer::SplitOnSpecialTokens(std::string_view text, bool parse_special,
                                                                 std::span<const TextRange> literal) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  if (special_ids_.empty()) return fragments;

  // Cheap filter: a token can only occur if all of its byte pairs (or its byte) occur.
  std::bitset<256> bytes;
  auto pairs = std::make_unique<std::bitset<65536>>();
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    bytes.set(c);
    if (i + 1 < text.size()) pairs->set(c << 8 | static_cast<unsigned char>(text[i + 1]));
  }
  auto may_occur = [&](std::string_view token) {
    if (token.size() > text.size()) return false;
    if (token.size() == 1) return bytes.test(static_cast<unsigned char>(token[0]));
    for (size_t i = 0; i + 1 < token.size(); ++i) {
      if (!pairs->test(static_cast<unsigned char>(token[i]) << 8 |
                       static_cast<unsigned char>(token[i + 1]))) {
        return false;
      }
    }
    return true;
  };
  // Whether [begin, end) touches a literal range (ranges are sorted and disjoint).
  auto overlaps_literal = [&](size_t begin, size_t end) {
    auto it = std::upper_bound(literal.begin(), literal.end(), begin,
                               [](size_t pos, const TextRange& r) { return pos < r.end; });
    return it != literal.end() && it->begin < end;
  };

  std::vector<Fragment> next;
  for (const int32_t id : special_ids_) {
    const TokenType type = token_type(id);
    const bool control = type == TokenType::kControl || type == TokenType::kUnknown;
    if (!parse_special && control) continue;
    const std::string_view token = vocab_.tokens[static_cast<size_t>(id)];
    if (!may_occur(token)) continue;
    auto accepted = [&](size_t hit) { return !control || !overlaps_literal(hit, hit + token.size()); };
    // Next accepted occurrence in `raw` (which starts at text offset `base`) from `pos`.
    auto find = [&](std::string_view raw, size_t base, size_t pos) {
      for (size_t hit = raw.find(token, pos); hit != std::string_view::npos; hit = raw.find(token, hit + 1)) {
        if (accepted(base + hit)) return hit;
      }
      return std::string_view::npos;
    };
    bool found = false;
    for (const Fragment& f : fragments) {
      if (f.token < 0 && find(text.substr(f.begin, f.end - f.begin), f.begin, 0) != std::string_view::npos) {
        found = true;
        break;
      }
    }
    if (!found) continue;

    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.begin, f.end - f.begin);
      size_t pos = 0;
      for (size_t hit; (hit = find(raw, f.begin, pos)) != std::string_view::npos;) {
        if (hit > pos) next.push_back({-1, f.begin + pos, f.begin + hit});
        next.push_back({id, 0, 0});
        pos = hit + token.size();
      }
      if (pos < raw.size()) next.push_back({-1, f.begin + pos, f.end});
    }
    fragments.swap(next);
  }
  return fragments;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool strip_leading_space,
                              bool render_special) const {
  // The encoder adds one space in front of the text that follows the leading control tokens
  // (BOS); only that one is removed.
  bool strip_pending = strip_leading_space && vocab_.model == "llama" && vocab_.add_space_prefix;
  std::string out;
  for (const int32_t id : ids) {
    std::string piece = TokenToPiece(id, render_special);
    if (strip_pending && token_type(id) != TokenType::kControl) {
      strip_pending = false;
      if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    }
    out += piece;
  }
  return out;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(end_of_generation_ids_.begin(), end_of_generation_ids_.end(), id);
}

int32_t Tokenizer::FindToken(std::string_view piece) const {
  const auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? -1 : it->second;
}

// ---- StreamingDetokenizer ---------------------------------------------------------------------

Utf8Unit NextUtf8Unit(std::string_view bytes) {
  const Utf8Step step = CheckUtf8(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return {step.kind == Utf8Step::kComplete, step.length};
}

namespace {

// Moves the decodable prefix of `*pending` to the result: complete characters as they are,
// invalid bytes as U+FFFD; an incomplete character at the end stays pending unless `final`.
std::string TakeText(std::string* pending, bool final) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(pending->data());
  const size_t n = pending->size();
  size_t i = 0;
  while (i < n) {
    const Utf8Step step = CheckUtf8(p + i, n - i);
    if (step.kind == Utf8Step::kComplete) {
      out.append(*pending, i, step.length);
    } else if (step.kind == Utf8Step::kInvalid || final) {
      out.append(kReplacementCharacter);
    } else {
      break;  // incomplete: wait for the next token
    }
    i += step.length;
  }
  pending->erase(0, i);
  return out;
}

}  // namespace

std::string StreamingDetokenizer::Push(int32_t id) {
  const bool shown = std::find(shown_controls_.begin(), shown_controls_.end(), id) != shown_controls_.end();
  pending_ += tokenizer_->TokenToPiece(id, /*render_special=*/shown);
  return TakeText(&pending_, /*final=*/false);
}

std::string StreamingDetokenizer::Flush() { return TakeText(&pending_, /*final=*/true); }

}  // namespace kvserve
