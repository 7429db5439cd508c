// Tests, methods, globals and %-formatting of the Jinja engine (see builtins.h).
#include "engine/jinja/builtins.h"

#include <cmath>
#include <ctime>

#include "engine/jinja/error.h"
#include "engine/jinja/render.h"
#include "engine/jinja/strings.h"
#include "engine/jinja/utf8.h"

namespace kvserve::jinja {

const Value* Arg(const CallArgs& args, size_t i, std::string_view name) {
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return &v;
  }
  return i < args.positional.size() ? &args.positional[i] : nullptr;
}

namespace {

Value Need(const CallArgs& args, size_t i, std::string_view name, std::string_view fn) {
  const Value* v = Arg(args, i, name);
  if (v == nullptr) throw TemplateError(std::string(fn) + "() missing argument '" + std::string(name) + "'");
  return *v;
}

std::string StrArg(const CallArgs& args, size_t i, std::string_view name, std::string_view fn) {
  const Value v = Need(args, i, name, fn);
  if (!v.is_string()) throw TemplateError(std::string(fn) + "() argument must be str, not " + v.TypeName());
  return v.str();
}

// `chars` of strip/lstrip/rstrip: absent or None means whitespace.
std::optional<std::string> Chars(const CallArgs& args) {
  const Value* v = Arg(args, 0, "chars");
  if (v == nullptr || v->is_none()) return std::nullopt;
  if (!v->is_string()) throw TemplateError("strip arg must be None or str");
  return v->str();
}

Value StringList(std::vector<std::string> parts) {
  List out;
  out.reserve(parts.size());
  for (std::string& p : parts) out.emplace_back(std::move(p));
  return Value::FromList(std::move(out));
}

bool StartsOrEnds(const std::string& s, const Value& affix, bool starts) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw TemplateError("startswith/endswith take a str or a tuple of str");
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return starts ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    for (const Value& a : affix.list()) {
      if (one(a)) return true;
    }
    return false;
  }
  return one(affix);
}

