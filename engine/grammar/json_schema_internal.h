// Private to engine/grammar: the pieces of the JSON Schema compiler (json_schema.h) that its
// files share: lexeme automata for numbers and strings, and schema merging for allOf.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/grammar/lex_grammar.h"
#include "engine/grammar/regex.h"

namespace kvserve::json_schema {

using Json = nlohmann::ordered_json;

// The count keywords (minLength, maxItems, ...): a schema's value must be a non-negative
// integer (the compiler refuses any other with INVALID_ARGUMENT before reading one).
inline constexpr const char* kCountKeywords[] = {"minLength", "maxLength", "minItems", "maxItems", "minProperties",
                                                "maxProperties"};
// Counts past this read as it: no string, array or object the grammar can build is that long.
inline constexpr int64_t kCountCap = int64_t{1} << 31;
// `key`'s value in `schema`, `fallback` when absent; capped at kCountCap.
inline int64_t CountOf(const Json& schema, const char* key, int64_t fallback) {
  const auto it = schema.find(key);
  if (it == schema.end() || !it->is_number()) return fallback;
  const double v = it->get<double>();
  return v >= static_cast<double>(kCountCap) ? kCountCap : v >= 0 ? static_cast<int64_t>(v) : fallback;
}

// ---- json_schema_lexemes.cpp ----------------------------------------------------------------

// Decimal integers (an optional minus, no leading zeros, no "-0") in [lo, hi] (nullopt: no
// bound) as a regex; empty when the range is empty.
std::string IntegerRangeRegex(std::optional<int64_t> lo, std::optional<int64_t> hi);
// Plain decimal numbers (no exponent) >= a (> a when `exclusive`) or <= a (< a).
std::string NumberAtLeastRegex(int64_t a, bool exclusive);
std::string NumberAtMostRegex(int64_t b, bool exclusive);
inline constexpr std::string_view kNumberRegex = "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?";
inline constexpr std::string_view kIntegerRegex = "-?(0|[1-9][0-9]*)";
// Decimal integers divisible by k (1 <= k <= 100000).
ByteDfa DivisibleDfa(int64_t k);

// The automaton and cache key of a number lexeme: `schema`'s bounds and multipleOf, for
// integers or any number. INVALID_ARGUMENT names what it cannot express.
struct LexemeSpec {
  std::string key;
  ByteDfa dfa;
  // Strings whose length the lexer counts (CodePointBound): the automaton has no bound then.
  int64_t min_code_points = 0;
  int64_t max_code_points = -1;

  bool Matches(std::string_view text) const {
    return CodePointBound::For(dfa, dfa.num_states(), min_code_points, max_code_points).Matches(dfa, text);
  }
};
[[nodiscard]] StatusOr<LexemeSpec> NumberLexeme(const Json& schema, bool integer, const std::string& pointer,
                                                const GrammarLimits& limits);
// A string value's lexeme (its JSON literal, quotes included): minLength, maxLength,
// pattern(s), format. The automaton is left empty when `known` has the key already.
[[nodiscard]] StatusOr<LexemeSpec> StringLexeme(const Json& schema, const std::string& pointer, bool lenient,
                                                const GrammarLimits& limits, std::vector<std::string>* ignored,
                                                const LexGrammar* known = nullptr);

// ---- json_schema_merge.cpp ------------------------------------------------------------------

// The schema whose instances are those of both (allOf), for schemas without $ref and allOf at
// their top; INVALID_ARGUMENT where the merge is not expressible.
[[nodiscard]] StatusOr<Json> MergeSchemas(const Json& a, const Json& b, const std::string& pointer);
// The JSON types (a bit per "null", "boolean", "object", "array", "string", "integer",
// "number") a schema's values may have, as far as `type`, `const` and `enum` say.
inline constexpr unsigned kNull = 1, kBoolean = 2, kObject = 4, kArray = 8, kString = 16, kInteger = 32, kNumber = 64,
                         kAllTypes = 127;
unsigned TypesOf(const Json& schema);
unsigned TypeBitOf(const Json& value);
// Whether no value is valid under both (decidable cases only: false means "may overlap").
bool ProvablyDisjoint(const Json& a, const Json& b);
// Whether `schema` has a keyword that validates (anything but annotations).
bool HasValidation(const Json& schema);
// `schema` (an object with "not") with its `not` said positively, where that is exact:
// not/not (allOf), not/type (the other types), not/required of one key (an object without
// it), not/enum or not/const of strings ("$kvserve_excluded": strings minus those). Nothing for
// any other `not`.
std::optional<Json> RewriteNot(const Json& schema);

}  // namespace kvserve::json_schema
