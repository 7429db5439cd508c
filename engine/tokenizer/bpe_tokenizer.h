// BpeTokenizer: the byte-level BPE tokenizer of `tokenizer.ggml.model = "gpt2"`, with the
// behaviour of llama.cpp's llm_tokenizer_bpe.
//
// Encode: special tokens are split out first (Tokenizer::SplitOnSpecialTokens); each raw
// fragment is cut into words by the pre-tokenizer's expressions (BpePreTokenizer); each word's
// bytes are mapped to the GPT-2 printable alphabet (one symbol per byte), and adjacent symbols
// are merged by merge rank (lowest first, leftmost on ties) until no listed merge applies. With
// `ignore_merges` (llama3) a word that is itself a token is emitted whole.
// Immutable after Create; Encode/TokenToPiece are thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/bpe_pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

class BpeTokenizer final : public Tokenizer {
 public:
  // REQUIRES: ValidateVocab(vocab).ok() and vocab.model == "gpt2".
  // INVALID_ARGUMENT when vocab.pre names an unsupported pre-tokenizer.
  [[nodiscard]] static StatusOr<std::unique_ptr<Tokenizer>> Create(Vocab vocab);

  [[nodiscard]] std::string TokenToPiece(int32_t id, bool render_special = false) const override;

 private:
  [[nodiscard]] std::vector<int32_t> EncodeFragments(std::string_view text, std::span<const Fragment> fragments,
                                                     bool add_special) const override;
  BpeTokenizer(Vocab vocab, std::unique_ptr<BpePreTokenizer> pre_tokenizer);

  // Merges one pre-tokenized word (raw bytes) and appends its tokens.
  void EncodeWord(std::string_view word, std::string* mapped, std::vector<int32_t>* out) const;
  // Rank of merging `left` and `right` (in the byte alphabet), or -1.
  int32_t MergeRank(std::string_view left, std::string_view right, std::string* key) const;

  std::unique_ptr<BpePreTokenizer> pre_tokenizer_;
  PieceMap merge_ranks_;                      // "left right" -> rank (index in merges)
  std::array<std::string, 256> byte_to_unit_;  // byte -> its GPT-2 alphabet character (UTF-8)
  std::vector<std::string> pieces_;           // TokenToPiece(id, render_special = false)
};

}  // namespace kvserve
