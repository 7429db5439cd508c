// JSON Schema -> LexGrammar (lex_grammar.h): the values a schema allows, as JSON text.
//
// Supported (drafts 4 to 2020-12): type (and unions), properties, required,
// additionalProperties (false, true or a schema), patternProperties, minProperties and
// maxProperties where a grammar can count them, enum, const, anyOf, oneOf (alternatives that
// provably exclude each other), allOf (merged), $ref / $defs / definitions (local pointers and
// anchors, recursive too), items, prefixItems (and draft 4's items array with
// additionalItems), minItems, maxItems, minLength, maxLength, pattern, format (formats.h),
// minimum, maximum, exclusiveMinimum, exclusiveMaximum (draft 4's boolean form too),
// multipleOf, nullable (OpenAPI), not where it has a positive form (not/not, not/type,
// not/required of one key, not/enum or not/const of strings). Unknown keywords are
// annotations and ignored, as the specification says.
//
// Exactness: a value the grammar accepts is valid (never the reverse failure: an invalid
// instance accepted). Where a grammar cannot say exactly what a keyword means, it allows a
// subset of the valid texts: properties in the order of `properties` (extra ones after them),
// numbers with bounds in plain decimal notation, fractional bounds rounded inwards, integers
// without a fraction, strings with a pattern, format or not/enum up to 1,000 code points (a
// length alone is counted by the lexer, exactly: lex_grammar.h's CodePointBound), arrays up to
// 2,000 items, non-ASCII characters raw. A keyword it cannot enforce at all (any other not,
// if/then/else, uniqueItems, contains, dependencies, propertyNames, unevaluated*, oneOf whose
// alternatives may overlap, a format of the specification that formats.h lacks, a remote
// $ref; a format name the specification does not define is an annotation, as it says) is
// INVALID_ARGUMENT naming it and its JSON pointer, unless `lenient`, which ignores it and lists
// it in `ignored`.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/grammar/lex_grammar.h"

namespace kvserve {

struct JsonSchemaOptions {
  // JSON whitespace allowed between tokens of the text, per gap: -1 any amount (JSON's own
  // rule, for checking texts); generation wants a bound so a model cannot loop on spaces.
  int max_whitespace = -1;
  bool lenient = false;
  // The text is a JSON array of schemas: the root's alternative i is schema i's value alone
  // (no whitespace after it; unproductive alternatives are kept, so they stay in order).
  bool alternatives = false;
  // Past its compile_timeout DEADLINE_EXCEEDED; past its automaton and rule bounds
  // RESOURCE_EXHAUSTED; past its choice bounds INVALID_ARGUMENT.
  GrammarLimits limits;
};

struct CompiledSchema {
  LexGrammar grammar;
  std::vector<std::string> ignored;  // lenient: "keyword at /pointer" of what was not enforced
};

// `schema` is the schema's JSON text (a malformed one is INVALID_ARGUMENT). The engine takes
// text, as it takes GBNF text: JSON values stay in the layers that speak JSON.
[[nodiscard]] StatusOr<CompiledSchema> CompileJsonSchema(std::string_view schema, const JsonSchemaOptions& options = {});

}  // namespace kvserve
