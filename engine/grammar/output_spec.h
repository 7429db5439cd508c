// StructuredOutputSpec: what a request constrains its output to, the plain value a front end
// fills from the request (OpenAI's response_format, vLLM's structured outputs, llama.cpp's
// grammar): a JSON Schema (its text), any JSON object, a regular expression, one of a list of
// strings, or a GBNF grammar. GrammarCache (structured_output.h) compiles it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

struct StructuredOutputSpec {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  std::string text;                  // kJsonSchema: the schema's JSON; kRegex: the pattern; kGrammar: GBNF
  std::vector<std::string> choices;  // kChoice
  bool lenient = false;              // kJsonSchema: ignore keywords it cannot enforce
  // JSON: whitespace in each gap between tokens of the text: up to this many spaces and tabs,
  // or one line break and up to this many of indentation (a model can lay JSON out, not loop
  // on blank lines); -1: any amount.
  int max_whitespace = 20;
  // Tool calls: a JSON value framed and repeated (kJsonSchema only):
  //   prefix item_prefix VALUE item_suffix (separator item_prefix VALUE item_suffix)* suffix
  // with min_items..max_items values (max_items -1: no limit). Inactive when every string is
  // empty and both counts are 1. With `heads`, `text` is a JSON array of schemas, one per
  // head, and VALUE is one of `heads[i] <a value of schema i>`. In these texts kIdSlot stands
  // for an id (kIdLength letters and digits), kIndexSlot for a number, kSpaceSlot for
  // whitespace.
  static constexpr char kIdSlot = '\x01';
  static constexpr char kIndexSlot = '\x02';
  static constexpr char kSpaceSlot = '\x03';  // up to 8 spaces, tabs or line breaks
  static constexpr int kIdLength = 9;
  struct Frame {
    std::string prefix, item_prefix, item_suffix, separator, suffix;
    std::vector<std::string> heads;
    int min_items = 1;
    int max_items = 1;
    bool active() const {
      return !(prefix.empty() && item_prefix.empty() && item_suffix.empty() && separator.empty() &&
               suffix.empty() && heads.empty() && min_items == 1 && max_items == 1);
    }
  } frame;
  // Lazy constraint (tool_choice auto): the output is free until one of these texts appears in
  // it; from the start of that text on, the grammar applies (the grammar starts with it). A
  // control token whose text is a trigger (Mistral's [TOOL_CALLS]) counts, and its text is
  // then part of the output. Empty: the grammar applies from the first token.
  std::vector<std::string> triggers;

  bool active() const { return kind != Kind::kNone; }
  // The output starts with free text that ends with `end` (a reasoning model's thinking): the
  // constraint applies from there on (`end`, up to 8 spaces or line breaks, then what it
  // constrains), triggered by `end`. JSON and regular expressions only, and only where the
  // constraint applied from the first token; others are left as they are.
  void StartAfter(const std::string& end) {
    if (!triggers.empty() || end.empty()) return;
    if (kind == Kind::kJsonSchema || kind == Kind::kJsonObject) {
      frame.prefix = end + kSpaceSlot + frame.prefix;
    } else if (kind == Kind::kRegex) {
      std::string body = text;
      if (body.starts_with('^')) body.erase(0, 1);
      if (body.ends_with('$') && !body.ends_with("\\$")) body.pop_back();
      text = SlotPattern(end + kSpaceSlot) + "(?:" + body + ")";
    } else {
      return;
    }
    triggers = {end};
  }
  // A regular expression (regex.h) that matches exactly `text`, with its slots (kIdSlot,
  // kIndexSlot, kSpaceSlot) as what they stand for.
  static std::string SlotPattern(std::string_view text) {
    std::string pattern;
    for (const char c : text) {
      if (c == kIdSlot) {
        pattern += "[A-Za-z0-9]{" + std::to_string(kIdLength) + "}";
      } else if (c == kIndexSlot) {
        pattern += "(0|[1-9][0-9]{0,3})";
      } else if (c == kSpaceSlot) {
        pattern += "[ \\t\\n]{0,8}";
      } else if (std::string_view("\\^$.|?*+()[]{}/-").find(c) != std::string_view::npos) {
        pattern += std::string("\\") + c;
      } else if (c == '\n' || c == '\r' || c == '\t') {
        pattern += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      } else {
        pattern += c;
      }
    }
    return pattern;
  }
  // "json_schema", "json_object", "regex", "choice", "grammar" ("none" for kNone).
  const char* kind_name() const;
};

}  // namespace kvserve
