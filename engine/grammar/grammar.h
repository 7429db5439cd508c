// Grammar: a context-free grammar over bytes, what structured-output constraints that are not
// regular compile to through this form: GBNF grammars (JSON Schemas compile to LexGrammar,
// lex_grammar.h). Terminals are byte
// ranges; a code point class becomes a rule whose alternatives are its UTF-8 byte sequences.
//
// GBNF (llama.cpp's grammar format, so the grammars users have work):
//   name ::= alternative | alternative ...      rules; "root" is the start
//   "literal" with escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH
//   [a-z0-9_] [^"\\] character classes over code points; . any code point
//   rule references, ( groups ), postfix * + ? {m} {m,} {m,n}; # comments
// A rule ends at a newline outside parentheses (its body may start on the line after ::=).
// Errors (INVALID_ARGUMENT) give the line and column: an undefined rule, no root, a
// malformed literal, class or count, counts that expand to over 2^20 symbols, groups nested
// over kMaxRegexNesting (regex.h) deep.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvserve {

struct GrammarSymbol {
  enum Kind : uint8_t { kBytes, kRule } kind = kBytes;
  uint8_t lo = 0, hi = 0;  // kBytes: one byte in [lo, hi]
  int32_t rule = -1;       // kRule
};

using GrammarSequence = std::vector<GrammarSymbol>;  // empty: the empty string

struct Grammar {
  std::vector<std::string> names;                    // [rule]; generated rules: "name#n"
  std::vector<std::vector<GrammarSequence>> rules;   // [rule] -> alternatives
  int32_t root = -1;
};

[[nodiscard]] StatusOr<Grammar> ParseGbnf(std::string_view text);

}  // namespace kvserve
