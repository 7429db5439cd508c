// Fuzz target: the JSON Schema compiler and the grammar matcher of structured outputs
// (engine/grammar/json_schema.h, matcher.h); schemas come from clients.
//
// Input: a JSON Schema, then optionally '\0' and a text to follow through its grammar.
//
// Checks: CompileJsonSchema never crashes and fails only with the codes it documents
// (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, DEADLINE_EXCEEDED); on a
// compiled grammar the mask allows a token exactly when AcceptToken takes it, along the text's
// tokens, and Rollback returns to the first mask.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  static const std::unique_ptr<Tokenizer> tokenizer = fuzz::MakeSpmTokenizer(512);
  static const TokenTrie trie(*tokenizer);
  if (size > 4096) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view text = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
  JsonSchemaOptions options;
  options.limits.compile_timeout = std::chrono::milliseconds(2000);
  StatusOr<CompiledSchema> compiled = CompileJsonSchema(input.substr(0, split), options);
  if (!compiled.ok()) {
    const StatusCode c = compiled.status().code();
    FUZZ_CHECK(c == StatusCode::kInvalidArgument || c == StatusCode::kResourceExhausted ||
               c == StatusCode::kFailedPrecondition || c == StatusCode::kDeadlineExceeded);
    return 0;
  }
  auto grammar = std::make_shared<CompiledGrammar>(std::move(compiled->grammar), &trie);
  GrammarMatcher m(grammar);
  TokenMask first(trie.vocab_size()), mask(trie.vocab_size());
  m.FillMask(&first);
  mask = first;
  int accepted = 0;
  for (int32_t token : tokenizer->Encode(text.substr(0, 200), false, false)) {
    const bool allowed = mask.Test(token);
    FUZZ_CHECK(m.AcceptToken(token) == allowed);
    if (!allowed) break;
    ++accepted;
    m.FillMask(&mask);
  }
  m.Rollback(accepted);
  m.FillMask(&mask);
  FUZZ_CHECK(mask == first);
  return 0;
}
