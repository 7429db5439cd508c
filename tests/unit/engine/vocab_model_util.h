// Test models with real vocabularies: the synthetic "tiny" shape (random weights) over a
// vocabulary from ../shared/tokenizer, with a published chat template and the control tokens
// it needs appended, so prompts tokenize and chats render as they do for the real model.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "engine/model/synthetic.h"
#include "tests/unit/engine/engine_test_util.h"

namespace kvserve::testing {

struct VocabModelSpec {
  std::string vocab;                 // ../shared/tokenizer/ggml-vocab-<vocab>.gguf
  std::string chat_template;
  std::vector<std::string> control;  // appended as control tokens unless the vocabulary has them
  std::string bos;                   // a token's text; empty: the vocabulary's
  std::string eos;
};

inline std::string VocabFile(const std::string& vocab) { return "tokenizer/ggml-vocab-" + vocab + ".gguf"; }

// Null (with a test failure) when the vocabulary cannot be read.
inline std::shared_ptr<const Model> LoadVocabModel(const VocabModelSpec& spec) {
  StatusOr<Vocab> vocab = LoadVocabForSynthetic(
      {SharedPath(VocabFile(spec.vocab)), spec.control, spec.bos, spec.eos, spec.chat_template});
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  if (!vocab.ok()) return nullptr;

  SyntheticOptions options;
  options.preset = *FindSyntheticPreset("tiny");
  options.dtype = GgmlType::kF32;
  options.vocab = std::move(vocab).value();
  StatusOr<GgufWriter> writer = MakeSyntheticGguf(options);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  if (!writer.ok()) return nullptr;
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("kvserve-vocab-model-" + spec.vocab + "-" + std::to_string(getpid()) + ".gguf");
  const Status written = writer->WriteFile(path.string());
  EXPECT_TRUE(written.ok()) << written.ToString();
  std::shared_ptr<const Model> model = written.ok() ? LoadModel(path.string()) : nullptr;
  std::filesystem::remove(path);
  return model;
}

}  // namespace kvserve::testing
