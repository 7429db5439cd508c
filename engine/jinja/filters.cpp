// jinja2's filters, as chat templates use them (see builtins.h). Lazy ones (map, select,
// items, unique, reverse, batch) return generators, as jinja2's do.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "engine/jinja/builtins.h"
#include "engine/jinja/error.h"
#include "engine/jinja/render.h"
#include "engine/jinja/strings.h"
#include "engine/jinja/utf8.h"

namespace kvserve::jinja {
namespace {

// `text` as a Markup when `input` is one (str methods of Markup return Markup).
Value Same(const Value& input, std::string text) {
  return input.is_markup() ? Value::Markup(std::move(text)) : Value(std::move(text));
}

bool BoolArg(const CallArgs& args, size_t i, std::string_view name, bool def) {
  const Value* v = Arg(args, i, name);
  return v == nullptr ? def : v->Truthy();
}

// A dotted attribute path ("function.name", "0") looked up as jinja2's make_attrgetter does.
Value Attribute(Renderer& r, const Value& item, const Value& path) {
  if (!path.is_string()) return r.GetItem(item, path);
  Value v = item;
  std::string_view rest = path.str();
  while (true) {
    const size_t dot = rest.find('.');
    const std::string part(rest.substr(0, dot));
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = digits ? r.GetItem(v, Value(static_cast<int64_t>(std::atoll(part.c_str())))) : r.GetItem(v, Value(part));
    if (dot == std::string_view::npos) return v;
    rest.remove_prefix(dot + 1);
  }
}

// Case-insensitive sort key for strings unless `case_sensitive`.
Value SortKey(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(AsciiLower(v.str())) : v;
}

// select/reject/selectattr/rejectattr: `args` from `first` name the test and its arguments.
Value Select(Renderer& r, const Value& input, CallArgs& args, bool by_attribute, bool keep_if) {
  size_t at = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw TemplateError("selectattr needs an attribute");
    attribute = args.positional[at++];
  }
  std::string test;
  CallArgs test_args;
  if (at < args.positional.size()) {
    test = args.positional[at++].Str();
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(at), args.positional.end());
  }
  List out;
  if (!input.Truthy()) return Value::FromGenerator({});  // jinja2: `if value: for item in value`
  for (const Value& item : IterateValue(input)) {
    const Value v = by_attribute ? Attribute(r, item, attribute) : item;
    CallArgs call = test_args;
    const bool pass = test.empty() ? v.Truthy() : r.ApplyTest(test, v, call);
    if (pass == keep_if) out.push_back(item);
  }
  return Value::FromGenerator(std::move(out));
}

Value Map(Renderer& r, const Value& input, CallArgs& args) {
  List out;
  if (!input.Truthy()) return Value::FromGenerator({});  // jinja2: `if value: for item in value`
  const Value* attribute = Arg(args, 99, "attribute");
  if (attribute != nullptr) {
    const Value* def = Arg(args, 99, "default");
    for (const Value& item : IterateValue(input)) {
      Value v = Attribute(r, item, *attribute);
      if (v.is_undefined() && def != nullptr) v = *def;
      out.push_back(std::move(v));
    }
    return Value::FromGenerator(std::move(out));
  }
  if (args.positional.empty()) throw TemplateError("map needs a filter name or attribute=");
  const std::string filter = args.positional[0].Str();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : IterateValue(input)) {
    CallArgs call = rest;
    out.push_back(r.ApplyFilter(filter, item, call));
  }
  return Value::FromGenerator(std::move(out));
}

Value Sorted(Renderer& r, const Value& input, CallArgs& args) {
  const bool reverse = BoolArg(args, 0, "reverse", false);
  const bool case_sensitive = BoolArg(args, 1, "case_sensitive", false);
  const Value* attribute = Arg(args, 2, "attribute");
  List items = IterateValue(input);
  std::vector<std::pair<Value, size_t>> keys;
  for (size_t i = 0; i < items.size(); ++i) {
    keys.emplace_back(SortKey(attribute ? Attribute(r, items[i], *attribute) : items[i], case_sensitive), i);
  }
  std::stable_sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) {
    return reverse ? PythonLess(b.first, a.first) : PythonLess(a.first, b.first);
  });
  List out;
  for (const auto& k : keys) out.push_back(items[k.second]);
  return Value::FromList(std::move(out));
}

// jinja2's title filter: each word (after whitespace, '-', or an opening bracket) capitalized.
std::string TitleWords(const std::string& s) {
  std::string out;
  bool start = true;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    const bool separator = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    out += separator ? c : static_cast<char>(start ? std::toupper(u) : std::tolower(u));
    start = separator;
  }
  return out;
}

