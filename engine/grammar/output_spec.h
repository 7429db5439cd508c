// StructuredOutputSpec: what a request constrains its output to, the plain value a front end
// fills from the request (OpenAI's response_format, vLLM's structured outputs, llama.cpp's
// grammar): a JSON Schema (its text), any JSON object, a regular expression, one of a list of
// strings, or a GBNF grammar. GrammarCache (structured_output.h) compiles it.
#pragma once

#include <string>
#include <vector>

namespace kvserve {

struct StructuredOutputSpec {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  std::string text;                  // kJsonSchema: the schema's JSON; kRegex: the pattern; kGrammar: GBNF
  std::vector<std::string> choices;  // kChoice
  bool lenient = false;              // kJsonSchema: ignore keywords it cannot enforce
  // JSON: whitespace bytes allowed in each gap between tokens of the text (a model cannot
  // loop on spaces); -1: any amount.
  int max_whitespace = 20;

  bool active() const { return kind != Kind::kNone; }
  // "json_schema", "json_object", "regex", "choice", "grammar" ("none" for kNone).
  const char* kind_name() const;
};

}  // namespace kvserve
