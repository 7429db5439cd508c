// Fuzz target: the regex compiler of structured outputs (engine/grammar/regex.h), whose
// patterns come from clients (JSON Schema `pattern`).
//
// Input: a pattern, then optionally '\0' and a text to match.
//
// Checks: CompileRegex never crashes and fails only with INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED; walking a compiled automaton stays inside it; a whole-string match is
// also a search match.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/grammar/regex.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size > 512) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view pattern = input.substr(0, split);
  const std::string_view text = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
  StatusOr<ByteDfa> search = CompileRegex(pattern, {.anchored = false, .max_states = 2000});
  StatusOr<ByteDfa> whole = CompileRegex(pattern, {.anchored = true, .max_states = 2000});
  for (const StatusOr<ByteDfa>* dfa : {&search, &whole}) {
    if (dfa->ok()) {
      int32_t state = (*dfa)->start;
      for (char c : text) {
        state = (*dfa)->Step(state, static_cast<uint8_t>(c));
        if (state >= (*dfa)->num_states()) std::abort();
      }
      continue;
    }
    const StatusCode code = dfa->status().code();
    if (code != StatusCode::kInvalidArgument && code != StatusCode::kResourceExhausted) std::abort();
  }
  if (search.ok() && whole.ok() && whole->Matches(text) && !search->Matches(text)) std::abort();
  return 0;
}