Value StringMethod(Renderer& r, const std::string& s, std::string_view name, CallArgs& args) {
  if (name == "strip") return Value(Strip(s, Chars(args), true, true));
  if (name == "lstrip") return Value(Strip(s, Chars(args), true, false));
  if (name == "rstrip") return Value(Strip(s, Chars(args), false, true));
  if (name == "split" || name == "rsplit") {
    const Value* sep = Arg(args, 0, "sep");
    const Value* max = Arg(args, 1, "maxsplit");
    const int64_t maxsplit = max == nullptr ? -1 : max->as_int();
    if (sep == nullptr || sep->is_none()) return StringList(SplitWhitespace(s, maxsplit, name == "rsplit"));
    if (!sep->is_string() || sep->str().empty()) throw TemplateError("empty separator");
    return StringList(Split(s, sep->str(), maxsplit, name == "rsplit"));
  }
  if (name == "splitlines") return StringList(SplitLines(s, Arg(args, 0, "keepends") && Arg(args, 0, "keepends")->Truthy()));
  if (name == "swapcase") {
    std::string out = s;
    for (char& c : out) {
      const auto u = static_cast<unsigned char>(c);
      c = static_cast<char>(std::isupper(u) ? std::tolower(u) : std::islower(u) ? std::toupper(u) : u);
    }
    return Value(std::move(out));
  }
  if (name == "ljust" || name == "rjust" || name == "center") {
    const int64_t width = Need(args, 0, "width", name).as_int();
    r.CheckSize(static_cast<size_t>(std::max<int64_t>(width, 0)));
    const Value* fill = Arg(args, 1, "fillchar");
    const std::string f = fill == nullptr ? " " : fill->Str();
    const int64_t pad = width - CodePointCount(s);
    if (pad <= 0) return Value(s);
    const int64_t left = name == "ljust" ? 0 : name == "rjust" ? pad : pad / 2 + (pad & width & 1);
    std::string out;
    for (int64_t k = 0; k < left; ++k) out += f;
    out += s;
    for (int64_t k = left; k < pad; ++k) out += f;
    return Value(std::move(out));
  }
  if (name == "startswith") return Value(StartsOrEnds(s, Need(args, 0, "prefix", name), true));
  if (name == "endswith") return Value(StartsOrEnds(s, Need(args, 0, "suffix", name), false));
  if (name == "replace") {
    const Value* count = Arg(args, 2, "count");
    return Value(Replace(s, StrArg(args, 0, "old", name), StrArg(args, 1, "new", name),
                         count == nullptr ? -1 : count->as_int()));
  }
  if (name == "upper") return Value(AsciiUpper(s));
  if (name == "lower") return Value(AsciiLower(s));
  if (name == "title") return Value(Title(s));
  if (name == "capitalize") return Value(Capitalize(s));
  if (name == "find" || name == "index" || name == "rfind" || name == "rindex") {
    const std::string needle = StrArg(args, 0, "sub", name);
    const size_t at = name[0] == 'r' ? s.rfind(needle) : s.find(needle);
    if (at == std::string::npos) {
      if (name == "index" || name == "rindex") throw TemplateError("substring not found");
      return Value(-1);
    }
    return Value(CodePointCount(std::string_view(s).substr(0, at)));
  }
  if (name == "count") {
    const std::string needle = StrArg(args, 0, "sub", name);
    return Value(CountOccurrences(s, needle));
  }
  if (name == "join") {
    std::string out;
    const List items = IterateValue(Need(args, 0, "iterable", name));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) throw TemplateError("sequence item " + std::to_string(i) + ": expected str instance");
      if (i > 0) out += s;
      out += items[i].str();
    }
    return Value(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string affix = StrArg(args, 0, "affix", name);
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0) return Value(s.substr(affix.size()));
    if (name == "removesuffix" && !affix.empty() && s.size() >= affix.size() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
      return Value(s.substr(0, s.size() - affix.size()));
    }
    return Value(s);
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return Value(AllOf(s, ::isdigit));
  if (name == "isalpha") return Value(AllOf(s, ::isalpha));
  if (name == "isalnum") return Value(AllOf(s, ::isalnum));
  if (name == "isspace") return Value(AllOf(s, ::isspace));
  if (name == "isupper") return Value(AsciiUpper(s) == s && AsciiLower(s) != s);
  if (name == "islower") return Value(AsciiLower(s) == s && AsciiUpper(s) != s);
  if (name == "zfill") {
    const int64_t width = Need(args, 0, "width", name).as_int();
    r.CheckSize(static_cast<size_t>(std::max<int64_t>(width, 0)));
    const int64_t len = CodePointCount(s);
    if (len >= width) return Value(s);
    const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
    return Value(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign));
  }
  throw TemplateError("'str' object has no attribute '" + std::string(name) + "'");
}

constexpr std::string_view kStringMethods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "replace", "upper",
    "lower", "title", "capitalize", "find", "index", "rfind", "rindex", "count", "join", "removeprefix",
    "removesuffix", "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "isupper", "islower", "zfill",
    "swapcase", "ljust", "rjust", "center"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};
constexpr std::string_view kListMethods[] = {"index", "count"};
// What the immutable sandbox refuses to call (it mutates).
constexpr std::string_view kMutating[] = {"append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear",
                                          "update", "setdefault", "popitem", "copy"};

template <size_t N>
bool In(std::string_view name, const std::string_view (&names)[N]) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

Value Bound(const Value& receiver, std::string_view name) {
  return Value::FromCallable(std::string(name), [receiver, name = std::string(name)](Renderer& r, CallArgs& args) {
    if (receiver.is_string()) return StringMethod(r, receiver.str(), name, args);
    if (receiver.is_dict()) {
      if (name == "get") {
        const Value key = Need(args, 0, "key", "get");
        if (const Value* v = receiver.Find(key)) return *v;
        const Value* def = Arg(args, 1, "default");
        return def == nullptr ? Value::None() : *def;
      }
      List out;
      for (const auto& [k, v] : receiver.dict()) {
        if (name == "items") out.push_back(Value::FromList({k, v}, /*tuple=*/true));
        else out.push_back(name == "keys" ? k : v);
      }
      return Value::FromList(std::move(out));
    }
    const Value item = Need(args, 0, "value", name);
    int64_t n = 0;
    for (size_t i = 0; i < receiver.list().size(); ++i) {
      if (receiver.list()[i] != item) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") throw TemplateError(item.Repr() + " is not in list");
    return Value(n);
  });
}

}  // namespace

