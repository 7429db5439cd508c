// json.dumps as transformers' `tojson` calls it, and a JSON reader for values (see value.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/jinja/error.h"
#include "engine/jinja/utf8.h"
#include "engine/jinja/value.h"

namespace kvserve::jinja {

// ------------------------------------------------------------------ JSON out

namespace {

void JsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': *out += "\\\""; continue;
      case '\\': *out += "\\\\"; continue;
      case '\n': *out += "\\n"; continue;
      case '\r': *out += "\\r"; continue;
      case '\t': *out += "\\t"; continue;
      case '\b': *out += "\\b"; continue;
      case '\f': *out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      *out += buf;
    } else if (ensure_ascii && c >= 0x80) {
      size_t len = 0;
      const uint32_t cp = DecodeCodePoint(s, i, &len);
      i += len - 1;
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      *out += buf;
    } else {
      *out += ch;
    }
  }
  *out += '"';
}

std::string JsonKey(const Value& k) {
  switch (k.type()) {
    case Value::Type::kString: return k.str();
    case Value::Type::kNone: return "null";
    case Value::Type::kBool: return k.as_bool() ? "true" : "false";
    case Value::Type::kInt: return std::to_string(k.as_int());
    case Value::Type::kFloat: return FloatRepr(k.as_double());
    default: throw TemplateError(std::string("keys must be str, int, float, bool or None, not ") + k.TypeName());
  }
}

void Dump(const Value& v, const JsonStyle& style, int depth, std::string* out) {
  if (depth > 512) throw TemplateError("tojson: the value is nested too deeply");
  const bool indented = style.indent >= 0 || !style.indent_text.empty();
  const std::string item_sep = style.item_separator.value_or(indented ? "," : ", ");
  const std::string key_sep = style.key_separator.value_or(": ");
  auto newline = [&](int level) {
    if (!indented) return;
    *out += '\n';
    for (int i = 0; i < level; ++i) {
      *out += style.indent_text.empty() ? std::string(static_cast<size_t>(style.indent), ' ') : style.indent_text;
    }
  };
  switch (v.type()) {
    case Value::Type::kNone: *out += "null"; return;
    case Value::Type::kBool: *out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::kInt: *out += std::to_string(v.as_int()); return;
    case Value::Type::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d)) *out += "NaN";
      else if (std::isinf(d)) *out += d > 0 ? "Infinity" : "-Infinity";
      else *out += FloatRepr(d);
      return;
    }
    case Value::Type::kString: JsonString(v.str(), style.ensure_ascii, out); return;
    case Value::Type::kList: {
      if (v.is_generator()) throw TemplateError("Object of type generator is not JSON serializable");
      if (v.list().empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        Dump(v.list()[i], style, depth + 1, out);
      }
      newline(depth);
      *out += ']';
      return;
    }
    case Value::Type::kDict:
    case Value::Type::kNamespace: {
      const Dict& d = v.is_dict() ? v.dict() : v.ns().attributes;
      if (d.empty()) {
        *out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> items;
      items.reserve(d.size());
      for (const auto& [k, item] : d) items.emplace_back(JsonKey(k), &item);
      if (style.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        JsonString(items[i].first, style.ensure_ascii, out);
        *out += key_sep;
        Dump(*items[i].second, style, depth + 1, out);
      }
      newline(depth);
      *out += '}';
      return;
    }
    case Value::Type::kUndefined: throw TemplateError("Object of type Undefined is not JSON serializable");
    case Value::Type::kCallable: throw TemplateError("Object of type function is not JSON serializable");
  }
}

}  // namespace

std::string ToJson(const Value& v, const JsonStyle& style) {
  std::string out;
  Dump(v, style, 0, &out);
  return out;
}

// ------------------------------------------------------------------ JSON in

