// Vocab <-> GGUF tokenizer.* metadata. Pure functions; thread-safe.
//
// Defaults for absent keys follow llama.cpp: add_bos_token is true for "llama" and for BPE
// pre-tokenizers whose convention adds BOS (llama3, tekken, chameleon), false otherwise;
// add_space_prefix is true for "llama" only. Special token ids that are absent or "none"
// (0xFFFFFFFF, or -1 when signed) become -1; any other id outside the vocabulary is an error.
#include <limits>
#include <string>

#include "engine/model/gguf_vocab.h"

#include "engine/model/gguf.h"
#include "engine/tokenizer/bpe_pretokenizer.h"

namespace kvserve {
namespace {

using namespace vocab_key;  // NOLINT: the key names

// A getter's status as INVALID_ARGUMENT that names the key (the reader's messages already do;
// NOT_FOUND becomes "missing").
Status AsKeyError(std::string_view key, const Status& status) {
  if (status.code() == StatusCode::kNotFound) return VocabKeyError(key, "missing");
  return InvalidArgumentError(status.message());
}

template <typename T>
Status ReadOptional(const GgufFile& file, std::string_view key,
                    StatusOr<T> (GgufFile::*getter)(std::string_view) const, T* out) {
  if (!file.Has(key)) return OkStatus();
  StatusOr<T> value = (file.*getter)(key);
  if (!value.ok()) return AsKeyError(key, value.status());
  *out = std::move(value).value();
  return OkStatus();
}

template <typename T>
Status ReadRequired(const GgufFile& file, std::string_view key,
                    StatusOr<T> (GgufFile::*getter)(std::string_view) const, T* out) {
  StatusOr<T> value = (file.*getter)(key);
  if (!value.ok()) return AsKeyError(key, value.status());
  *out = std::move(value).value();
  return OkStatus();
}

bool IsUnsigned(GgufType type) {
  return type == GgufType::kUint8 || type == GgufType::kUint16 || type == GgufType::kUint32 ||
         type == GgufType::kUint64;
}

// An optional token id: absent, 0xFFFFFFFF (or any all-ones unsigned) and -1 mean "none".
Status ReadTokenId(const GgufFile& file, std::string_view key, size_t num_tokens, int32_t* out) {
  *out = -1;
  const GgufValue* v = file.Find(key);
  if (v == nullptr) return OkStatus();
  if (!v->is_integer()) return VocabKeyError(key, "expected an integer token id");
  if (IsUnsigned(v->type)) {
    if (v->u64 == std::numeric_limits<uint32_t>::max() ||
        v->u64 == std::numeric_limits<uint64_t>::max()) {
      return OkStatus();
    }
    if (v->u64 >= num_tokens) {
      return VocabKeyError(key, "token id " + std::to_string(v->u64) + " is out of range for " +
                               std::to_string(num_tokens) + " tokens");
    }
    *out = static_cast<int32_t>(v->u64);
    return OkStatus();
  }
  if (v->i64 == -1) return OkStatus();
  if (v->i64 < 0 || static_cast<uint64_t>(v->i64) >= num_tokens) {
    return VocabKeyError(key, "token id " + std::to_string(v->i64) + " is out of range for " +
                             std::to_string(num_tokens) + " tokens");
  }
  *out = static_cast<int32_t>(v->i64);
  return OkStatus();
}

}  // namespace

StatusOr<Vocab> LoadVocab(const GgufFile& file) {
  Vocab vocab;
  RETURN_IF_ERROR(ReadRequired(file, kModel, &GgufFile::GetString, &vocab.model));
  RETURN_IF_ERROR(ReadOptional(file, kPre, &GgufFile::GetString, &vocab.pre));
  RETURN_IF_ERROR(ReadRequired(file, kTokens, &GgufFile::GetStringArray, &vocab.tokens));
  const size_t n = vocab.tokens.size();
  RETURN_IF_ERROR(ReadOptional(file, kScores, &GgufFile::GetFloatArray, &vocab.scores));
  if (file.Has(kScores) && vocab.scores.size() != n) {  // an empty array too
    return VocabKeyError(kScores, "has " + std::to_string(vocab.scores.size()) + " entries but " +
                                 std::string(kTokens) + " has " + std::to_string(n));
  }

  std::vector<int64_t> types;
  RETURN_IF_ERROR(ReadOptional(file, kTokenType, &GgufFile::GetIntArray, &types));
  if (file.Has(kTokenType) && types.size() != n) {
    return VocabKeyError(kTokenType, "has " + std::to_string(types.size()) + " entries but " +
                                    std::string(kTokens) + " has " + std::to_string(n));
  }
  vocab.types.reserve(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] < 0 || types[i] > kMaxTokenType) {
      return VocabKeyError(kTokenType, "token " + std::to_string(i) + " has type " +
                                      std::to_string(types[i]) + " (expected 0..6)");
    }
    vocab.types.push_back(static_cast<TokenType>(types[i]));
  }

  if (vocab.model == "gpt2") {
    RETURN_IF_ERROR(ReadRequired(file, kMerges, &GgufFile::GetStringArray, &vocab.merges));
  } else {
    RETURN_IF_ERROR(ReadOptional(file, kMerges, &GgufFile::GetStringArray, &vocab.merges));
  }

  RETURN_IF_ERROR(ReadTokenId(file, kBos, n, &vocab.bos_id));
  RETURN_IF_ERROR(ReadTokenId(file, kEos, n, &vocab.eos_id));
  RETURN_IF_ERROR(ReadTokenId(file, kUnk, n, &vocab.unk_id));
  RETURN_IF_ERROR(ReadTokenId(file, kPad, n, &vocab.pad_id));

  const bool is_spm = vocab.model == "llama";
  vocab.add_bos = is_spm;
  if (vocab.model == "gpt2") {
    const BpePreTokenizerTraits* traits = FindBpePreTokenizer(vocab.pre);
    vocab.add_bos = traits != nullptr && traits->add_bos;
  }
  vocab.add_eos = false;
  vocab.add_space_prefix = is_spm;
  RETURN_IF_ERROR(ReadOptional(file, kAddBos, &GgufFile::GetBool, &vocab.add_bos));
  RETURN_IF_ERROR(ReadOptional(file, kAddEos, &GgufFile::GetBool, &vocab.add_eos));
  RETURN_IF_ERROR(ReadOptional(file, kAddSpacePrefix, &GgufFile::GetBool, &vocab.add_space_prefix));
  RETURN_IF_ERROR(ReadOptional(file, kChatTemplate, &GgufFile::GetString, &vocab.chat_template));

  RETURN_IF_ERROR(ValidateVocab(vocab));
  return vocab;
}

