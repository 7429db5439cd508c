// TokenTrie: a vocabulary's tokens by their bytes, for computing which tokens a structure
// allows next (a token mask) in one walk instead of one check per token.
//
// Each token's bytes are Tokenizer::TokenToPiece (SentencePiece "▁" as a space, <0xXX> byte
// tokens as their byte, byte-level BPE mapped back to bytes): a byte token or a BPE piece may
// hold part of a UTF-8 character, so a walk over bytes handles them like any other token.
// Tokens without bytes (control tokens: BOS, EOS, chat markup) are not in the trie: they are
// never allowed inside a structure; the end-of-generation tokens are allowed where the
// structure may end (eog_tokens()).
//
// The trie is flat, in depth-first order: node i's subtree is [i, end(i)), so a walk skips a
// dead subtree with one jump. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/grammar/token_mask.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

class TokenTrie {
 public:
  explicit TokenTrie(const Tokenizer& tokenizer);

  int32_t vocab_size() const { return vocab_size_; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  std::span<const int32_t> eog_tokens() const { return eog_; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }

  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;       // root 0
    int32_t end = 0;          // one past the last node of the subtree
    int32_t tokens_begin = 0; // [tokens_begin, tokens_end) in node_tokens_: tokens ending here
    int32_t tokens_end = 0;
  };
  // Node 0 is the root (no byte); node i's children are i + 1, then each child's end.
  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int max_depth() const { return max_depth_; }  // the longest token's bytes
  // Text as a JSON string holds it raw, checked byte by byte: a UTF-8 decoder whose state 0
  // is between characters, kUtf8Invalid once the bytes are not text (a control character, the
  // quote, the backslash, DEL, malformed UTF-8). Utf8State(i) is its state after node i's
  // path; text_below(i): every path below node i stays text.
  static constexpr uint8_t kUtf8Invalid = 8;
  static uint8_t Utf8Step(uint8_t state, uint8_t byte);
  uint8_t Utf8State(int32_t i) const { return utf8_[static_cast<size_t>(i)]; }
  bool text_below(int32_t i) const { return text_below_[static_cast<size_t>(i)] != 0; }
  // The longest path below node i, in bytes; the tokens of its subtree (its own and below).
  int height(int32_t i) const { return height_[static_cast<size_t>(i)]; }
  std::span<const int32_t> subtree_tokens(int32_t i) const {
    const int32_t b = first_token_[static_cast<size_t>(i)];
    const int32_t e = first_token_[static_cast<size_t>(node(i).end)];
    return {node_tokens_.data() + b, static_cast<size_t>(e - b)};
  }
  int32_t parent(int32_t i) const { return parents_[static_cast<size_t>(i)]; }
  // The tokens whose bytes end at node i.
  std::span<const int32_t> tokens_at(int32_t i) const {
    const Node& n = node(i);
    return {node_tokens_.data() + n.tokens_begin, static_cast<size_t>(n.tokens_end - n.tokens_begin)};
  }

 private:
  int32_t vocab_size_;
  std::vector<std::string> bytes_;  // [token]
  std::vector<int32_t> eog_;
  std::vector<Node> nodes_;         // depth-first; nodes_[0] is the root
  std::vector<int32_t> parents_;    // [node]; -1 for the root
  std::vector<int32_t> first_token_;  // [node + 1]: the first of its subtree's tokens in node_tokens_
  std::vector<uint8_t> utf8_;         // [node]
  std::vector<uint8_t> text_below_;   // [node]
  std::vector<uint16_t> height_;      // [node]
  std::vector<int32_t> node_tokens_;
  int max_depth_ = 0;               // the longest token's bytes
};

}  // namespace kvserve
