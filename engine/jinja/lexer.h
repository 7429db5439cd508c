// The Jinja lexer: template source -> tokens, with jinja2's whitespace rules as transformers
// configures them (trim_blocks: the newline after a block or comment tag goes; lstrip_blocks:
// spaces and tabs before a block or comment tag that starts its line go; `-` on a tag strips
// all whitespace on that side, `+` turns the rule of that side off). Comments vanish, raw
// blocks are text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvserve::jinja {

struct Token {
  enum class Type {
    kText,         // template data
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,
    kString,       // text: the decoded value
    kInteger,
    kFloat,
    kOperator,     // text: + - * / // % ** ~ ( ) [ ] { } , . : | = == != < > <= >=
    kEnd,
  };
  Type type = Type::kEnd;
  std::string text;
  int line = 1;
};

// Throws TemplateError on an unterminated tag, string or comment, or an unknown character.
std::vector<Token> Tokenize(std::string_view source);

}  // namespace kvserve::jinja
