// ValidateVocab: the checks every Vocab passes before a Tokenizer is built from it.
#include <limits>
#include <string>

#include "engine/tokenizer/vocab.h"

namespace kvserve {
namespace {

using namespace vocab_key;  // NOLINT: the key names

Status CheckId(std::string_view key, int32_t id, size_t num_tokens) {
  if (id == -1 || (id >= 0 && static_cast<size_t>(id) < num_tokens)) return OkStatus();
  return VocabKeyError(key, "token id " + std::to_string(id) + " is out of range for " +
                           std::to_string(num_tokens) + " tokens");
}

}  // namespace

Status VocabKeyError(std::string_view key, const std::string& message) {
  return InvalidArgumentError(std::string(key) + ": " + message);
}

Status ValidateVocab(const Vocab& vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0) return VocabKeyError(kTokens, "the vocabulary is empty");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return VocabKeyError(kTokens, "too many tokens");
  }
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    return VocabKeyError(kScores, "has " + std::to_string(vocab.scores.size()) + " entries but " +
                                 std::string(kTokens) + " has " + std::to_string(n));
  }
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return VocabKeyError(kTokenType, "has " + std::to_string(vocab.types.size()) + " entries but " +
                                    std::string(kTokens) + " has " + std::to_string(n));
  }
  for (size_t i = 0; i < vocab.types.size(); ++i) {
    const int type = static_cast<int>(vocab.types[i]);
    if (type < 0 || type > kMaxTokenType) {
      return VocabKeyError(kTokenType, "token " + std::to_string(i) + " has type " +
                                      std::to_string(type) + " (expected 0..6)");
    }
  }
  RETURN_IF_ERROR(CheckId(kBos, vocab.bos_id, n));
  RETURN_IF_ERROR(CheckId(kEos, vocab.eos_id, n));
  RETURN_IF_ERROR(CheckId(kUnk, vocab.unk_id, n));
  RETURN_IF_ERROR(CheckId(kPad, vocab.pad_id, n));
  return OkStatus();
}

}  // namespace kvserve
