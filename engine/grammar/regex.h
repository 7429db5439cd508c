// Regular expressions as byte automata: the building block of structured outputs (JSON
// Schema `pattern` and `format`, a grammar's terminals, `choice`). engine/grammar knows a
// vocabulary's bytes, never the model, the backend or the server.
//
// Syntax: the ECMAScript subset that JSON Schema's `pattern` uses, over Unicode code points
// (UTF-8 bytes in the automaton):
//   literals and escapes \n \r \t \f \v \0 \xHH \uHHHH \u{H...} \/ \. etc.; `.` (any code
//   point but \n and \r); classes [...] [^...] with ranges and \d \D \w \W \s \S inside or
//   outside; groups (...) (?:...) (?<name>...); alternation |; quantifiers * + ? {n} {n,}
//   {n,m} (lazy forms match the same language); ^ and $ at the start and end of the whole
//   pattern or of a top-level alternative.
// Refused with INVALID_ARGUMENT naming the construct: backreferences, lookaround, \b \B, ^
// or $ elsewhere, counts over kMaxRepeat, groups nested over kMaxRegexNesting, a quantifier
// after a quantifier (a** as ECMAScript: nothing to repeat), unbalanced brackets.
//
// Matching: `Search` semantics by default (JSON Schema: the pattern may match anywhere in the
// string, so an unanchored side gets .* there); `anchored` matches the whole string.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/grammar/grammar_limits.h"

namespace kvserve {

inline constexpr int kMaxRepeat = 1000;
// Groups deeper than this are refused: the parser and the automaton builder recurse by group.
inline constexpr int kMaxRegexNesting = 200;

// A deterministic automaton over bytes; state -1 is dead. Every state can reach an accepting
// one (dead ends are pruned), so a live state means "this prefix can still match".
// Bytes that every state treats alike share a class, an alphabet of the automaton's own: a
// state costs 4 bytes per class instead of a 1 KiB row, so memory follows what the automaton
// tells apart (a JSON string about 20 classes, a number 6, digits and a dot 3).
struct ByteDfa {
  static constexpr int32_t kDead = -1;
  using Row = std::array<int32_t, 256>;  // a state's transitions by byte, while building

  std::array<uint8_t, 256> byte_class{};  // [byte] its class
  int32_t num_classes = 1;
  std::vector<int32_t> table;             // [state * num_classes + class]
  std::vector<char> accepting;            // [state]
  int32_t start = kDead;

  int32_t Step(int32_t state, uint8_t byte) const {
    return state < 0 ? kDead : table[static_cast<size_t>(state) * static_cast<size_t>(num_classes) + byte_class[byte]];
  }
  // The state after `bytes` from `state` (kDead once dead).
  int32_t Walk(int32_t state, std::string_view bytes) const;
  bool Accepts(int32_t state) const { return state >= 0 && accepting[static_cast<size_t>(state)] != 0; }
  bool Matches(std::string_view text) const { return Accepts(Walk(start, text)); }
  int num_states() const { return static_cast<int>(accepting.size()); }
  size_t memory_bytes() const { return sizeof(ByteDfa) + table.size() * sizeof(int32_t) + accepting.size(); }

  // The automaton whose state s goes by byte b to rows[s][b], its classes found.
  static ByteDfa FromRows(std::span<const Row> rows, std::vector<char> accepting, int32_t start);
  // The automaton whose state s goes by any byte of class c (of `byte_class`) to
  // table[s * num_classes + c], with classes whose columns are equal merged and numbered by
  // their first byte: equal automata built by different routes come out equal.
  static ByteDfa FromTable(const std::array<uint8_t, 256>& byte_class, int32_t num_classes, std::vector<int32_t> table,
                           std::vector<char> accepting, int32_t start);
};

struct RegexOptions {
  bool anchored = false;  // the whole string (else: search, as JSON Schema's pattern)
  // Past these, RESOURCE_EXHAUSTED (GrammarLimits says what each bounds).
  int max_states = GrammarLimits{}.max_regex_states;
  int max_nfa_states = GrammarLimits{}.max_nfa_states;
  int64_t max_subset_work = GrammarLimits{}.max_subset_work;
  // Match the JSON string literal of each matching string instead: its quotes, and its
  // characters as JSON writes them: " and \ as \" and \\, control characters as \b \f \n \r
  // \t or \u00XX (hex in either case), / raw or as \/, every other code point raw (UTF-8).
  bool json_string = false;
};

[[nodiscard]] StatusOr<ByteDfa> CompileRegex(std::string_view pattern, const RegexOptions& options = {});
// The options of a compile under `limits`.
inline RegexOptions RegexOptionsWithin(const GrammarLimits& limits, bool anchored, bool json_string = false) {
  return {.anchored = anchored, .max_states = limits.max_regex_states, .max_nfa_states = limits.max_nfa_states,
          .max_subset_work = limits.max_subset_work, .json_string = json_string};
}

// The DFA of exactly one of `choices` (byte strings): a trie, a state per distinct prefix.
ByteDfa ChoiceDfa(std::span<const std::string> choices);
// INVALID_ARGUMENT past what a choice list or an enum may hold (GrammarLimits'
// max_choice_strings and max_choice_bytes; an unbounded guided_choice of 256 KiB once cost 256
// MiB); `what` names the list in the message.
[[nodiscard]] Status CheckChoices(std::span<const std::string> choices, std::string_view what,
                                  const GrammarLimits& limits);

// The strings both automata match (`keep_b`) or `a` matches and `b` does not (!keep_b),
// pruned; RESOURCE_EXHAUSTED past `max_states`.
[[nodiscard]] StatusOr<ByteDfa> IntersectDfa(const ByteDfa& a, const ByteDfa& b, bool keep_b = true,
                                             int max_states = 20000);
// `dfa` with its equivalent states merged (Moore's refinement): the smallest automaton of its
// language when `dfa` is pruned (PruneDfa; states that cannot accept stay as one class).
ByteDfa MinimizeDfa(const ByteDfa& dfa);
// JSON whitespace (space, \t, \n, \r) before a lexeme (LexGrammar::whitespace): any amount
// (max_ws -1), or, bounded, the way JSON is laid out: up to max_ws spaces and tabs, or one line
// break ("\n" or "\r\n") and up to max_ws spaces and tabs of indentation after it (no blank
// lines, no trailing spaces). Its accepting states are where the lexeme may start; it has
// transitions on whitespace only, so a lexeme after it must not start with whitespace.
ByteDfa WhitespaceLayout(int max_ws);
// The JSON encoding of `text` as a string literal, as RegexOptions::json_string writes it
// (control characters other than \b \f \n \r \t as lower-case \u00xx, as Python does).
std::string JsonStringLiteral(std::string_view text);

}  // namespace kvserve
