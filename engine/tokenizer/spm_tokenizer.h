// SpmTokenizer: the SentencePiece-style tokenizer of `tokenizer.ggml.model = "llama"`, with the
// behaviour of llama.cpp's llm_tokenizer_spm.
//
// Encode: special tokens are split out first (Tokenizer::SplitOnSpecialTokens); each raw
// fragment that starts the text or follows a special token gets a leading space when
// add_space_prefix; spaces become U+2581; the fragment is cut into UTF-8 characters, and
// adjacent symbols are merged greedily: always the pair whose concatenation is a vocabulary
// piece with the highest score (leftmost on ties). A final symbol that is not a piece falls back
// to its bytes as <0xXX> tokens (or one-character pieces), or to the unknown token when a byte has
// no token.
// Immutable after construction; Encode/TokenToPiece are thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

class SpmTokenizer final : public Tokenizer {
 public:
  // REQUIRES: ValidateVocab(vocab).ok() and vocab.model == "llama".
  explicit SpmTokenizer(Vocab vocab);

  [[nodiscard]] std::string TokenToPiece(int32_t id, bool render_special = false) const override;

 private:
  [[nodiscard]] std::vector<int32_t> EncodeFragments(std::string_view text, std::span<const Fragment> fragments,
                                                     bool add_special) const override;
  // Tokenizes one raw fragment (already prefixed with a space where needed, not yet escaped).
  void EncodeFragment(std::string_view text, std::vector<int32_t>* out) const;
  // Emits `symbol` as one piece if it is one, else as byte tokens (or unk).
  void EmitSymbol(std::string_view symbol, std::vector<int32_t>* out) const;
  float Score(int32_t id) const {
    return vocab_.scores.empty() ? 0.0f : vocab_.scores[static_cast<size_t>(id)];
  }

  std::array<int32_t, 256> byte_ids_;  // token of each byte value, or -1
  std::vector<std::string> pieces_;    // TokenToPiece(id, render_special = false)
};

}  // namespace kvserve
