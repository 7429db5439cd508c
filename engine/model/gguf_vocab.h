// Vocab <-> the tokenizer.* keys of a GGUF file. Defaults for absent keys follow llama.cpp
// (see gguf_vocab.cpp). Pure functions; thread-safe.
#pragma once

#include "common/status.h"
#include "engine/tokenizer/vocab.h"

namespace kvserve {

class GgufFile;
class GgufWriter;

// Reads the tokenizer.* keys. INVALID_ARGUMENT names the key that is missing or malformed
// (e.g. scores of a different length than tokens, ids out of range).
[[nodiscard]] StatusOr<Vocab> LoadVocab(const GgufFile& file);
// Writes `vocab` as tokenizer.* keys (used by mkmodel).
void AddVocabToGguf(const Vocab& vocab, GgufWriter* writer);

}  // namespace kvserve
