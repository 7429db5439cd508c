// A tokenizer over a vocabulary of ../shared/tokenizer (ggml-vocab-<name>.gguf), for tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace kvserve::testing {

// Null (with a test failure) when the file cannot be read.
inline std::unique_ptr<Tokenizer> LoadSharedTokenizer(const std::string& name) {
  auto file = GgufFile::Open(SharedPath("tokenizer/ggml-vocab-" + name + ".gguf"));
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return nullptr;
  auto vocab = LoadVocab(**file);
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  if (!vocab.ok()) return nullptr;
  auto tok = Tokenizer::Create(std::move(vocab).value());
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

}  // namespace kvserve::testing