void AddVocabToGguf(const Vocab& vocab, GgufWriter* writer) {
  CHECK(writer != nullptr);
  writer->AddString(std::string(kModel), vocab.model);
  if (!vocab.pre.empty()) writer->AddString(std::string(kPre), vocab.pre);
  writer->AddStringArray(std::string(kTokens), vocab.tokens);
  if (!vocab.scores.empty()) writer->AddFloat32Array(std::string(kScores), vocab.scores);
  if (!vocab.types.empty()) {
    std::vector<int32_t> types;
    types.reserve(vocab.types.size());
    for (TokenType t : vocab.types) types.push_back(static_cast<int32_t>(t));
    writer->AddInt32Array(std::string(kTokenType), types);
  }
  // LoadVocab requires merges for "gpt2", even an empty list.
  if (!vocab.merges.empty() || vocab.model == "gpt2") {
    writer->AddStringArray(std::string(kMerges), vocab.merges);
  }
  auto add_id = [&](std::string_view key, int32_t id) {
    if (id >= 0) writer->AddUint32(std::string(key), static_cast<uint32_t>(id));
  };
  add_id(kBos, vocab.bos_id);
  add_id(kEos, vocab.eos_id);
  add_id(kUnk, vocab.unk_id);
  add_id(kPad, vocab.pad_id);
  // Written explicitly so that the file does not depend on the defaults for absent keys.
  writer->AddBool(std::string(kAddBos), vocab.add_bos);
  writer->AddBool(std::string(kAddEos), vocab.add_eos);
  writer->AddBool(std::string(kAddSpacePrefix), vocab.add_space_prefix);
  if (!vocab.chat_template.empty()) {
    writer->AddString(std::string(kChatTemplate), vocab.chat_template);
  }
}

}  // namespace kvserve
