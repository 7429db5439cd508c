// Renderer: walks a template's syntax tree with a stack of scopes (render.cpp). Builtins
// (builtins.h) call back into it to call values, apply filters and tests, and count work.
// One Renderer per Render call; not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/jinja/ast.h"
#include "engine/jinja/jinja.h"

namespace kvserve::jinja {

class Renderer {
 public:
  explicit Renderer(const RenderOptions& options) : options_(options) {}

  // Renders `body` with `variables` (a dict) as the template's globals.
  std::string Run(const Body& body, const Value& variables);

  // Calls a callable value (TemplateError when it is not one).
  Value CallValue(const Value& callee, CallArgs& args);
  // Applies a filter or a test by name (TemplateError when unknown).
  Value ApplyFilter(std::string_view name, const Value& input, CallArgs& args);
  bool ApplyTest(std::string_view name, const Value& value, CallArgs& args);
  // Counts `n` units of work (TemplateError past RenderOptions::max_steps).
  void Step(int64_t n = 1);
  // TemplateError (a limit) when a string of `bytes` would pass RenderOptions::max_output_bytes.
  void CheckSize(size_t bytes) const;
  const RenderOptions& options() const { return options_; }

  // Attribute and item lookup as jinja2's sandbox does them (`a.b`, `a[b]`).
  Value GetAttr(const Value& target, std::string_view name);
  Value GetItem(const Value& target, const Value& key);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Scope {
    std::unordered_map<std::string, Value> vars;
    bool barrier = false;  // a macro's scope: lookups skip to the globals below it
  };

  Flow Render(const Body& body, std::string* out);
  Flow RenderNode(const Node& n, std::string* out);
  void RenderFor(const Node& n, std::string* out);
  void Assign(const Target& target, const Value& v, int line);
  Value MakeMacro(const Node& n);
  Value Eval(const Expr& e);
  Value EvalBinary(const Expr& e);
  Value EvalCompare(const Expr& e);
  Value Repeat(const Value& sequence, int64_t times, int line);  // str * int, list * int
  Value EvalCall(const Expr& e, const Value* caller = nullptr);
  Value EvalFilter(const Expr& e, const Value* input);
  CallArgs EvalArgs(const Expr& e, size_t first);
  Value Lookup(const std::string& name) const;
  void Append(std::string* out, std::string_view text);

  const RenderOptions& options_;
  std::vector<Scope> scopes_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace kvserve::jinja