std::optional<Value> Method(const Value& receiver, std::string_view name) {
  const bool known = (receiver.is_string() && In(name, kStringMethods)) ||
                     (receiver.is_dict() && In(name, kDictMethods)) || (receiver.is_list() && In(name, kListMethods));
  if (known) return Bound(receiver, name);
  if ((receiver.is_list() || receiver.is_dict()) && In(name, kMutating)) {
    const std::string message = "access to attribute '" + std::string(name) + "' of '" + receiver.TypeName() +
                                "' object is unsafe.";
    return Value::FromCallable(std::string(name), [message](Renderer&, CallArgs&) -> Value {
      throw TemplateError(message);
    });
  }
  return std::nullopt;
}

// ------------------------------------------------------------------ tests

bool CallTest(Renderer& r, std::string_view name, const Value& v, CallArgs& args, bool* out) {
  auto other = [&] { return Need(args, 0, "other", name); };
  if (name == "defined") *out = !v.is_undefined();
  else if (name == "undefined") *out = v.is_undefined();
  else if (name == "none") *out = v.is_none();
  else if (name == "boolean") *out = v.is_bool();
  else if (name == "true") *out = v.is_bool() && v.as_bool();
  else if (name == "false") *out = v.is_bool() && !v.as_bool();
  else if (name == "integer") *out = v.is_int();
  else if (name == "float") *out = v.is_float();
  else if (name == "number") *out = v.is_number();
  else if (name == "string") *out = v.is_string();
  else if (name == "mapping") *out = v.is_dict();
  else if (name == "iterable") *out = v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  else if (name == "sequence") *out = v.is_string() || (v.is_list() && !v.is_generator()) || v.is_dict();
  else if (name == "callable") *out = v.is_callable();
  else if (name == "sameas") *out = v.SameObject(other());
  else if (name == "eq" || name == "equalto" || name == "==") *out = v == other();
  else if (name == "ne" || name == "!=") *out = v != other();
  else if (name == "in") *out = Contains(other(), v);
  else if (name == "lt" || name == "lessthan" || name == "<") *out = v.as_double() < other().as_double();
  else if (name == "le" || name == "<=") *out = v.as_double() <= other().as_double();
  else if (name == "gt" || name == "greaterthan" || name == ">") *out = v.as_double() > other().as_double();
  else if (name == "ge" || name == ">=") *out = v.as_double() >= other().as_double();
  else if (name == "divisibleby") {
    const int64_t d = Need(args, 0, "num", name).as_int();
    if (d == 0) throw TemplateError("integer division or modulo by zero");
    *out = v.as_int() % d == 0;
  } else if (name == "even") *out = v.as_int() % 2 == 0;
  else if (name == "odd") *out = v.as_int() % 2 != 0;
  else if (name == "lower") *out = v.is_string() && AsciiLower(v.str()) == v.str() && AsciiUpper(v.str()) != v.str();
  else if (name == "upper") *out = v.is_string() && AsciiUpper(v.str()) == v.str() && AsciiLower(v.str()) != v.str();
  else if (name == "escaped") *out = v.is_markup();
  else return false;
  r.Step();
  return true;
}

// ------------------------------------------------------------------ globals

namespace {

Value Range(Renderer& r, CallArgs& args) {
  std::vector<int64_t> p;
  for (const Value& v : args.positional) {
    if (!v.is_int() && !v.is_bool()) throw TemplateError(std::string("'") + v.TypeName() + "' object cannot be interpreted as an integer");
    p.push_back(v.as_int());
  }
  if (p.empty() || p.size() > 3) throw TemplateError("range expected 1 to 3 arguments");
  const int64_t start = p.size() == 1 ? 0 : p[0];
  const int64_t stop = p.size() == 1 ? p[0] : p[1];
  const int64_t step = p.size() == 3 ? p[2] : 1;
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  // jinja2's sandbox: MAX_RANGE.
  const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
  if (count > 100000) throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    r.Step();
    out.emplace_back(i);
  }
  return Value::FromList(std::move(out));
}

Dict KeywordDict(const CallArgs& args) {
  Dict d;
  if (!args.positional.empty()) {
    const Value& first = args.positional[0];
    if (!first.is_dict()) throw TemplateError("expected a mapping");
    d = first.dict();
  }
  for (const auto& [k, v] : args.keyword) {
    bool found = false;
    for (auto& [old_k, old_v] : d) {
      if (old_k.is_string() && old_k.str() == k) old_v = v, found = true;
    }
    if (!found) d.emplace_back(Value(k), v);
  }
  return d;
}

