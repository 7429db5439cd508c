// SentencePiece-style tokenizer. See spm_tokenizer.h.
#include "engine/tokenizer/spm_tokenizer.h"

#include <cstdio>
#include <queue>
#include <utility>

#include "common/check.h"

namespace kvserve {
namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// Bytes of the character at the start of `s`: the length its lead byte announces when the
// continuation bytes are there (as llama.cpp), else 1, so that an invalid byte never swallows
// the characters after it (e.g. an escaped space, which would then decode as U+2581).
size_t CharLength(std::string_view s) {
  static constexpr unsigned char kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  const size_t len = kLengths[static_cast<unsigned char>(s[0]) >> 4];
  if (len > s.size()) return 1;
  for (size_t i = 1; i < len; ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) return 1;
  }
  return len;
}

std::string UnescapeSpaces(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  size_t pos = 0;
  while (pos < piece.size()) {
    size_t hit = piece.find(kEscapedSpace, pos);
    if (hit == std::string_view::npos) hit = piece.size();
    out.append(piece.substr(pos, hit - pos));
    if (hit == piece.size()) break;
    out.push_back(' ');
    pos = hit + kEscapedSpace.size();
  }
  return out;
}

// "<0xAB>" -> 0xAB, else -1.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

// A run of the escaped text; merged symbols absorb their right neighbour (len grows, the
// neighbour's len becomes 0). prev/next link the live symbols.
struct SpmSymbol {
  int prev;
  int next;
  size_t begin;
  size_t len;
};

struct SpmBigram {
  int left;
  int right;
  float score;
  size_t size;  // bytes of left + right when queued; a mismatch later means "stale"
};

// Highest score first; on equal scores the leftmost pair.
struct SpmBigramOrder {
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = FindToken(hex);
    if (id < 0) id = FindToken(std::string(1, static_cast<char>(b)));
    byte_ids_[static_cast<size_t>(b)] = id;
  }
  pieces_.resize(vocab_.tokens.size());
  for (size_t id = 0; id < vocab_.tokens.size(); ++id) {
    const std::string& text = vocab_.tokens[id];
    switch (token_type(static_cast<int32_t>(id))) {
      case TokenType::kNormal:
        pieces_[id] = UnescapeSpaces(text);
        break;
      case TokenType::kByte: {
        const int byte = ParseByteToken(text);
        pieces_[id] = byte >= 0 ? std::string(1, static_cast<char>(byte)) : text;
        break;
      }
      case TokenType::kUserDefined:
        pieces_[id] = text;
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUndefined:
      case TokenType::kUnused:
        break;  // no text (control/unknown render their text only on request)
    }
  }
}

std::vector<int32_t> SpmTokenizer::EncodeFragments(std::string_view text, std::span<const Fragment> fragments,
                                                   bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && adds_bos()) out.push_back(vocab_.bos_id);
  bool previous_was_special = true;  // the start of the text counts as "after a special token"
  std::string fragment;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      previous_was_special = true;
      continue;
    }
    fragment.clear();
    if (vocab_.add_space_prefix && previous_was_special) fragment.push_back(' ');
    fragment.append(text.substr(f.begin, f.end - f.begin));
    EncodeFragment(fragment, &out);
    previous_was_special = false;
  }
  if (add_special && adds_eos()) out.push_back(vocab_.eos_id);
  return out;
}

void SpmTokenizer::EncodeFragment(std::string_view raw, std::vector<int32_t>* out) const {
  std::string text;
  text.reserve(raw.size() + raw.size() / 4);
  for (char c : raw) {
    if (c == ' ') {
      text.append(kEscapedSpace);
    } else {
      text.push_back(c);
    }
  }
  if (text.empty()) return;

  std::vector<SpmSymbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = CharLength(std::string_view(text).substr(offset));
    const int index = static_cast<int>(symbols.size());
    offset += len;
    symbols.push_back({index - 1, offset == text.size() ? -1 : index + 1, offset - len, len});
  }

  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmBigramOrder> queue;
  auto try_add_bigram = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].len + symbols[right].len;
    const auto it = piece_to_id_.find(std::string_view(text).substr(symbols[left].begin, size));
    if (it == piece_to_id_.end()) return;
    queue.push({left, right, Score(it->second), size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!queue.empty()) {
    const SpmBigram bigram = queue.top();
    queue.pop();
    SpmSymbol& left = symbols[bigram.left];
    SpmSymbol& right = symbols[bigram.right];
    // Skip pairs that no longer exist (one side merged away, or the right side grew).
    if (left.len == 0 || right.len == 0 || left.len + right.len != bigram.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  // Every merged symbol is a vocabulary piece (only such pairs are queued), so llama.cpp's
  // "resegment" reduces to: a piece, or a single character emitted as bytes.
  for (int i = 0; i != -1; i = symbols[i].next) {
    EmitSymbol(std::string_view(text).substr(symbols[i].begin, symbols[i].len), out);
  }
}

void SpmTokenizer::EmitSymbol(std::string_view symbol, std::vector<int32_t>* out) const {
  const auto it = piece_to_id_.find(symbol);
  if (it != piece_to_id_.end()) {
    out->push_back(it->second);
    return;
  }
  bool all_bytes = true;
  for (char c : symbol) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
  if (all_bytes) {
    for (char c : symbol) out->push_back(byte_ids_[static_cast<unsigned char>(c)]);
  } else if (vocab_.unk_id >= 0) {
    out->push_back(vocab_.unk_id);
  }
  // else: no byte tokens and no unknown token; the character cannot be represented.
}

std::string SpmTokenizer::TokenToPiece(int32_t id, bool render_special) const {
  CHECK(id >= 0 && id < vocab_size()) << "token id " << id << " out of range";
  const TokenType type = token_type(id);
  if (render_special && (type == TokenType::kControl || type == TokenType::kUnknown)) {
    return vocab_.tokens[static_cast<size_t>(id)];
  }
  return pieces_[static_cast<size_t>(id)];
}

}  // namespace kvserve
