// BpePreTokenizer: splits text into the words that byte-level BPE merges within, using the
// regular expressions of the pre-tokenizer named by `tokenizer.ggml.pre` (the same names and
// expressions as llama.cpp's LLAMA_VOCAB_PRE_TYPE_* table).
//
// Semantics (llama.cpp's unicode_regex_split): the expressions are applied in order; each one
// splits every current piece into its matches and the unmatched gaps between them (both kept),
// matching inside the piece only (lookahead and `$` see the piece's end as the end of text).
// Expressions are compiled once with PCRE2 (UTF + UCP, JIT when available); invalid UTF-8 never
// matches and ends up in gap pieces, so every input byte lands in exactly one word.
// Immutable after Create; Split is thread-safe (per-call match data).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvserve {

// What a pre-tokenizer name implies besides its expressions.
struct BpePreTokenizerTraits {
  bool ignore_merges = false;  // a word that is itself a token is emitted whole (llama3)
  bool add_bos = false;        // default of tokenizer.ggml.add_bos_token when absent
};

// Traits for `pre` ("" = absent), or nullptr when the name is not supported.
[[nodiscard]] const BpePreTokenizerTraits* FindBpePreTokenizer(std::string_view pre);

class BpePreTokenizer {
 public:
  // A word: bytes [begin, end) of the text given to Split.
  struct Word {
    size_t begin = 0;
    size_t end = 0;
  };

  // INVALID_ARGUMENT naming `pre` when unsupported (or when an expression fails to compile).
  [[nodiscard]] static StatusOr<std::unique_ptr<BpePreTokenizer>> Create(std::string_view pre);
  ~BpePreTokenizer();
  BpePreTokenizer(const BpePreTokenizer&) = delete;
  BpePreTokenizer& operator=(const BpePreTokenizer&) = delete;

  const BpePreTokenizerTraits& traits() const { return traits_; }

  // Replaces `*words` with the words of `text`, in order, covering it without gaps.
  void Split(std::string_view text, std::vector<Word>* words) const;

 private:
  struct Regex;
  BpePreTokenizer() = default;

  BpePreTokenizerTraits traits_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace kvserve