Value StrftimeNow(Renderer& r, CallArgs& args) {
  const std::string format = StrArg(args, 0, "format", "strftime_now");
  const std::time_t now = r.options().now_seconds != 0 ? static_cast<std::time_t>(r.options().now_seconds)
                                                        : std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
  return Value(std::string(buf, n));
}

}  // namespace

Dict Globals() {
  Dict g;
  g.emplace_back("range", Value::FromCallable("range", Range));
  g.emplace_back("namespace", Value::FromCallable("namespace", [](Renderer&, CallArgs& args) {
                   return Value::NewNamespace(KeywordDict(args));
                 }));
  g.emplace_back("dict", Value::FromCallable("dict", [](Renderer&, CallArgs& args) {
                   return Value::FromDict(KeywordDict(args));
                 }));
  g.emplace_back("raise_exception", Value::FromCallable("raise_exception", [](Renderer&, CallArgs& args) -> Value {
                   const Value* message = Arg(args, 0, "message");
                   throw TemplateError(message == nullptr ? "" : message->Str(), TemplateError::Kind::kRaised);
                 }));
  g.emplace_back("strftime_now", Value::FromCallable("strftime_now", StrftimeNow));
  g.emplace_back("joiner", Value::FromCallable("joiner", [](Renderer&, CallArgs& args) {
                   const Value* sep = Arg(args, 0, "sep");
                   const std::string text = sep == nullptr ? ", " : sep->Str();
                   auto used = std::make_shared<bool>(false);
                   return Value::FromCallable("joiner", [text, used](Renderer&, CallArgs&) {
                     const bool first = !*used;
                     *used = true;
                     return Value(first ? std::string() : text);
                   });
                 }));
  return g;
}

Value PercentFormat(const std::string& text, const Value& values) {
  // %[(key)][flags][width][.precision]type, as Python's printf-style formatting.
  const List items = values.is_tuple() ? values.list() : List{values};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    size_t k = i + 1;
    const Value* v = nullptr;
    if (k < text.size() && text[k] == '(') {
      const size_t close = text.find(')', k);
      if (close == std::string::npos) throw TemplateError("incomplete format key");
      if (!values.is_dict()) throw TemplateError("format requires a mapping");
      v = values.Find(std::string_view(text).substr(k + 1, close - k - 1));
      if (v == nullptr) throw TemplateError("format key not found");
      k = close + 1;
    }
    std::string spec = "%";
    while (k < text.size() && std::string_view("-+ 0#").find(text[k]) != std::string_view::npos) spec += text[k++];
    while (k < text.size() && (std::isdigit(static_cast<unsigned char>(text[k])) || text[k] == '.')) spec += text[k++];
    if (k >= text.size()) throw TemplateError("incomplete format");
    const char type = text[k];
    i = k;
    if (type == '%') {
      out += '%';
      continue;
    }
    if (v == nullptr) {
      if (next >= items.size()) throw TemplateError("not enough arguments for format string");
      v = &items[next++];
    }
    char buf[512];
    if (type == 's' || type == 'r') {
      const std::string s = type == 's' ? v->Str() : v->Repr();
      std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), s.c_str());
      out += s.size() < 256 ? std::string(buf) : s;
    } else if (std::string_view("dixXo").find(type) != std::string_view::npos) {
      if (!v->is_number()) throw TemplateError(std::string("%") + type + " format: a number is required");
      const char conv = type == 'i' ? 'd' : type;
      std::snprintf(buf, sizeof(buf), (spec + "ll" + conv).c_str(), static_cast<long long>(v->as_int()));
      out += buf;
    } else if (std::string_view("fFeEgG").find(type) != std::string_view::npos) {
      if (!v->is_number()) throw TemplateError(std::string("%") + type + " format: a number is required");
      std::snprintf(buf, sizeof(buf), (spec + type).c_str(), v->as_double());
      out += buf;
    } else {
      throw TemplateError(std::string("unsupported format character '") + type + "'");
    }
  }
  if (!values.is_dict() && next < items.size()) throw TemplateError("not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace kvserve::jinja
