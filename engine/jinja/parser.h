// The Jinja parser: tokens (lexer.h) -> a syntax tree (ast.h), with jinja2's operator
// precedence and statements: if/elif/else, for (with else, a filter condition, unpacking,
// recursive), set (expression and block, namespace attributes), macro, call blocks, filter
// blocks, break/continue (jinja2.ext.loopcontrols) and transformers' {% generation %} block.
// Template inheritance and includes are refused (a chat template has nothing to load).
#pragma once

#include <string_view>

#include "engine/jinja/ast.h"

namespace kvserve::jinja {

// Throws TemplateError with the line of the first error.
Body Parse(std::string_view source);

}  // namespace kvserve::jinja
