// Renderer (render.h): statements, scopes and macros (expressions: eval.cpp); Template (jinja.h).
#include "engine/jinja/render.h"

#include <cmath>

#include "engine/jinja/builtins.h"
#include "engine/jinja/error.h"
#include "engine/jinja/parser.h"
#include "engine/jinja/utf8.h"

namespace kvserve::jinja {
namespace {

// Macro calls nest at most this deep (a recursive macro cannot overflow the stack).
constexpr int kMaxCallDepth = 100;

// The items a for loop (or a filter) walks: list items, dict keys, string characters.
List Iterate(const Value& v, int line) {
  switch (v.type()) {
    case Value::Type::kList: return v.list();
    case Value::Type::kDict: {
      List keys;
      for (const auto& [k, item] : v.dict()) keys.push_back(k);
      return keys;
    }
    case Value::Type::kString: {
      List chars;
      const std::vector<size_t> at = CodePointOffsets(v.str());
      for (size_t i = 0; i + 1 < at.size(); ++i) chars.emplace_back(v.str().substr(at[i], at[i + 1] - at[i]));
      return chars;
    }
    case Value::Type::kUndefined: return {};
    default: FailAt(line, std::string("'") + v.TypeName() + "' object is not iterable");
  }
}

}  // namespace

List IterateValue(const Value& v) { return Iterate(v, 0); }

// ------------------------------------------------------------------ statements

std::string Renderer::Run(const Body& body, const Value& variables) {
  scopes_.clear();
  scopes_.emplace_back();
  for (auto& [name, fn] : Globals()) scopes_.back().vars[name.str()] = fn;
  if (variables.is_dict()) {
    for (const auto& [k, v] : variables.dict()) {
      if (k.is_string()) scopes_.back().vars[k.str()] = v;
    }
  }
  std::string out;
  if (Render(body, &out) != Flow::kNormal) throw TemplateError("break or continue outside a loop");
  return out;
}

void Renderer::Step(int64_t n) {
  steps_ += n;
  if (steps_ > options_.max_steps) {
    throw TemplateError("the template ran past its limit of " + std::to_string(options_.max_steps) + " steps",
                        TemplateError::Kind::kLimit);
  }
}

void Renderer::CheckSize(size_t bytes) const {
  if (bytes > options_.max_output_bytes) {
    throw TemplateError("a string grew past " + std::to_string(options_.max_output_bytes) + " bytes",
                        TemplateError::Kind::kLimit);
  }
}

void Renderer::Append(std::string* out, std::string_view text) {
  if (out->size() + text.size() > options_.max_output_bytes) {
    throw TemplateError("the template's output grew past " + std::to_string(options_.max_output_bytes) + " bytes",
                        TemplateError::Kind::kLimit);
  }
  out->append(text);
}

Renderer::Flow Renderer::Render(const Body& body, std::string* out) {
  for (const NodePtr& n : body) {
    const Flow flow = RenderNode(*n, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::RenderNode(const Node& n, std::string* out) {
  Step();
  switch (n.kind) {
    case Node::Kind::kText: Append(out, n.text); return Flow::kNormal;
    case Node::Kind::kOutput: Append(out, Eval(*n.expr).Str()); return Flow::kNormal;
    case Node::Kind::kIf:
      for (size_t i = 0; i < n.conditions.size(); ++i) {
        if (Eval(*n.conditions[i]).Truthy()) return Render(n.bodies[i], out);
      }
      return Render(n.else_body, out);
    case Node::Kind::kFor: RenderFor(n, out); return Flow::kNormal;
    case Node::Kind::kSet: Assign(n.target, Eval(*n.expr), n.line); return Flow::kNormal;
    case Node::Kind::kSetBlock: {
      std::string text;
      if (Render(n.bodies[0], &text) != Flow::kNormal) FailAt(n.line, "break or continue inside a set block");
      Value v(std::move(text));
      if (n.expr) v = EvalFilter(*n.expr, &v);
      Assign(n.target, v, n.line);
      return Flow::kNormal;
    }
    case Node::Kind::kMacro: scopes_.back().vars[n.name] = MakeMacro(n); return Flow::kNormal;
    case Node::Kind::kCallBlock: {
      const Value caller = MakeMacro(n);
      Append(out, EvalCall(*n.expr, &caller).Str());
      return Flow::kNormal;
    }
    case Node::Kind::kFilterBlock: {
      std::string text;
      if (Render(n.bodies[0], &text) != Flow::kNormal) FailAt(n.line, "break or continue inside a filter block");
      const Value v(std::move(text));
      Append(out, EvalFilter(*n.expr, &v).Str());
      return Flow::kNormal;
    }
    case Node::Kind::kWith: {
      // The values see the scope outside; the body sees them.
      std::vector<std::pair<std::string, Value>> values;
      for (const auto& [name, expr] : n.params) values.emplace_back(name, Eval(*expr));
      scopes_.emplace_back();
      for (auto& [name, v] : values) scopes_.back().vars[name] = std::move(v);
      const Flow flow = Render(n.bodies[0], out);
      scopes_.pop_back();
      return flow;
    }
    case Node::Kind::kBreak: return Flow::kBreak;
    case Node::Kind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Renderer::RenderFor(const Node& n, std::string* out) {
  if (n.recursive) FailAt(n.line, "recursive loops are not supported");
  const Value iterable = Eval(*n.expr);
  if (iterable.is_none()) FailAt(n.line, "'NoneType' object is not iterable");
  List items = Iterate(iterable, n.line);
  if (!n.conditions.empty()) {
    // The filter sees each item bound to the target, in a scope of its own.
    List kept;
    for (const Value& item : items) {
      scopes_.emplace_back();
      Assign(n.target, item, n.line);
      const bool keep = Eval(*n.conditions[0]).Truthy();
      scopes_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Render(n.else_body, out);
    return;
  }
  const auto length = static_cast<int64_t>(items.size());
  bool completed = false;  // jinja2 runs `else` unless an iteration reached the end of its body
  for (int64_t i = 0; i < length; ++i) {
    Step();
    scopes_.emplace_back();
    Assign(n.target, items[static_cast<size_t>(i)], n.line);
    Dict loop;
    loop.reserve(12);
    loop.emplace_back("index", Value(i + 1));
    loop.emplace_back("index0", Value(i));
    loop.emplace_back("revindex", Value(length - i));
    loop.emplace_back("revindex0", Value(length - i - 1));
    loop.emplace_back("first", Value(i == 0));
    loop.emplace_back("last", Value(i == length - 1));
    loop.emplace_back("length", Value(length));
    loop.emplace_back("depth", Value(1));
    loop.emplace_back("depth0", Value(0));
    loop.emplace_back("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undefined("previtem"));
    loop.emplace_back("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value::Undefined("nextitem"));
    loop.emplace_back("cycle", Value::FromCallable("cycle", [i](Renderer&, CallArgs& args) {
                        if (args.positional.empty()) throw TemplateError("no items for cycling given");
                        return args.positional[static_cast<size_t>(i) % args.positional.size()];
                      }));
    scopes_.back().vars["loop"] = Value::FromDict(std::move(loop));
    const Flow flow = Render(n.bodies[0], out);
    scopes_.pop_back();
    completed = completed || flow == Flow::kNormal;
    if (flow == Flow::kBreak) break;
  }
  if (!completed) Render(n.else_body, out);
}

void Renderer::Assign(const Target& target, const Value& v, int line) {
  if (!target.attribute.empty()) {
    const Value ns = Lookup(target.names[0]);
    if (!ns.is_namespace()) FailAt(line, "can only set attributes on a namespace, not on '" + target.names[0] + "'");
    Dict& attrs = ns.ns().attributes;
    for (auto& [k, old] : attrs) {
      if (k.is_string() && k.str() == target.attribute) {
        old = v;
        return;
      }
    }
    attrs.emplace_back(Value(target.attribute), v);
    return;
  }
  if (target.names.size() == 1) {
    scopes_.back().vars[target.names[0]] = v;
    return;
  }
  const List items = Iterate(v, line);
  if (items.size() != target.names.size()) {
    FailAt(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                   std::to_string(target.names.size()) + " names");
  }
  for (size_t i = 0; i < items.size(); ++i) scopes_.back().vars[target.names[i]] = items[i];
}

namespace {

// Whether `body` reads the name `name` (a macro that reads `varargs` or `kwargs` takes extra
// arguments, as in jinja2).
bool Reads(const Expr& e, std::string_view name) {
  if (e.kind == Expr::Kind::kName && e.name == name) return true;
  for (const ExprPtr& a : e.args) {
    if (a && Reads(*a, name)) return true;
  }
  for (const auto& kw : e.kwargs) {
    if (kw.second && Reads(*kw.second, name)) return true;
  }
  return false;
}

bool Reads(const Body& body, std::string_view name) {
  for (const NodePtr& n : body) {
    if (n->expr && Reads(*n->expr, name)) return true;
    for (const ExprPtr& c : n->conditions) {
      if (c && Reads(*c, name)) return true;
    }
    for (const auto& p : n->params) {
      if (p.second && Reads(*p.second, name)) return true;
    }
    for (const Body& b : n->bodies) {
      if (Reads(b, name)) return true;
    }
    if (Reads(n->else_body, name)) return true;
  }
  return false;
}

}  // namespace

Value Renderer::MakeMacro(const Node& n) {
  const Node* node = &n;
  const bool takes_varargs = Reads(n.bodies[0], "varargs");
  const bool takes_kwargs = Reads(n.bodies[0], "kwargs");
  return Value::FromCallable(n.name.empty() ? "caller" : n.name, [node, takes_varargs, takes_kwargs](Renderer& r, CallArgs& args) {
    const std::string macro = node->name.empty() ? "caller" : node->name;
    if (!takes_varargs && args.positional.size() > node->params.size()) {
      FailAt(node->line, "macro '" + macro + "' takes not more than " + std::to_string(node->params.size()) + " argument(s)");
    }
    if (!takes_kwargs) {
      for (const auto& [k, v] : args.keyword) {
        bool known = k == "caller";
        for (const auto& p : node->params) known = known || p.first == k;
        if (!known) FailAt(node->line, "macro '" + macro + "' takes no keyword argument '" + k + "'");
      }
    }
    if (++r.call_depth_ > kMaxCallDepth) FailAt(node->line, "macros nest too deeply");
    r.scopes_.emplace_back();
    r.scopes_.back().barrier = true;
    auto& vars = r.scopes_.back().vars;
    size_t next = 0;
    for (const auto& [name, def] : node->params) {
      const Value* given = nullptr;
      for (auto& [k, v] : args.keyword) {
        if (k == name) given = &v;
      }
      if (next < args.positional.size() && given == nullptr) {
        vars[name] = args.positional[next++];
      } else if (given != nullptr) {
        vars[name] = *given;
      } else {
        vars[name] = def ? r.Eval(*def) : Value::Undefined(name);
      }
    }
    List varargs(args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, args.positional.size())),
                 args.positional.end());
    vars["varargs"] = Value::FromList(std::move(varargs), /*tuple=*/true);
    Dict kwargs;
    for (auto& [k, v] : args.keyword) {
      bool is_param = k == "caller";
      for (const auto& p : node->params) is_param = is_param || p.first == k;
      if (!is_param) kwargs.emplace_back(Value(k), v);
      if (k == "caller") vars["caller"] = v;
    }
    vars["kwargs"] = Value::FromDict(std::move(kwargs));
    std::string out;
    const Flow flow = r.Render(node->bodies[0], &out);
    r.scopes_.pop_back();
    --r.call_depth_;
    if (flow != Flow::kNormal) FailAt(node->line, "break or continue outside a loop");
    return Value(std::move(out));
  });
}

Value Renderer::Lookup(const std::string& name) const {
  for (size_t i = scopes_.size(); i-- > 0;) {
    const Scope& s = scopes_[i];
    if (auto it = s.vars.find(name); it != s.vars.end()) return it->second;
    if (s.barrier) {
      const auto& globals = scopes_.front().vars;
      if (auto g = globals.find(name); g != globals.end()) return g->second;
      break;
    }
  }
  return Value::Undefined("'" + name + "' is undefined");
}

// ------------------------------------------------------------------ Template

StatusOr<Template> Template::Parse(std::string_view source) {
  try {
    Template t;
    t.body_ = std::make_shared<const Body>(jinja::Parse(source));
    return t;
  } catch (const TemplateError& e) {
    return InvalidArgumentError(std::string("chat template: ") + e.what());
  }
}

StatusOr<std::string> Template::Render(const Value& variables, const RenderOptions& options) const {
  try {
    Renderer renderer(options);
    return renderer.Run(*body_, variables);
  } catch (const TemplateError& e) {
    switch (e.kind()) {
      case TemplateError::Kind::kRaised: return InvalidArgumentError(e.what());
      case TemplateError::Kind::kLimit: return ResourceExhaustedError(std::string("chat template: ") + e.what());
      case TemplateError::Kind::kError: break;
    }
    return InvalidArgumentError(std::string("chat template error: ") + e.what());
  }
}

}  // namespace kvserve::jinja
