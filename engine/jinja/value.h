// jinja::Value: the values a chat template computes with, as Python's jinja2 sees them:
// undefined, None, bool, int, float, str, list (or tuple), dict (insertion-ordered, as Python's),
// a callable (macro, global function, bound method) or a namespace (the one mutable kind).
//
// Lists and dicts are immutable once built (jinja2 renders chat templates in an immutable
// sandbox) and shared between copies; a namespace is shared by reference, as in Python.
// Strings are UTF-8 bytes. Conversions follow Python: Str() is str(x) (what `{{ x }}`
// prints: "None", "True", "1.0", "['a', 1]"), Repr() is repr(x), ToJson() is
// json.dumps(x, ensure_ascii=False, ...) as transformers' `tojson` filter calls it.
//
// Values are plain data: thread-compatible; a template's render never shares a namespace
// across threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::jinja {

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<Value, Value>>;  // in insertion order; keys unique

// Arguments of a call: positional, then keyword (in the order written).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Renderer;  // render.cpp: what a callable may call back into (macros, `caller`)

// A function value. Throws TemplateError (error.h) for bad arguments.
struct Callable {
  std::string name;
  std::function<Value(Renderer&, CallArgs&)> call;
};

// `namespace(...)`: attributes that `{% set ns.x = ... %}` changes in place.
struct Namespace {
  Dict attributes;
};

class Value {
 public:
  enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable, kNamespace };

  Value() = default;  // undefined
  Value(bool b) : type_(Type::kBool), int_(b) {}                                        // NOLINT
  Value(int v) : type_(Type::kInt), int_(v) {}                                          // NOLINT
  Value(int64_t v) : type_(Type::kInt), int_(v) {}                                      // NOLINT
  Value(double v) : type_(Type::kFloat), float_(v) {}                                   // NOLINT
  Value(std::string s) : type_(Type::kString), str_(std::make_shared<const std::string>(std::move(s))) {}  // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}                                  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                                       // NOLINT

  static Value None();
  // markupsafe's Markup (what `|safe` and `|escape` return): a string that `+` does not escape,
  // while the plain string added to it is HTML-escaped (jinja2 keeps this without autoescape).
  static Value Markup(std::string s);
  // An undefined value that remembers what was looked up (for error messages).
  static Value Undefined(std::string what);
  static Value FromList(List items, bool tuple = false);
  // What jinja2's lazy filters return (map, select, items, unique, ...): iterable, but with no
  // length, index or JSON form, always true, printed as "<generator object>".
  static Value FromGenerator(List items);
  static Value FromDict(Dict items);
  static Value FromCallable(std::string name, std::function<Value(Renderer&, CallArgs&)> call);
  static Value NewNamespace(Dict attributes);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }  // bools are not (unlike Python), see is_integral
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_markup() const { return type_ == Type::kString && markup_; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_tuple() const { return type_ == Type::kList && list_kind_ == ListKind::kTuple; }
  bool is_generator() const { return type_ == Type::kList && list_kind_ == ListKind::kGenerator; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_callable() const { return type_ == Type::kCallable; }
  bool is_namespace() const { return type_ == Type::kNamespace; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return type_ == Type::kFloat ? static_cast<int64_t>(float_) : int_; }
  double as_double() const { return type_ == Type::kFloat ? float_ : static_cast<double>(int_); }
  // REQUIRES: is_string() (or undefined: its lookup text).
  const std::string& str() const { return *str_; }
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }
  const Callable& callable() const { return *callable_; }
  Namespace& ns() const { return *ns_; }

  // Dict (or namespace) item by key; nullptr when absent.
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;

  // Python's bool(x).
  bool Truthy() const;
  // Python's len(x) for strings (in code points), lists, dicts; nullopt for others.
  std::optional<int64_t> Length() const;
  // str(x) and repr(x).
  std::string Str() const;
  std::string Repr() const;
  // "str", "int", "list", ... as Python names the type (error messages).
  const char* TypeName() const;

  // Python's `is` as templates can observe it (`is sameas`): containers by identity.
  bool SameObject(const Value& other) const;
  // Python's ==.
  friend bool operator==(const Value& a, const Value& b);
  friend bool operator!=(const Value& a, const Value& b) { return !(a == b); }

 private:
  enum class ListKind : uint8_t { kList, kTuple, kGenerator };
  Type type_ = Type::kUndefined;
  ListKind list_kind_ = ListKind::kList;
  bool markup_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> str_;  // strings; undefined: what was looked up
  std::shared_ptr<const List> list_;
  std::shared_ptr<const Dict> dict_;
  std::shared_ptr<const Callable> callable_;
  std::shared_ptr<Namespace> ns_;
};

// markupsafe's escape: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(std::string_view s);

// Python's repr(float) (shortest round-trip digits: "1.0", "0.1", "1e+16", "inf").
std::string FloatRepr(double v);
// Python's repr(str).
std::string StringRepr(std::string_view s);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=sort_keys).
// `indent` < 0: none. Separators default as Python's: (", ", ": "), or (",", ": ") with an
// indent. Throws TemplateError for what JSON cannot hold (undefined, callables).
struct JsonStyle {
  int indent = -1;
  std::string indent_text;  // a string indent (indent="\t"); used when non-empty
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string ToJson(const Value& v, const JsonStyle& style = {});

// Parses JSON text into a Value (objects keep their key order; integers that fit int64 are
// ints, other numbers floats). nullopt when the text is not one JSON value.
std::optional<Value> ParseJson(std::string_view text);

}  // namespace kvserve::jinja
