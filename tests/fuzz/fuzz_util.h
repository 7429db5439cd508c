// Helpers shared by the fuzz targets (tests/fuzz/*_fuzzer.cpp): small vocabularies built in
// memory (so the targets, and unit tests that need no real vocabulary, need no files), and FUZZ_CHECK, which aborts so that libFuzzer (or
// the replay driver) reports the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

#define FUZZ_CHECK(cond)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                        \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

namespace kvserve::fuzz {

// The synthetic models' SentencePiece-style vocabulary (byte fallback: every string round
// trips).
std::unique_ptr<Tokenizer> MakeSpmTokenizer(int size = 512);

// A byte-level BPE vocabulary: the 256 characters of GPT-2's byte alphabet, merges of common
// letter pairs, a control token <|endoftext|> (EOS) and a user-defined token <|im_start|>.
// `pre` is the pre-tokenizer name (e.g. "gpt-2", "llama3").
std::unique_ptr<Tokenizer> MakeBpeTokenizer(const std::string& pre);

// "memory-spm" (MakeSpmTokenizer) or "memory-bpe" (MakeBpeTokenizer with GPT-2's
// pre-tokenizer); null for any other name (a real vocabulary's, from ../shared).
std::unique_ptr<Tokenizer> MemoryTokenizer(std::string_view name);

// Valid UTF-8?
bool IsValidUtf8(std::string_view s);

}  // namespace kvserve::fuzz
