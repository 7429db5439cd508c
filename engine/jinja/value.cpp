// jinja::Value (see value.h): Python's str/repr/==/len/bool (JSON: json.cpp).
#include "engine/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/jinja/error.h"
#include "engine/jinja/utf8.h"

namespace kvserve::jinja {

Value Value::None() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}

Value Value::Markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value Value::Undefined(std::string what) {
  Value v;
  v.str_ = std::make_shared<const std::string>(std::move(what));
  return v;
}

Value Value::FromList(List items, bool tuple) {
  Value v;
  v.type_ = Type::kList;
  v.list_kind_ = tuple ? ListKind::kTuple : ListKind::kList;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::FromGenerator(List items) {
  Value v = FromList(std::move(items));
  v.list_kind_ = ListKind::kGenerator;
  return v;
}

Value Value::FromDict(Dict items) {
  Value v;
  v.type_ = Type::kDict;
  v.dict_ = std::make_shared<const Dict>(std::move(items));
  return v;
}

Value Value::FromCallable(std::string name, std::function<Value(Renderer&, CallArgs&)> call) {
  Value v;
  v.type_ = Type::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(call)});
  return v;
}

Value Value::NewNamespace(Dict attributes) {
  Value v;
  v.type_ = Type::kNamespace;
  v.ns_ = std::make_shared<Namespace>(Namespace{std::move(attributes)});
  return v;
}

const Value* Value::Find(const Value& key) const {
  const Dict* d = type_ == Type::kDict ? dict_.get() : type_ == Type::kNamespace ? &ns_->attributes : nullptr;
  if (d == nullptr) return nullptr;
  for (const auto& [k, v] : *d) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Value* Value::Find(std::string_view key) const {
  const Dict* d = type_ == Type::kDict ? dict_.get() : type_ == Type::kNamespace ? &ns_->attributes : nullptr;
  if (d == nullptr) return nullptr;
  for (const auto& [k, v] : *d) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

bool Value::Truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone: return false;
    case Type::kBool:
    case Type::kInt: return int_ != 0;
    case Type::kFloat: return float_ != 0;
    case Type::kString: return !str_->empty();
    case Type::kList: return list_kind_ == ListKind::kGenerator || !list_->empty();
    case Type::kDict: return !dict_->empty();
    case Type::kCallable:
    case Type::kNamespace: return true;
  }
  return false;
}

std::optional<int64_t> Value::Length() const {
  switch (type_) {
    case Type::kString: return CodePointCount(*str_);
    case Type::kList:
      if (list_kind_ == ListKind::kGenerator) return std::nullopt;
      return static_cast<int64_t>(list_->size());
    case Type::kDict: return static_cast<int64_t>(dict_->size());
    case Type::kUndefined: return 0;  // jinja2's Undefined has len 0
    default: return std::nullopt;
  }
}

const char* Value::TypeName() const {
  switch (type_) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList:
      return list_kind_ == ListKind::kTuple ? "tuple" : list_kind_ == ListKind::kGenerator ? "generator" : "list";
    case Type::kDict: return "dict";
    case Type::kCallable: return "function";
    case Type::kNamespace: return "Namespace";
  }
  return "?";
}

std::string FloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: positional when -4 <= exponent < 16.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exponent >= 16 || exponent < -4) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) return sign + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  const size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) return sign + digits + std::string(int_len - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::string StringRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

namespace {

std::string Join(const List& items, const char* open, const char* close, bool tuple) {
  std::string out = open;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += items[i].Repr();
  }
  if (tuple && items.size() == 1) out += ",";
  return out + close;
}

}  // namespace

std::string Value::Str() const {
  switch (type_) {
    case Type::kUndefined: return "";
    case Type::kString: return *str_;
    default: return Repr();
  }
}

std::string Value::Repr() const {
  switch (type_) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "None";
    case Type::kBool: return int_ ? "True" : "False";
    case Type::kInt: return std::to_string(int_);
    case Type::kFloat: return FloatRepr(float_);
    case Type::kString: return StringRepr(*str_);
    case Type::kList:
      if (list_kind_ == ListKind::kGenerator) return "<generator object>";
      return list_kind_ == ListKind::kTuple ? Join(*list_, "(", ")", true) : Join(*list_, "[", "]", false);
    case Type::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*dict_)[i].first.Repr() + ": " + (*dict_)[i].second.Repr();
      }
      return out + "}";
    }
    case Type::kCallable: return "<function " + callable_->name + ">";
    case Type::kNamespace: {
      std::string out = "<Namespace {";
      for (size_t i = 0; i < ns_->attributes.size(); ++i) {
        if (i > 0) out += ", ";
        out += ns_->attributes[i].first.Repr() + ": " + ns_->attributes[i].second.Repr();
      }
      return out + "}>";
    }
  }
  return "";
}

bool Value::SameObject(const Value& other) const {
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::kList: return list_ == other.list_;
    case Type::kDict: return dict_ == other.dict_;
    case Type::kCallable: return callable_ == other.callable_;
    case Type::kNamespace: return ns_ == other.ns_;
    default: return *this == other;  // None, bools, small numbers and strings: as CPython interns them
  }
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.int_ == b.int_;
  }
  if (a.type_ != b.type_) return false;
  switch (a.type_) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return true;
    case Value::Type::kString: return *a.str_ == *b.str_;
    case Value::Type::kList:
      if (a.list_kind_ == Value::ListKind::kGenerator || b.list_kind_ == Value::ListKind::kGenerator) {
        return a.list_ == b.list_;
      }
      return a.list_kind_ == b.list_kind_ && *a.list_ == *b.list_;
    case Value::Type::kDict: {
      if (a.dict_->size() != b.dict_->size()) return false;
      for (const auto& [k, v] : *a.dict_) {
        const Value* other = b.Find(k);
        if (other == nullptr || !(*other == v)) return false;
      }
      return true;
    }
    case Value::Type::kCallable: return a.callable_ == b.callable_;
    case Value::Type::kNamespace: return a.ns_ == b.ns_;
    default: return false;
  }
}

}  // namespace kvserve::jinja
