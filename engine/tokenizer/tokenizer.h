// Tokenizer: text <-> token ids from a Vocab (read from a GGUF file by engine/model/gguf_vocab.h).
//
// Two algorithms, chosen by `tokenizer.ggml.model`:
//   "llama" — SentencePiece-style: leading space, spaces as U+2581, greedy merges by piece
//             score, byte fallback to <0xXX> tokens.
//   "gpt2"  — byte-level BPE: pre-tokenizer regexes named by `tokenizer.ggml.pre`, GPT-2 byte
//             alphabet, merges by rank.
// Immutable after Create; Encode/Decode are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/tokenizer/vocab.h"

namespace kvserve {

// Byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  [[nodiscard]] static StatusOr<std::unique_ptr<Tokenizer>> Create(Vocab vocab);
  virtual ~Tokenizer() = default;

  // Tokenizes `text`. `add_special`: prepend BOS / append EOS as the vocab asks.
  // `parse_special`: text equal to a control/user-defined token (e.g. "<|im_start|>") becomes
  // that token instead of being split into characters (chat templates need this; user prompts
  // of the completions API do not by default).
  [[nodiscard]] std::vector<int32_t> Encode(std::string_view text, bool add_special,
                                            bool parse_special = false) const;
  // Encode with parse_special, except inside `literal` (sorted, disjoint ranges: e.g. chat
  // message content), where control tokens are plain text as without parse_special. The text
  // between control tokens is tokenized as one piece whatever the ranges, so a text whose
  // literal ranges contain no control token gives exactly Encode(text, add_special, true).
  [[nodiscard]] std::vector<int32_t> EncodeWithLiteralRanges(std::string_view text, bool add_special,
                                                             std::span<const TextRange> literal) const;

  // The bytes token `id` contributes to the text: SentencePiece "▁" becomes " ", <0xXX> is
  // one raw byte, BPE pieces are mapped back from the byte alphabet. Control tokens (BOS, EOS,
  // ...) give "" unless `render_special`. REQUIRES: 0 <= id < vocab_size().
  [[nodiscard]] virtual std::string TokenToPiece(int32_t id, bool render_special = false) const = 0;

  // Concatenated pieces. With `strip_leading_space` (SentencePiece only) the space that the
  // tokenizer added in front of the first piece is removed, so Decode(Encode(s)) == s.
  // (That is the first token that is not a control token such as BOS; nothing else changes.)
  [[nodiscard]] std::string Decode(std::span<const int32_t> ids, bool strip_leading_space = true,
                                   bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t vocab_size() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  // True for tokens that end generation: EOS, and end-of-turn tokens such as <|eot_id|>,
  // <|im_end|>, <|end|>, <end_of_turn>, <|return|>, <|call|> when the vocabulary has them
  // (<|end|> not with harmony's <|return|>: it ends a message there, not the reply).
  // (Also <|endoftext|>, <|eom_id|>, <EOT>, as llama.cpp; a named token counts when it is a
  // control or user-defined token, never when it is ordinary text.)
  bool IsEndOfGeneration(int32_t id) const;
  // Token id of an exact piece, or -1.
  [[nodiscard]] int32_t FindToken(std::string_view piece) const;
  // tokens.type of `id` (kNormal when the vocabulary has no types).
  // REQUIRES: 0 <= id < vocab_size().
  TokenType token_type(int32_t id) const {
    DCHECK(id >= 0 && id < vocab_size());
    return vocab_.types.empty() ? TokenType::kNormal : vocab_.types[static_cast<size_t>(id)];
  }

 protected:
  // A piece of the input: raw text [begin, end) when token < 0, else one special token.
  struct Fragment {
    int32_t token = -1;
    size_t begin = 0;
    size_t end = 0;
  };
  // Heterogeneous lookup by string_view without building a std::string.
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  // REQUIRES: ValidateVocab(vocab).ok().
  explicit Tokenizer(Vocab vocab);

  // Splits `text` at occurrences of special tokens, as llama.cpp does: user-defined tokens
  // always, control and unknown tokens only with `parse_special` and only where an occurrence
  // lies wholly outside every `literal` range; longer tokens first, each token splitting
  // every raw fragment at all of its non-overlapping accepted occurrences.
  [[nodiscard]] std::vector<Fragment> SplitOnSpecialTokens(std::string_view text, bool parse_special,
                                                           std::span<const TextRange> literal = {}) const;
  // The algorithm: tokenizes `text` given its split into raw fragments and special tokens.
  [[nodiscard]] virtual std::vector<int32_t> EncodeFragments(std::string_view text,
                                                             std::span<const Fragment> fragments,
                                                             bool add_special) const = 0;
  // Whether Encode(add_special = true) prepends BOS / appends EOS.
  bool adds_bos() const { return vocab_.add_bos && vocab_.bos_id >= 0; }
  bool adds_eos() const { return vocab_.add_eos && vocab_.eos_id >= 0; }

  Vocab vocab_;
  std::vector<int32_t> end_of_generation_ids_;  // sorted
  PieceMap piece_to_id_;                        // exact token text -> id (last one wins)
  std::vector<int32_t> special_ids_;            // control/user-defined/unknown, longest first
};

// The first unit of `bytes` (non-empty) as StreamingDetokenizer reads it at the end of a
// stream: a complete UTF-8 character (`valid`), or a maximal invalid subpart (an incomplete
// character at the end included), which it turns into one U+FFFD.
struct Utf8Unit {
  bool valid = true;
  size_t length = 1;
};
[[nodiscard]] Utf8Unit NextUtf8Unit(std::string_view bytes);

// Turns a stream of token ids into text deltas that never split a UTF-8 character: bytes of
// an incomplete character are held back until the next token completes it (or Flush). Not
// thread-safe; one per generated sequence.
// Bytes that cannot start or continue a character are replaced by U+FFFD at once (one per
// maximal invalid subpart), so the deltas always are valid UTF-8; for token streams that
// decode to valid UTF-8 the concatenated deltas equal Decode(ids, false).
class StreamingDetokenizer {
 public:
  // `shown_controls`: control tokens whose text the output carries (a chat template's markup
  // the reply is read by, e.g. harmony's <|channel|>); the others have none.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, std::vector<int32_t> shown_controls = {})
      : tokenizer_(&tokenizer), shown_controls_(std::move(shown_controls)) {}
  // Returns the text that became complete with `id` (possibly empty).
  std::string Push(int32_t id);
  // Returns held-back bytes (invalid UTF-8 is replaced by U+FFFD).
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  std::vector<int32_t> shown_controls_;
  std::string pending_;
};

}  // namespace kvserve
