// A Jinja engine for chat templates: renders as Hugging Face's apply_chat_template does with
// Python's jinja2 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the loop-controls
// extension, transformers' `tojson`, `raise_exception`, `strftime_now` and `{% generation %}`).
//
// The engine knows JSON-like values (value.h) and nothing of models or servers: the caller
// passes every variable (messages, tools, bos_token, ...). A template reaches nothing else:
// no files, no attributes of host objects, and the mutating methods of lists and dicts are
// refused as in jinja2's immutable sandbox. Rendering is bounded: past `max_steps` evaluation
// steps, a string past `max_output_bytes`, a list built past 2^18 items, a range past 100,000
// (jinja2's sandbox limit) or macros nested 100 deep it fails with a clear error.
//
// What is not supported of Jinja (a clear error at parse or render time): template
// inheritance and includes (extends, block, include, import: a chat template has nothing to
// load), `*args`/`**kwargs` in calls, recursive loops, and the rarely used filters and tests
// not listed in builtins.cpp. Strings compare, slice and count in code points as Python's;
// upper/lower/title map ASCII letters only.
//
// A parsed Template is immutable: Render may run on many threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/jinja/value.h"

namespace kvserve::jinja {

struct RenderOptions {
  int64_t max_steps = 10'000'000;          // expressions and statements evaluated
  size_t max_output_bytes = 32u << 20;     // the rendered text, and any string it computes
  // strftime_now's clock (0: the current time), seconds since the epoch; formatted in local time.
  int64_t now_seconds = 0;
};

struct Node;

class Template {
 public:
  // INVALID_ARGUMENT naming the line for a template that does not parse.
  [[nodiscard]] static StatusOr<Template> Parse(std::string_view source);

  // Renders with `variables` (a dict). A template that calls raise_exception(message) fails
  // with INVALID_ARGUMENT and that message unchanged; other errors are INVALID_ARGUMENT with
  // "chat template error: ..." (a template refusing its input is the client's problem).
  // RESOURCE_EXHAUSTED past the options' bounds.
  [[nodiscard]] StatusOr<std::string> Render(const Value& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace kvserve::jinja
