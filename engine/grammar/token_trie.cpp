// TokenTrie (see token_trie.h).
#include "engine/grammar/token_trie.h"

#include <algorithm>
#include <bit>
#include <numeric>

namespace kvserve {

TokenTrie::TokenTrie(const Tokenizer& tokenizer) : vocab_size_(tokenizer.vocab_size()) {
  bytes_.resize(static_cast<size_t>(vocab_size_));
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (tokenizer.IsEndOfGeneration(id)) eog_.push_back(id);
    bytes_[static_cast<size_t>(id)] = tokenizer.TokenToPiece(id);
    if (!bytes_[static_cast<size_t>(id)].empty()) ids.push_back(id);
  }
  // Sorted by bytes, then id: a depth-first order of the trie, with tokens of equal bytes
  // next to each other.
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const int c = bytes_[static_cast<size_t>(a)].compare(bytes_[static_cast<size_t>(b)]);
    return c != 0 ? c < 0 : a < b;
  });
  nodes_.push_back(Node{});
  parents_.push_back(-1);
  std::vector<int32_t> path = {0};  // nodes from the root; path.size() - 1 is the depth
  std::string prefix;               // the bytes of the path
  for (int32_t id : ids) {
    const std::string& b = bytes_[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < prefix.size() && common < b.size() && prefix[common] == b[common]) ++common;
    while (path.size() - 1 > common) {
      nodes_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
    prefix.resize(common);
    for (size_t k = common; k < b.size(); ++k) {
      Node n;
      n.byte = static_cast<uint8_t>(b[k]);
      n.depth = static_cast<uint16_t>(std::min<size_t>(k + 1, UINT16_MAX));
      parents_.push_back(path.back());
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(n);
      prefix += b[k];
    }
    max_depth_ = std::max(max_depth_, static_cast<int>(path.size()) - 1);
    Node& at = nodes_[static_cast<size_t>(path.back())];
    if (at.tokens_begin == at.tokens_end) at.tokens_begin = static_cast<int32_t>(node_tokens_.size());
    node_tokens_.push_back(id);
    at.tokens_end = static_cast<int32_t>(node_tokens_.size());
  }
  for (int32_t n : path) nodes_[static_cast<size_t>(n)].end = static_cast<int32_t>(nodes_.size());
  // Subtree summaries: decoder states parents first, then children before parents (a
  // child's index is above its parent's).
  const size_t count = nodes_.size();
  first_token_.assign(count + 1, static_cast<int32_t>(node_tokens_.size()));
  utf8_.assign(count, 0);
  text_below_.assign(count, 1);
  height_.assign(count, 0);
  for (size_t i = 1; i < count; ++i) utf8_[i] = Utf8Step(utf8_[static_cast<size_t>(parents_[i])], nodes_[i].byte);
  for (size_t i = count; i-- > 1;) {
    const size_t p = static_cast<size_t>(parents_[i]);
    if (utf8_[i] == kUtf8Invalid || !text_below_[i]) text_below_[p] = 0;
    height_[p] = std::max<uint16_t>(height_[p], static_cast<uint16_t>(std::min(height_[i] + 1, UINT16_MAX - 1)));
  }
  // A subtree's tokens are contiguous: the first one is the first whose node is in it.
  for (size_t i = count; i-- > 0;) {
    const Node& n = nodes_[i];
    int32_t first = first_token_[static_cast<size_t>(n.end)];
    if (n.tokens_end > n.tokens_begin) first = n.tokens_begin;
    else if (i + 1 < count && static_cast<int32_t>(i + 1) < n.end) first = first_token_[i + 1];
    first_token_[i] = first;
  }
}

uint8_t TokenTrie::Utf8Step(uint8_t state, uint8_t b) {
  auto in = [b](int lo, int hi) { return b >= lo && b <= hi; };
  switch (state) {
    case 0:
      if (in(0x20, 0x7e)) return b == '"' || b == '\\' ? kUtf8Invalid : 0;
      if (in(0xc2, 0xdf)) return 1;
      if (b == 0xe0) return 4;
      if (b == 0xed) return 5;
      if (in(0xe1, 0xef)) return 2;
      if (b == 0xf0) return 6;
      if (b == 0xf4) return 7;
      if (in(0xf1, 0xf3)) return 3;
      return kUtf8Invalid;
    case 1: case 2: case 3:
      return in(0x80, 0xbf) ? static_cast<uint8_t>(state - 1) : kUtf8Invalid;
    case 4: return in(0xa0, 0xbf) ? 1 : kUtf8Invalid;  // no overlong 3-byte forms
    case 5: return in(0x80, 0x9f) ? 1 : kUtf8Invalid;  // no surrogates
    case 6: return in(0x90, 0xbf) ? 2 : kUtf8Invalid;  // no overlong 4-byte forms
    case 7: return in(0x80, 0x8f) ? 2 : kUtf8Invalid;  // up to U+10FFFF
    default: return kUtf8Invalid;
  }
}

}  // namespace kvserve
