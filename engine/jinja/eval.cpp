// Renderer (render.h): expressions: operators as Python applies them, calls, filters, tests,
// attribute and item lookup.
#include <algorithm>
#include <cmath>

#include "engine/jinja/builtins.h"
#include "engine/jinja/error.h"
#include "engine/jinja/render.h"
#include "engine/jinja/utf8.h"

namespace kvserve::jinja {
namespace {

// Lists built by `+` and `*` hold at most this many items.
constexpr size_t kMaxListItems = size_t{1} << 18;

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Python's sequence[start:stop:step] index arithmetic.
std::vector<int64_t> SliceIndices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  const int64_t s = step.is_undefined() || step.is_none() ? 1 : step.as_int();
  if (s == 0) throw TemplateError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t def) {
    if (v.is_undefined() || v.is_none()) return def;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    if (s > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t a = clamp(start, s > 0 ? 0 : n - 1);
  const int64_t b = clamp(stop, s > 0 ? n : -1);
  std::vector<int64_t> out;
  for (int64_t i = a; s > 0 ? i < b : i > b; i += s) out.push_back(i);
  return out;
}

}  // namespace


Value Renderer::Eval(const Expr& e) {
  Step();
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.value;
    case Expr::Kind::kName: return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      items.reserve(e.args.size());
      for (const ExprPtr& a : e.args) items.push_back(Eval(*a));
      return Value::FromList(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Dict items;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = Eval(*e.args[i]);
        Value v = Eval(*e.args[i + 1]);
        bool found = false;
        for (auto& [old_k, old_v] : items) {
          if (old_k == k) old_v = v, found = true;
        }
        if (!found) items.emplace_back(std::move(k), std::move(v));
      }
      return Value::FromDict(std::move(items));
    }
    case Expr::Kind::kAttr: {
      const Value target = Eval(*e.args[0]);
      if (target.is_undefined()) FailAt(e.line, target.str());
      return GetAttr(target, e.name);
    }
    case Expr::Kind::kItem: {
      const Value target = Eval(*e.args[0]);
      if (target.is_undefined()) FailAt(e.line, target.str());
      return GetItem(target, Eval(*e.args[1]));
    }
    case Expr::Kind::kSlice: {
      const Value target = Eval(*e.args[0]);
      if (target.is_undefined()) FailAt(e.line, target.str());
      Value parts[3];
      for (int k = 0; k < 3; ++k) {
        if (e.args[static_cast<size_t>(k) + 1]) parts[k] = Eval(*e.args[static_cast<size_t>(k) + 1]);
      }
      if (target.is_string()) {
        const std::vector<size_t> at = CodePointOffsets(target.str());
        std::string out;
        for (int64_t i : SliceIndices(static_cast<int64_t>(at.size()) - 1, parts[0], parts[1], parts[2])) {
          out += target.str().substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]);
        }
        return Value(std::move(out));
      }
      if (!target.is_list()) FailAt(e.line, std::string("'") + target.TypeName() + "' object is not subscriptable");
      List out;
      for (int64_t i : SliceIndices(static_cast<int64_t>(target.list().size()), parts[0], parts[1], parts[2])) {
        out.push_back(target.list()[static_cast<size_t>(i)]);
      }
      return Value::FromList(std::move(out), target.is_tuple());
    }
    case Expr::Kind::kCall: return EvalCall(e);
    case Expr::Kind::kFilter: return EvalFilter(e, nullptr);
    case Expr::Kind::kTest: {
      const Value v = Eval(*e.args[0]);
      CallArgs args = EvalArgs(e, 1);
      return Value(ApplyTest(e.name, v, args) != e.negated);
    }
    case Expr::Kind::kNot: return Value(!Eval(*e.args[0]).Truthy());
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      const Value v = Eval(*e.args[0]);
      if (!v.is_number()) FailAt(e.line, std::string("bad operand type for unary -: '") + v.TypeName() + "'");
      if (e.kind == Expr::Kind::kPos) return v.is_bool() ? Value(v.as_int()) : v;
      return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
    }
    case Expr::Kind::kBinary: return EvalBinary(e);
    case Expr::Kind::kCompare: return EvalCompare(e);
    case Expr::Kind::kCondition:
      if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
      return e.args[2] ? Eval(*e.args[2]) : Value::Undefined("the inline if's else");
  }
  return Value();
}