namespace {

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  std::optional<Value> Document() {
    std::optional<Value> v = Parse(0);
    SkipSpace();
    if (!v || at_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void SkipSpace() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r')) ++at_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool Word(std::string_view w) {
    if (s_.substr(at_, w.size()) != w) return false;
    at_ += w.size();
    return true;
  }

  std::optional<Value> Parse(int depth) {
    if (depth > 512) return std::nullopt;
    SkipSpace();
    if (at_ >= s_.size()) return std::nullopt;
    const char c = s_[at_];
    if (c == '{') {
      ++at_;
      Dict d;
      if (Eat('}')) return Value::FromDict(std::move(d));
      do {
        SkipSpace();
        std::optional<std::string> key = String();
        if (!key || !Eat(':')) return std::nullopt;
        std::optional<Value> v = Parse(depth + 1);
        if (!v) return std::nullopt;
        // A repeated key keeps its first place and its last value (Python's json).
        bool found = false;
        for (auto& [k, old] : d) {
          if (k.str() == *key) {
            old = std::move(*v);
            found = true;
          }
        }
        if (!found) d.emplace_back(Value(std::move(*key)), std::move(*v));
      } while (Eat(','));
      if (!Eat('}')) return std::nullopt;
      return Value::FromDict(std::move(d));
    }
    if (c == '[') {
      ++at_;
      List l;
      if (Eat(']')) return Value::FromList(std::move(l));
      do {
        std::optional<Value> v = Parse(depth + 1);
        if (!v) return std::nullopt;
        l.push_back(std::move(*v));
      } while (Eat(','));
      if (!Eat(']')) return std::nullopt;
      return Value::FromList(std::move(l));
    }
    if (c == '"') {
      std::optional<std::string> s = String();
      if (!s) return std::nullopt;
      return Value(std::move(*s));
    }
    if (Word("true")) return Value(true);
    if (Word("false")) return Value(false);
    if (Word("null")) return Value::None();
    return Number();
  }

  std::optional<Value> Number() {
    const size_t start = at_;
    bool is_float = false;
    if (at_ < s_.size() && s_[at_] == '-') ++at_;
    const size_t digits = at_;
    while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) ++at_;
    if (at_ == digits) return std::nullopt;
    if (at_ < s_.size() && s_[at_] == '.') {
      is_float = true;
      ++at_;
      const size_t frac = at_;
      while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) ++at_;
      if (at_ == frac) return std::nullopt;
    }
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      is_float = true;
      ++at_;
      if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
      const size_t exp = at_;
      while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) ++at_;
      if (at_ == exp) return std::nullopt;
    }
    const std::string text(s_.substr(start, at_ - start));
    if (!is_float) {
      int64_t v = 0;
      const auto res = std::from_chars(text.data(), text.data() + text.size(), v);
      if (res.ec == std::errc()) return Value(v);
    }
    return Value(std::strtod(text.c_str(), nullptr));
  }

  std::optional<std::string> String() {
    if (at_ >= s_.size() || s_[at_] != '"') return std::nullopt;
    ++at_;
    std::string out;
    while (at_ < s_.size()) {
      const char c = s_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return std::nullopt;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) return std::nullopt;
      const char e = s_[at_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::optional<uint32_t> cp = Hex4();
          if (!cp) return std::nullopt;
          if (*cp >= 0xd800 && *cp < 0xdc00 && s_.substr(at_, 2) == "\\u") {
            at_ += 2;
            std::optional<uint32_t> low = Hex4();
            if (!low) return std::nullopt;
            if (*low >= 0xdc00 && *low < 0xe000) {
              *cp = 0x10000 + ((*cp - 0xd800) << 10) + (*low - 0xdc00);
            } else {
              AppendCodePoint(0xfffd, &out);
              *cp = *low;
            }
          }
          if (*cp >= 0xd800 && *cp < 0xe000) *cp = 0xfffd;  // a lone surrogate
          AppendCodePoint(*cp, &out);
          break;
        }
        default: return std::nullopt;
      }
    }
    return std::nullopt;
  }

  std::optional<uint32_t> Hex4() {
    if (at_ + 4 > s_.size()) return std::nullopt;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[at_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return std::nullopt;
    }
    return v;
  }

  std::string_view s_;
  size_t at_ = 0;
};

}  // namespace

std::optional<Value> ParseJson(std::string_view text) { return JsonReader(text).Document(); }

}  // namespace kvserve::jinja
