// Fuzz target: the GBNF parser and the Earley recognizer of structured outputs
// (engine/grammar/grammar.h; tests/reference/earley.h, the reference recognizer); grammars come from clients.
//
// Input: a grammar, then optionally '\0' and a text to follow through it.
//
// Checks: ParseGbnf never crashes and fails only with INVALID_ARGUMENT; a parsed grammar
// references only its own rules; the recognizer consumes the text byte by byte exactly when
// Allows says it can, and rolling everything back returns it to where it started.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tests/reference/earley.h"
#include "engine/grammar/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size > 2048) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view text = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
  StatusOr<Grammar> g = ParseGbnf(input.substr(0, split));
  if (!g.ok()) {
    if (g.status().code() != StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (g->root < 0 || g->root >= static_cast<int32_t>(g->rules.size())) std::abort();
  for (const auto& alts : g->rules) {
    for (const GrammarSequence& seq : alts) {
      for (const GrammarSymbol& s : seq) {
        if (s.kind == GrammarSymbol::kRule && (s.rule < 0 || s.rule >= static_cast<int32_t>(g->rules.size()))) {
          std::abort();
        }
        if (s.kind == GrammarSymbol::kBytes && s.lo > s.hi) std::abort();
      }
    }
  }
  EarleyRecognizer r(&*g);
  const bool accepts_empty = r.AcceptsEnd();
  for (char c : text.substr(0, 64)) {
    const bool allowed = r.Allows(static_cast<uint8_t>(c));
    if (r.Advance(static_cast<uint8_t>(c)) != allowed) std::abort();
    if (!allowed) break;
  }
  r.Rollback(r.num_bytes());
  if (r.num_bytes() != 0 || r.AcceptsEnd() != accepts_empty) std::abort();
  return 0;
}