Value Renderer::EvalBinary(const Expr& e) {
  const std::string& op = e.name;
  const Value a = Eval(*e.args[0]);
  if (op == "and") return a.Truthy() ? Eval(*e.args[1]) : a;
  if (op == "or") return a.Truthy() ? a : Eval(*e.args[1]);
  const Value b = Eval(*e.args[1]);
  if (op == "~") {
    std::string s = a.Str();
    s += b.Str();
    CheckSize(s.size());
    return Value(std::move(s));
  }
  if (a.is_undefined()) FailAt(e.line, a.str());
  if (b.is_undefined()) FailAt(e.line, b.str());
  if (a.is_number() && b.is_number()) {
    const bool floats = a.is_float() || b.is_float();
    const double x = a.as_double(), y = b.as_double();
    const int64_t i = a.as_int(), j = b.as_int();
    if (op == "+") return floats ? Value(x + y) : Value(i + j);
    if (op == "-") return floats ? Value(x - y) : Value(i - j);
    if (op == "*") return floats ? Value(x * y) : Value(i * j);
    if (op == "/") {
      if (y == 0) FailAt(e.line, "division by zero");
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) FailAt(e.line, "integer division or modulo by zero");
      if (floats) {
        const double q = std::floor(x / y);
        return op == "//" ? Value(q) : Value(x - q * y);
      }
      return op == "//" ? Value(FloorDiv(i, j)) : Value(i - FloorDiv(i, j) * j);
    }
    if (op == "**") {
      if (!floats && j >= 0) {
        int64_t r = 1;
        for (int64_t k = 0; k < j && k < 64; ++k) r *= i;
        return Value(r);
      }
      return Value(std::pow(x, y));
    }
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    CheckSize(a.str().size() + b.str().size());
    if (a.is_markup() || b.is_markup()) {  // markupsafe: the plain side is escaped
      return Value::Markup((a.is_markup() ? a.str() : HtmlEscape(a.str())) + (b.is_markup() ? b.str() : HtmlEscape(b.str())));
    }
    return Value(a.str() + b.str());
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    if (a.list().size() + b.list().size() > kMaxListItems) FailAt(e.line, "a list grew past its limit");
    Step(static_cast<int64_t>(a.list().size() + b.list().size()));
    List items = a.list();
    items.insert(items.end(), b.list().begin(), b.list().end());
    return Value::FromList(std::move(items), a.is_tuple());
  }
  if (op == "*" && (b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) {
    return Repeat(b, a.as_int(), e.line);
  }
  if (op == "*" && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return Repeat(a, b.as_int(), e.line);
  if (op == "%" && a.is_string()) return PercentFormat(a.str(), b);
  FailAt(e.line, "unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" + b.TypeName() + "'");
}

Value Renderer::Repeat(const Value& a, int64_t times, int line) {
  times = std::max<int64_t>(times, 0);
  const size_t unit = a.is_string() ? a.str().size() : a.list().size();
  const size_t limit = a.is_string() ? options_.max_output_bytes : kMaxListItems;
  if (unit > 0 && static_cast<uint64_t>(times) > limit / unit) FailAt(line, "a sequence repeated past its limit");
  Step(times);
  if (a.is_string()) {
    std::string s;
    s.reserve(unit * static_cast<size_t>(times));
    for (int64_t k = 0; k < times; ++k) s += a.str();
    return Value(std::move(s));
  }
  List items;
  for (int64_t k = 0; k < times; ++k) items.insert(items.end(), a.list().begin(), a.list().end());
  return Value::FromList(std::move(items), a.is_tuple());
}

bool PythonLess(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list()) {
    const List& x = a.list();
    const List& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i] != y[i]) return PythonLess(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw TemplateError(std::string("'<' not supported between instances of '") + a.TypeName() + "' and '" +
                      b.TypeName() + "'");
}

