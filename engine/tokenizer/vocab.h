// Vocab: everything a tokenizer needs, as GGUF stores it under tokenizer.* (engine/model/
// gguf_vocab.h reads and writes those keys) or as a synthetic model builds it. Plain value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvserve {

// The GGUF metadata key each Vocab field comes from; errors name the key at fault.
namespace vocab_key {
inline constexpr std::string_view kModel = "tokenizer.ggml.model";
inline constexpr std::string_view kPre = "tokenizer.ggml.pre";
inline constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
inline constexpr std::string_view kScores = "tokenizer.ggml.scores";
inline constexpr std::string_view kTokenType = "tokenizer.ggml.token_type";
inline constexpr std::string_view kMerges = "tokenizer.ggml.merges";
inline constexpr std::string_view kBos = "tokenizer.ggml.bos_token_id";
inline constexpr std::string_view kEos = "tokenizer.ggml.eos_token_id";
inline constexpr std::string_view kUnk = "tokenizer.ggml.unknown_token_id";
inline constexpr std::string_view kPad = "tokenizer.ggml.padding_token_id";
inline constexpr std::string_view kAddBos = "tokenizer.ggml.add_bos_token";
inline constexpr std::string_view kAddEos = "tokenizer.ggml.add_eos_token";
inline constexpr std::string_view kAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
inline constexpr std::string_view kChatTemplate = "tokenizer.chat_template";
}  // namespace vocab_key

enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Everything a tokenizer needs, as read from GGUF metadata (or built for synthetic models).
struct Vocab {
  std::string model = "llama";  // tokenizer.ggml.model
  std::string pre;              // tokenizer.ggml.pre (BPE pre-tokenizer name)
  std::vector<std::string> tokens;
  std::vector<float> scores;    // SentencePiece; may be empty for BPE
  std::vector<TokenType> types; // empty means all normal
  std::vector<std::string> merges;  // BPE: "left right", rank = index
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = true;          // tokenizer.ggml.add_bos_token (default: true for llama)
  bool add_eos = false;
  bool add_space_prefix = true; // tokenizer.ggml.add_space_prefix (SentencePiece)
  std::string chat_template;    // tokenizer.chat_template, may be empty
};

inline constexpr int kMaxTokenType = static_cast<int>(TokenType::kByte);

// INVALID_ARGUMENT "<key>: <message>", the form of every vocabulary error.
[[nodiscard]] Status VocabKeyError(std::string_view key, const std::string& message);

// Checks the invariants LoadVocab and Tokenizer::Create rely on: a non-empty token list,
// scores/types empty or one per token, token types in range, special ids -1 or a valid index.
// INVALID_ARGUMENT names the tokenizer.* key at fault.
[[nodiscard]] Status ValidateVocab(const Vocab& vocab);

}  // namespace kvserve
