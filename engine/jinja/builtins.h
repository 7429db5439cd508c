// What a template can call: jinja2's filters (filters.cpp) and tests, the methods of str,
// list and dict that jinja2's immutable sandbox allows, and the globals transformers gives
// (range, namespace, dict, raise_exception, strftime_now, cycler, joiner) (builtins.cpp).
// Each throws TemplateError for bad arguments, with Python's message where templates rely on it.
#pragma once

#include <optional>
#include <string_view>

#include "engine/jinja/value.h"

namespace kvserve::jinja {

class Renderer;

// False when there is no filter / test of that name.
bool CallFilter(Renderer& r, std::string_view name, const Value& input, CallArgs& args, Value* out);
bool CallTest(Renderer& r, std::string_view name, const Value& value, CallArgs& args, bool* out);

// `receiver.name` as a bound method of a str, list or dict; nullopt when the type has no
// method of that name. A method that would mutate (list.append, dict.update, ...) is
// returned too, and refuses when called, as the sandbox does.
std::optional<Value> Method(const Value& receiver, std::string_view name);

// The global functions, by name.
Dict Globals();

// Python's `text % values` for %s, %d, %i, %r, %f and %% (a tuple gives several values).
Value PercentFormat(const std::string& text, const Value& values);

// Python's `a < b` for the types templates compare (numbers, strings, lists; TemplateError for
// others).
bool PythonLess(const Value& a, const Value& b);
// `item in container` as Python answers it (TemplateError for a container that is none).
bool Contains(const Value& container, const Value& item);
// The items a for loop walks: list items, dict keys, string characters; undefined: none.
List IterateValue(const Value& v);

// Argument helpers: the i-th positional or the keyword `name`, or nullptr.
const Value* Arg(const CallArgs& args, size_t i, std::string_view name);

}  // namespace kvserve::jinja