bool Contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kString:
      if (!item.is_string()) throw TemplateError("'in <string>' requires string as left operand");
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::kList:
      for (const Value& v : container.list()) {
        if (v == item) return true;
      }
      return false;
    case Value::Type::kDict:
    case Value::Type::kNamespace: return container.Find(item) != nullptr;
    case Value::Type::kUndefined: return false;  // jinja2's Undefined iterates as empty
    default: throw TemplateError(std::string("argument of type '") + container.TypeName() + "' is not iterable");
  }
}

Value Renderer::EvalCompare(const Expr& e) {
  Value left = Eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = Eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool ok = false;
    if (op == "==") ok = left == right;
    else if (op == "!=") ok = left != right;
    else if (op == "<") ok = PythonLess(left, right);
    else if (op == ">") ok = PythonLess(right, left);
    else if (op == "<=") ok = !PythonLess(right, left);
    else if (op == ">=") ok = !PythonLess(left, right);
    else if (op == "in") ok = Contains(right, left);
    else ok = !Contains(right, left);
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

CallArgs Renderer::EvalArgs(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i]));
  for (const auto& [name, value] : e.kwargs) args.keyword.emplace_back(name, Eval(*value));
  return args;
}

Value Renderer::EvalCall(const Expr& e, const Value* caller) {
  const Value callee = Eval(*e.args[0]);
  CallArgs args = EvalArgs(e, 1);
  if (caller != nullptr) args.keyword.emplace_back("caller", *caller);
  if (callee.is_undefined()) FailAt(e.line, callee.str());
  return CallValue(callee, args);
}

Value Renderer::CallValue(const Value& callee, CallArgs& args) {
  if (!callee.is_callable()) throw TemplateError(std::string("'") + callee.TypeName() + "' object is not callable");
  Step();
  Value out = callee.callable().call(*this, args);
  if (out.is_string()) CheckSize(out.str().size());
  return out;
}

Value Renderer::EvalFilter(const Expr& e, const Value* input) {
  // A chain of filters nests: the innermost's input is e.args[0] (null: `input`).
  const Value v = !e.args[0]                                                   ? *input
                  : input != nullptr && e.args[0]->kind == Expr::Kind::kFilter ? EvalFilter(*e.args[0], input)
                                                                               : Eval(*e.args[0]);
  CallArgs args = EvalArgs(e, 1);
  return ApplyFilter(e.name, v, args);
}

Value Renderer::ApplyFilter(std::string_view name, const Value& input, CallArgs& args) {
  Step();
  Value out;
  if (!CallFilter(*this, name, input, args, &out)) throw TemplateError("no filter named '" + std::string(name) + "'");
  if (out.is_string()) CheckSize(out.str().size());
  return out;
}

bool Renderer::ApplyTest(std::string_view name, const Value& value, CallArgs& args) {
  Step();
  bool out = false;
  if (!CallTest(*this, name, value, args, &out)) throw TemplateError("no test named '" + std::string(name) + "'");
  return out;
}

Value Renderer::GetAttr(const Value& target, std::string_view name) {
  if (target.is_namespace()) {
    if (const Value* v = target.Find(name)) return *v;
    return Value::Undefined("'Namespace' has no attribute '" + std::string(name) + "'");
  }
  if (std::optional<Value> method = Method(target, name)) return *method;
  if (target.is_dict()) {
    if (const Value* v = target.Find(name)) return *v;
  }
  return Value::Undefined(std::string("'") + target.TypeName() + " object' has no attribute '" + std::string(name) + "'");
}

Value Renderer::GetItem(const Value& target, const Value& key) {
  if (target.is_dict() || target.is_namespace()) {
    if (const Value* v = target.Find(key)) return *v;
  } else if ((target.is_list() || target.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (target.is_list()) {
      const auto n = static_cast<int64_t>(target.list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return target.list()[static_cast<size_t>(i)];
    } else {
      const std::vector<size_t> at = CodePointOffsets(target.str());
      const auto n = static_cast<int64_t>(at.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        return Value(target.str().substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]));
      }
    }
  }
  if (key.is_string()) return GetAttr(target, key.str());
  return Value::Undefined(std::string("'") + target.TypeName() + " object' has no element " + key.Repr());
}

}  // namespace kvserve::jinja
