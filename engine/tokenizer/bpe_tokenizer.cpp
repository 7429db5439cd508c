// Byte-level BPE tokenizer. See bpe_tokenizer.h.
#include "engine/tokenizer/bpe_tokenizer.h"

#include <queue>
#include <utility>

#include "common/check.h"

namespace kvserve {
namespace {

// GPT-2's reversible byte -> printable code point map: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order.
std::array<uint32_t, 256> ByteToCodepoint() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    map[b] = printable ? b : next++;
  }
  return map;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Maps a token's text from the byte alphabet back to bytes. Characters outside the alphabet
// (malformed vocabularies) are kept as they are.
std::string DecodeByteAlphabet(std::string_view text, const std::array<int, 512>& cp_to_byte) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c0 = static_cast<unsigned char>(text[i]);
    if (c0 < 0x80) {
      const int b = cp_to_byte[c0];
      out.push_back(static_cast<char>(b >= 0 ? b : c0));
      ++i;
      continue;
    }
    if ((c0 & 0xE0) == 0xC0 && i + 1 < text.size() &&
        (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      const uint32_t cp = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      if (cp < cp_to_byte.size() && cp_to_byte[cp] >= 0) {
        out.push_back(static_cast<char>(cp_to_byte[cp]));
        i += 2;
        continue;
      }
    }
    // Not an alphabet character: copy its bytes (one UTF-8 sequence, or one stray byte).
    size_t len = 1;
    while (i + len < text.size() && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80 &&
           len < 4) {
      ++len;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

struct BpeSymbol {
  int prev;
  int next;
  size_t begin;  // in the mapped word
  size_t len;
};

struct BpeBigram {
  int left;
  int right;
  int32_t rank;
  size_t size;  // bytes of left + right when queued; a mismatch later means "stale"
};

// Lowest rank first; on equal ranks the leftmost pair.
struct BpeBigramOrder {
  bool operator()(const BpeBigram& a, const BpeBigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::Create(Vocab vocab) {
  ASSIGN_OR_RETURN(std::unique_ptr<BpePreTokenizer> pre, BpePreTokenizer::Create(vocab.pre));
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(vocab), std::move(pre)));
}

BpeTokenizer::BpeTokenizer(Vocab vocab, std::unique_ptr<BpePreTokenizer> pre_tokenizer)
    : Tokenizer(std::move(vocab)), pre_tokenizer_(std::move(pre_tokenizer)) {
  // llama.cpp splits each merge at the first space after its first character; a merge without
  // one can never apply. The key is therefore the merge text itself; the first rank wins.
  merge_ranks_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const std::string& merge = vocab_.merges[rank];
    if (merge.size() < 2 || merge.find(' ', 1) == std::string::npos) continue;
    merge_ranks_.try_emplace(merge, static_cast<int32_t>(rank));
  }

  const std::array<uint32_t, 256> byte_to_cp = ByteToCodepoint();
  std::array<int, 512> cp_to_byte;
  cp_to_byte.fill(-1);
  for (size_t b = 0; b < 256; ++b) {
    AppendUtf8(byte_to_cp[b], &byte_to_unit_[b]);
    cp_to_byte[byte_to_cp[b]] = static_cast<int>(b);
  }

  pieces_.resize(vocab_.tokens.size());
  for (size_t id = 0; id < vocab_.tokens.size(); ++id) {
    const std::string& text = vocab_.tokens[id];
    switch (token_type(static_cast<int32_t>(id))) {
      case TokenType::kNormal:
        pieces_[id] = DecodeByteAlphabet(text, cp_to_byte);
        break;
      case TokenType::kUserDefined:
        pieces_[id] = text;  // added tokens are stored as plain text
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUndefined:
      case TokenType::kUnused:
      case TokenType::kByte:
        break;  // no text (as in llama.cpp; control/unknown render only on request)
    }
  }
}

int32_t BpeTokenizer::MergeRank(std::string_view left, std::string_view right,
                                std::string* key) const {
  key->assign(left);
  key->push_back(' ');
  key->append(right);
  const auto it = merge_ranks_.find(std::string_view(*key));
  return it == merge_ranks_.end() ? -1 : it->second;
}

std::vector<int32_t> BpeTokenizer::EncodeFragments(std::string_view text, std::span<const Fragment> fragments,
                                                   bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && adds_bos()) out.push_back(vocab_.bos_id);
  std::vector<BpePreTokenizer::Word> words;
  std::string mapped;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    const std::string_view fragment = text.substr(f.begin, f.end - f.begin);
    pre_tokenizer_->Split(fragment, &words);
    for (const BpePreTokenizer::Word& w : words) {
      EncodeWord(fragment.substr(w.begin, w.end - w.begin), &mapped, &out);
    }
  }
  if (add_special && adds_eos()) out.push_back(vocab_.eos_id);
  return out;
}

void BpeTokenizer::EncodeWord(std::string_view word, std::string* mapped,
                              std::vector<int32_t>* out) const {
  mapped->clear();
  std::vector<BpeSymbol> symbols;
  symbols.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const std::string& unit = byte_to_unit_[static_cast<unsigned char>(word[i])];
    const int index = static_cast<int>(i);
    symbols.push_back({index - 1, i + 1 == word.size() ? -1 : index + 1, mapped->size(),
                       unit.size()});
    mapped->append(unit);
  }
  if (symbols.empty()) return;
  const std::string_view text(*mapped);

  if (pre_tokenizer_->traits().ignore_merges) {
    const auto it = piece_to_id_.find(text);
    if (it != piece_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }

  std::string key;
  std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeBigramOrder> queue;
  auto add_bigram = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const BpeSymbol& l = symbols[left];
    const BpeSymbol& r = symbols[right];
    const int32_t rank =
        MergeRank(text.substr(l.begin, l.len), text.substr(r.begin, r.len), &key);
    if (rank < 0) return;
    queue.push({left, right, rank, l.len + r.len});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);

  while (!queue.empty()) {
    const BpeBigram bigram = queue.top();
    queue.pop();
    BpeSymbol& left = symbols[bigram.left];
    BpeSymbol& right = symbols[bigram.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != bigram.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }

  for (int i = 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].begin, symbols[i].len);
    const auto it = piece_to_id_.find(piece);
    if (it != piece_to_id_.end()) {
      out->push_back(it->second);
      continue;
    }
    // As llama.cpp: a symbol that is not a token is emitted byte by byte where those bytes
    // are tokens themselves (and dropped otherwise).
    for (char c : piece) {
      const auto byte_it = piece_to_id_.find(std::string_view(&c, 1));
      if (byte_it != piece_to_id_.end()) out->push_back(byte_it->second);
    }
  }
}

std::string BpeTokenizer::TokenToPiece(int32_t id, bool render_special) const {
  CHECK(id >= 0 && id < vocab_size()) << "token id " << id << " out of range";
  const TokenType type = token_type(id);
  if (render_special && (type == TokenType::kControl || type == TokenType::kUnknown)) {
    return vocab_.tokens[static_cast<size_t>(id)];
  }
  return pieces_[static_cast<size_t>(id)];
}

}  // namespace kvserve
