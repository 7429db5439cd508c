// Fuzz target: tokenizer encode/decode round trip.
//
// Input: byte 0 picks the tokenizer (low bits) and the flags (add_special: bit 4,
// parse_special: bit 5); the rest is the text. Tokenizers: the synthetic SentencePiece-style
// vocabulary (byte fallback), byte-level BPE vocabularies built in memory with the gpt-2,
// llama3 and deepseek-llm pre-tokenizers, and -- when ../shared/tokenizer is there -- the real
// llama-spm and gpt-2 vocabularies.
//
// Checks: every id is in the vocabulary; every piece and the streaming detokenizer's output
// are valid UTF-8 when the input is; without special-token parsing Decode(Encode(text)) ==
// text (all these vocabularies cover every byte); the streaming detokenizer's deltas
// concatenate to Decode(ids, false) for valid UTF-8. (Texts with U+2581 are exempt from the
// round trip for SentencePiece vocabularies: it is their space symbol.)
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve::fuzz {
namespace {

struct Entry {
  std::unique_ptr<Tokenizer> tokenizer;
  bool sentencepiece = false;
};

std::unique_ptr<Tokenizer> LoadShared(const std::string& name) {
#ifdef KVSERVE_SHARED_DIR
  StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::Open(std::string(KVSERVE_SHARED_DIR) + "/tokenizer/ggml-vocab-" + name + ".gguf");
  if (!file.ok()) return nullptr;
  StatusOr<Vocab> vocab = LoadVocab(**file);
  if (!vocab.ok()) return nullptr;
  StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(vocab).value());
  return t.ok() ? std::move(t).value() : nullptr;
#else
  (void)name;
  return nullptr;
#endif
}

const std::vector<Entry>& Tokenizers() {
  static const std::vector<Entry>* all = [] {
    auto* v = new std::vector<Entry>;
    v->push_back({MakeSpmTokenizer(), true});
    v->push_back({MakeBpeTokenizer("gpt-2"), false});
    v->push_back({MakeBpeTokenizer("llama3"), false});
    v->push_back({MakeBpeTokenizer("deepseek-llm"), false});
    if (auto t = LoadShared("llama-spm")) v->push_back({std::move(t), true});
    if (auto t = LoadShared("gpt-2")) v->push_back({std::move(t), false});
    return v;
  }();
  return *all;
}

}  // namespace
}  // namespace kvserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  using namespace kvserve::fuzz;
  if (size == 0 || size > 4096) return 0;
  const std::vector<Entry>& all = Tokenizers();
  const Entry& entry = all[(data[0] & 0x0F) % all.size()];
  const Tokenizer& tok = *entry.tokenizer;
  const bool add_special = (data[0] & 0x10) != 0;
  const bool parse_special = (data[0] & 0x20) != 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool valid = IsValidUtf8(text);

  const std::vector<int32_t> ids = tok.Encode(text, add_special, parse_special);
  for (int32_t id : ids) {
    FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    if (valid) (void)tok.TokenToPiece(id, /*render_special=*/true);
  }
  const std::string decoded = tok.Decode(ids);
  // SentencePiece writes spaces as U+2581, so a literal U+2581 in the text decodes as a
  // space: that is the algorithm (llama.cpp does the same), not a round-trip bug.
  const bool lossless = !entry.sentencepiece || text.find("\xE2\x96\x81") == std::string::npos;
  if (!add_special && !parse_special && lossless) FUZZ_CHECK(decoded == text);

  StreamingDetokenizer detok(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = detok.Push(id);
    FUZZ_CHECK(IsValidUtf8(piece));
    streamed += piece;
  }
  const std::string tail = detok.Flush();
  FUZZ_CHECK(IsValidUtf8(tail));
  streamed += tail;
  if (valid) FUZZ_CHECK(streamed == tok.Decode(ids, /*strip_leading_space=*/false));
  return 0;
}