Value Indent(Renderer& r, const Value& input, CallArgs& args) {
  if (input.is_undefined()) throw TemplateError(input.str());
  if (const Value* w = Arg(args, 0, "width"); w != nullptr && w->is_number()) {
    r.CheckSize(static_cast<size_t>(std::max<int64_t>(w->as_int(), 0)));
  }
  const Value* width = Arg(args, 0, "width");
  const std::string indention = width == nullptr ? "    " : width->is_string() ? width->str()
                                                                               : std::string(static_cast<size_t>(std::max<int64_t>(width->as_int(), 0)), ' ');
  const bool first = BoolArg(args, 1, "first", false);
  const bool blank = BoolArg(args, 2, "blank", false);
  const std::vector<std::string> lines = SplitLines(input.Str() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n" + (blank || !lines[i].empty() ? indention : "");
    out += lines[i];
  }
  return Same(input, first ? indention + out : out);
}

Value Round(const Value& input, CallArgs& args) {
  const int64_t precision = Arg(args, 0, "precision") ? Arg(args, 0, "precision")->as_int() : 0;
  const Value* method = Arg(args, 1, "method");
  const std::string how = method == nullptr ? "common" : method->Str();
  if (how != "common" && how != "ceil" && how != "floor") throw TemplateError("method must be common, ceil or floor");
  if (how == "common") {
    if (input.is_int() || input.is_bool()) return Value(input.as_int());  // Python's round(int) is the int
    // Python rounds the exact binary value half to even, as printf does.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), input.as_double());
    return Value(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = input.as_double() * scale;
  return Value((how == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value ToInt(const Value& input, CallArgs& args) {
  if (input.is_undefined()) throw TemplateError(input.str());
  const Value* def = Arg(args, 0, "default");
  if (input.is_number()) return Value(input.as_int());
  if (input.is_string()) {
    const std::string s = Strip(input.str(), std::nullopt, true, true);
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size()) return Value(static_cast<int64_t>(i));
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
  }
  return def != nullptr ? *def : Value(0);
}

Value ToFloat(const Value& input, CallArgs& args) {
  const Value* def = Arg(args, 0, "default");
  if (input.is_number()) return Value(input.as_double());
  if (input.is_string()) {
    const std::string s = Strip(input.str(), std::nullopt, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value(d);
  }
  return def != nullptr ? *def : Value(0.0);
}

Value ToJsonFilter(const Value& input, CallArgs& args) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  JsonStyle style;
  style.ensure_ascii = BoolArg(args, 0, "ensure_ascii", false);
  if (const Value* indent = Arg(args, 1, "indent"); indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) style.indent_text = indent->str(), style.indent = 0;
    else style.indent = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64));
  }
  if (const Value* sep = Arg(args, 2, "separators"); sep != nullptr && !sep->is_none()) {
    if (!sep->is_list() || sep->list().size() != 2) throw TemplateError("separators must be a pair of strings");
    style.item_separator = sep->list()[0].Str();
    style.key_separator = sep->list()[1].Str();
  }
  style.sort_keys = BoolArg(args, 3, "sort_keys", false);
  return Value(ToJson(input, style));
}

int64_t WordCount(const std::string& s) {
  int64_t n = 0;
  bool in_word = false;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    const bool word = std::isalnum(u) || c == '_' || u >= 0x80;
    if (word && !in_word) ++n;
    in_word = word;
  }
  return n;
}

}  // namespace

