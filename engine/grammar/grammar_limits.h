// GrammarLimits: every bound on what structured outputs may cost, in one place. The engine's
// config holds one (the server's --grammar-* flags set them); the compilers, the matcher and
// GrammarCache read theirs from it. Limits that guard a parser's stack rather than memory or
// time (kMaxRegexNesting, kMaxRepeat in regex.h; a schema's nesting) stay constants.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace kvserve {

struct GrammarLimits {
  // ---- one spec: past any of these it is refused (INVALID_ARGUMENT, a 400) ----
  // One regex's automaton (a pattern, a format, an intersection of them).
  int max_regex_states = 20000;
  // What a regex compile may hold and do on the way: its NFA's states (counts multiply them:
  // ((a{1000}){1000})) and the NFA states its subset construction visits in all (memory and
  // time; ((a+)+)+... doubles them per level).
  int max_nfa_states = 250000;
  int64_t max_subset_work = int64_t{1} << 23;
  // All the automaton states of one grammar's lexemes, and its rules.
  int64_t max_grammar_states = 200000;
  int64_t max_grammar_rules = 200000;
  // A choice list or an enum (a state per distinct prefix).
  size_t max_choice_strings = 10000;
  size_t max_choice_bytes = size_t{64} << 10;
  // A compile, waiting for a compile thread included (DEADLINE_EXCEEDED past it).
  std::chrono::milliseconds compile_timeout{10000};
  // ---- one sequence: the parser's work for one token (items added and visited). An
  // ambiguous grammar (s ::= s s s | s s | "a") grows it without bound; past it the request
  // ends with an error (GrammarMatcher::exhausted) and the batch goes on.
  int64_t max_parser_work_per_token = int64_t{1} << 25;
  // ---- what the server keeps and runs (GrammarCache) ----
  size_t cache_entries = 64;                    // compiled grammars kept
  size_t cache_bytes = size_t{1} << 30;         // ... and their bytes (the newest always stays)
  size_t shared_mask_bytes = size_t{32} << 20;  // token-trie walks shared by all grammars
  int compile_threads = 1;                      // compiles at once, off the front ends' threads
  int max_waiting_compiles = 16;                // compiles queued beyond those (then 429)
};

}  // namespace kvserve