bool CallFilter(Renderer& r, std::string_view name, const Value& input, CallArgs& args, Value* out) {
  if (name == "tojson") *out = ToJsonFilter(input, args);
  else if (name == "safe") *out = input.is_string() ? Value::Markup(input.str()) : Value::Markup(input.Str());
  else if (name == "string") *out = input.is_markup() ? input : Value(input.Str());
  else if (name == "length" || name == "count") {
    const std::optional<int64_t> n = input.Length();
    if (!n) throw TemplateError(std::string("object of type '") + input.TypeName() + "' has no len()");
    *out = Value(*n);
  } else if (name == "trim") {
    const Value* chars = Arg(args, 0, "chars");
    *out = Same(input, Strip(input.Str(), chars && !chars->is_none() ? std::optional(chars->Str()) : std::nullopt, true, true));
  } else if (name == "upper") *out = Same(input, AsciiUpper(input.Str()));
  else if (name == "lower") *out = Same(input, AsciiLower(input.Str()));
  else if (name == "capitalize") *out = Same(input, Capitalize(input.Str()));
  else if (name == "title") *out = Same(input, TitleWords(input.Str()));
  else if (name == "default" || name == "d") {
    const Value* def = Arg(args, 0, "default_value");
    const bool boolean = BoolArg(args, 1, "boolean", false);
    const bool use_default = input.is_undefined() || (boolean && !input.Truthy());
    *out = use_default ? (def ? *def : Value("")) : input;
  } else if (name == "items") {
    if (input.is_undefined()) {
      *out = Value::FromGenerator({});
      return true;
    }
    if (!input.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
    List items;
    for (const auto& [k, v] : input.dict()) items.push_back(Value::FromList({k, v}, /*tuple=*/true));
    *out = Value::FromGenerator(std::move(items));
  } else if (name == "dictsort") {
    if (!input.is_dict()) throw TemplateError("You can only sort by either \"key\" or \"value\"");
    const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* by = Arg(args, 1, "by");
    const bool by_value = by != nullptr && by->Str() == "value";
    const bool reverse = BoolArg(args, 2, "reverse", false);
    Dict items = input.dict();
    std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
      const Value ka = SortKey(by_value ? a.second : a.first, case_sensitive);
      const Value kb = SortKey(by_value ? b.second : b.first, case_sensitive);
      return reverse ? PythonLess(kb, ka) : PythonLess(ka, kb);
    });
    List out_items;
    for (auto& [k, v] : items) out_items.push_back(Value::FromList({k, v}, /*tuple=*/true));
    *out = Value::FromList(std::move(out_items));
  } else if (name == "join") {
    const Value* sep = Arg(args, 0, "d");
    const Value* attribute = Arg(args, 1, "attribute");
    std::string text;
    bool first = true;
    for (const Value& item : IterateValue(input)) {
      if (!first && sep != nullptr) text += sep->Str();
      first = false;
      text += (attribute ? Attribute(r, item, *attribute) : item).Str();
      r.Step();
    }
    *out = Value(std::move(text));
  } else if (name == "list") *out = Value::FromList(IterateValue(input));
  else if (name == "first" || name == "last") {
    if (name == "last" && input.is_generator()) throw TemplateError("'generator' object is not reversible");
    const List items = IterateValue(input);
    *out = items.empty() ? Value::Undefined("No " + std::string(name) + " item, sequence was empty.")
                         : (name == "first" ? items.front() : items.back());
  } else if (name == "reverse") {
    if (input.is_string()) {
      const List chars = IterateValue(input);
      std::string s;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) s += it->str();
      *out = Value(std::move(s));
    } else {
      List items = IterateValue(input);
      std::reverse(items.begin(), items.end());
      *out = Value::FromGenerator(std::move(items));
    }
  } else if (name == "select" || name == "reject") *out = Select(r, input, args, false, name == "select");
  else if (name == "selectattr" || name == "rejectattr") *out = Select(r, input, args, true, name == "selectattr");
  else if (name == "map") *out = Map(r, input, args);
  else if (name == "sort") *out = Sorted(r, input, args);
  else if (name == "unique") {
    const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* attribute = Arg(args, 1, "attribute");
    List items, seen;
    for (const Value& item : IterateValue(input)) {
      const Value key = SortKey(attribute ? Attribute(r, item, *attribute) : item, case_sensitive);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      items.push_back(item);
    }
    *out = Value::FromGenerator(std::move(items));
  } else if (name == "indent") *out = Indent(r, input, args);
  else if (name == "replace") {
    const Value* count = Arg(args, 2, "count");
    *out = Value(Replace(input.Str(), Arg(args, 0, "old") ? Arg(args, 0, "old")->Str() : "",
                         Arg(args, 1, "new") ? Arg(args, 1, "new")->Str() : "",
                         count == nullptr || count->is_none() ? -1 : count->as_int()));
  } else if (name == "int") *out = ToInt(input, args);
  else if (name == "float") *out = ToFloat(input, args);
  else if (name == "abs") {
    if (!input.is_number()) throw TemplateError(std::string("bad operand type for abs(): '") + input.TypeName() + "'");
    *out = input.is_float() ? Value(std::fabs(input.as_double())) : Value(static_cast<int64_t>(std::llabs(input.as_int())));
  } else if (name == "round") *out = Round(input, args);
  else if (name == "sum") {
    const Value* attribute = Arg(args, 0, "attribute");
    const Value* start = Arg(args, 1, "start");
    bool is_float = start != nullptr && start->is_float();
    double f = start ? start->as_double() : 0;
    int64_t i = start ? start->as_int() : 0;
    for (const Value& item : IterateValue(input)) {
      const Value v = attribute ? Attribute(r, item, *attribute) : item;
      if (!v.is_number()) throw TemplateError(std::string("unsupported operand type(s) for +: 'int' and '") + v.TypeName() + "'");
      is_float = is_float || v.is_float();
      f += v.as_double();
      i += v.as_int();
    }
    *out = is_float ? Value(f) : Value(i);
  } else if (name == "min" || name == "max") {
    const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* attribute = Arg(args, 1, "attribute");
    const List items = IterateValue(input);
    if (items.empty()) {
      *out = Value::Undefined("No aggregated item, sequence was empty.");
      return true;
    }
    size_t best = 0;
    for (size_t k = 1; k < items.size(); ++k) {
      const Value a = SortKey(attribute ? Attribute(r, items[k], *attribute) : items[k], case_sensitive);
      const Value b = SortKey(attribute ? Attribute(r, items[best], *attribute) : items[best], case_sensitive);
      if (name == "min" ? PythonLess(a, b) : PythonLess(b, a)) best = k;
    }
    *out = items[best];
  } else if (name == "wordcount") *out = Value(WordCount(input.Str()));
  else if (name == "center") {
    const int64_t width = Arg(args, 0, "width") ? Arg(args, 0, "width")->as_int() : 80;
    r.CheckSize(static_cast<size_t>(std::max<int64_t>(width, 0)));
    const std::string s = input.Str();
    const int64_t len = CodePointCount(s);
    if (len >= width) {
      *out = Value(s);
    } else {
      // Python's str.center: the odd space goes right unless the width is odd... as CPython pads.
      const int64_t pad = width - len;
      const int64_t left = pad / 2 + (pad & width & 1);
      *out = Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
    }
  } else if (name == "escape" || name == "e" || name == "forceescape") {
    *out = input.is_markup() && name != "forceescape" ? input : Value::Markup(HtmlEscape(input.Str()));
  }
  else if (name == "attr") {
    // An attribute, never an item (jinja2's attr filter): methods, a namespace's attributes.
    const std::string attribute = Arg(args, 0, "name") ? Arg(args, 0, "name")->Str() : "";
    std::optional<Value> method = Method(input, attribute);
    *out = method ? *method : input.is_namespace() ? r.GetAttr(input, attribute) : Value::Undefined(attribute);
  }
  else if (name == "format") {
    if (!args.keyword.empty()) {
      Dict mapping;
      for (const auto& [k, v] : args.keyword) mapping.emplace_back(Value(k), v);
      *out = PercentFormat(input.Str(), Value::FromDict(std::move(mapping)));
      return true;
    }
    *out = PercentFormat(input.Str(), Value::FromList(args.positional, /*tuple=*/true));
  } else if (name == "batch") {
    const int64_t size = Arg(args, 0, "linecount") ? Arg(args, 0, "linecount")->as_int() : 1;
    if (size <= 0) throw TemplateError("batch size must be positive");
    const Value* fill = Arg(args, 1, "fill_with");
    List batches, current;
    for (const Value& item : IterateValue(input)) {
      current.push_back(item);
      if (static_cast<int64_t>(current.size()) == size) batches.push_back(Value::FromList(std::move(current))), current = {};
    }
    if (!current.empty()) {
      while (fill != nullptr && static_cast<int64_t>(current.size()) < size) current.push_back(*fill);
      batches.push_back(Value::FromList(std::move(current)));
    }
    *out = Value::FromGenerator(std::move(batches));
  } else if (name == "truncate") {
    const int64_t length = Arg(args, 0, "length") ? Arg(args, 0, "length")->as_int() : 255;
    const bool killwords = BoolArg(args, 1, "killwords", false);
    const std::string end = Arg(args, 2, "end") ? Arg(args, 2, "end")->Str() : "...";
    const int64_t leeway = Arg(args, 3, "leeway") ? Arg(args, 3, "leeway")->as_int() : 5;
    const std::string s = input.Str();
    const std::vector<size_t> at = CodePointOffsets(s);
    const auto n = static_cast<int64_t>(at.size()) - 1;
    if (n <= length + leeway) {
      *out = Value(s);
    } else {
      const int64_t keep = std::max<int64_t>(length - CodePointCount(end), 0);
      std::string cut = s.substr(0, at[static_cast<size_t>(keep)]);
      if (!killwords) {
        const size_t space = cut.rfind(' ');
        if (space != std::string::npos) cut.erase(space);
      }
      *out = Value(cut + end);
    }
  } else {
    return false;
  }
  return true;
}

}  // namespace kvserve::jinja
