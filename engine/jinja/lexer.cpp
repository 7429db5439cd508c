// The Jinja lexer (see lexer.h).
#include "engine/jinja/lexer.h"

#include <cctype>

#include "engine/jinja/error.h"
#include "engine/jinja/utf8.h"

namespace kvserve::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  std::vector<Token> Run() {
    bool line_starting = true;  // the last tag (with what it trimmed) ended a line
    bool strip_next = false;    // the last tag ended with `-`
    while (at_ < s_.size()) {
      const size_t tag = FindTag(at_);
      std::string text(s_.substr(at_, tag - at_));
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && IsSpace(text[k])) ++k;
        text.erase(0, k);
      }
      if (tag == s_.size()) {
        Emit(Token::Type::kText, std::move(text));
        break;
      }
      const char kind = s_[tag + 1];  // '{', '%' or '#'
      const char modifier = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (kind != '{' && modifier != '+') {
        // lstrip_blocks: spaces and tabs between the line's start and the tag.
        const size_t nl = text.rfind('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        if (nl != std::string::npos || line_starting) {
          bool blank = true;
          for (size_t k = from; k < text.size(); ++k) blank = blank && (text[k] == ' ' || text[k] == '\t');
          if (blank) text.erase(from);
        }
      }
      Emit(Token::Type::kText, std::move(text));
      line_ += Lines(at_, tag);
      at_ = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      bool trim_after = false;
      if (kind == '#') {
        const size_t end = s_.find("#}", at_);
        if (end == std::string_view::npos) throw TemplateError(Where() + "a comment is not closed");
        line_ += Lines(at_, end);
        strip_next = end > at_ && s_[end - 1] == '-';
        trim_after = !strip_next && !(end > at_ && s_[end - 1] == '+');
        at_ = end + 2;
      } else if (kind == '%' && IsRaw()) {
        strip_next = false;  // IsRaw applied the end tag's rules
      } else {
        const bool block = kind == '%';
        Emit(block ? Token::Type::kBlockBegin : Token::Type::kVariableBegin, "");
        const char close = block ? '%' : '}';
        strip_next = Expression(close);
        Emit(block ? Token::Type::kBlockEnd : Token::Type::kVariableEnd, "");
        trim_after = block && !strip_next && !(s_[at_ - 3] == '+');
      }
      if (trim_after && at_ < s_.size() && s_[at_] == '\n') ++at_, ++line_;
      else if (trim_after && at_ + 1 < s_.size() && s_[at_] == '\r' && s_[at_ + 1] == '\n') at_ += 2, ++line_;
      line_starting = at_ > 0 && s_[at_ - 1] == '\n';
    }
    Emit(Token::Type::kEnd, "");
    return std::move(tokens_);
  }

 private:
  std::string Where() const { return "line " + std::to_string(line_) + ": "; }
  int Lines(size_t from, size_t to) const {
    int n = 0;
    for (size_t i = from; i < to && i < s_.size(); ++i) n += s_[i] == '\n';
    return n;
  }
  void Emit(Token::Type type, std::string text) {
    if (type == Token::Type::kText && text.empty()) return;
    tokens_.push_back(Token{type, std::move(text), line_});
  }

  size_t FindTag(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i) {
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return s_.size();
  }

  // At the inside of a `{%` tag: if it is `raw`, emits the text up to `{% endraw %}` (with its
  // whitespace rules) and returns true.
  bool IsRaw() {
    size_t i = at_;
    while (i < s_.size() && IsSpace(s_[i])) ++i;
    if (s_.substr(i, 3) != "raw") return false;
    i += 3;
    while (i < s_.size() && IsSpace(s_[i])) ++i;
    bool strip_inside = false;
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) strip_inside = s_[i++] == '-';
    if (s_.substr(i, 2) != "%}") return false;
    i += 2;  // (jinja2 keeps the newline after {% raw %})
    // The end tag: {%[-+]? endraw [-+]?%}
    for (size_t j = i; j + 1 < s_.size(); ++j) {
      if (s_[j] != '{' || s_[j + 1] != '%') continue;
      size_t k = j + 2;
      const bool strip_before = k < s_.size() && s_[k] == '-';
      if (k < s_.size() && (s_[k] == '-' || s_[k] == '+')) ++k;
      while (k < s_.size() && IsSpace(s_[k])) ++k;
      if (s_.substr(k, 6) != "endraw") continue;
      k += 6;
      while (k < s_.size() && IsSpace(s_[k])) ++k;
      bool strip_after = false;
      if (k < s_.size() && (s_[k] == '-' || s_[k] == '+')) strip_after = s_[k++] == '-';
      if (s_.substr(k, 2) != "%}") continue;
      std::string text(s_.substr(i, j - i));
      if (strip_inside) {
        size_t n = 0;
        while (n < text.size() && IsSpace(text[n])) ++n;
        text.erase(0, n);
      }
      if (strip_before) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else {
        const size_t nl = text.rfind('\n');
        bool blank = nl != std::string::npos;
        for (size_t m = nl + 1; blank && m < text.size(); ++m) blank = text[m] == ' ' || text[m] == '\t';
        if (blank) text.erase(nl + 1);
      }
      Emit(Token::Type::kText, std::move(text));
      line_ += Lines(at_, k);
      at_ = k + 2;
      if (strip_after) {
        while (at_ < s_.size() && IsSpace(s_[at_])) ++at_;
      } else if (at_ < s_.size() && s_[at_] == '\n') {
        ++at_;
      }
      return true;
    }
    throw TemplateError(Where() + "a raw block is not closed");
  }

  // The tokens of a tag's inside, up to `close` + '}'. Returns whether the tag ends with `-`.
  bool Expression(char close) {
    int depth = 0;  // open brackets: `}}` inside `{{ {} }}` closes a dict first
    while (true) {
      while (at_ < s_.size() && IsSpace(s_[at_])) {
        line_ += s_[at_] == '\n';
        ++at_;
      }
      if (at_ >= s_.size()) throw TemplateError(Where() + "a tag is not closed");
      const char c = s_[at_];
      if (c == '-' && s_.substr(at_ + 1, 2) == std::string{close, '}'}) {
        at_ += 3;
        return true;
      }
      if (c == '+' && close == '%' && s_.substr(at_ + 1, 2) == "%}") {
        at_ += 3;
        return false;
      }
      if (depth == 0 && c == close && at_ + 1 < s_.size() && s_[at_ + 1] == '}') {
        at_ += 2;
        return false;
      }
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t start = at_;
        while (at_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[at_])) || s_[at_] == '_')) ++at_;
        Emit(Token::Type::kName, std::string(s_.substr(start, at_ - start)));
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        Number();
      } else if (c == '\'' || c == '"') {
        String(c);
      } else {
        Operator();
      }
    }
  }

  void Number() {
    const size_t start = at_;
    if (s_[at_] == '0' && at_ + 1 < s_.size() && std::string_view("xXoObB").find(s_[at_ + 1]) != std::string_view::npos) {
      const char kind = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[at_ + 1])));
      const int base = kind == 'x' ? 16 : kind == 'o' ? 8 : 2;
      at_ += 2;
      uint64_t v = 0;
      const size_t digits = at_;
      while (at_ < s_.size() && (std::isxdigit(static_cast<unsigned char>(s_[at_])) || s_[at_] == '_')) {
        const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[at_++])));
        if (c == '_') continue;
        const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : c - 'a' + 10;
        if (d >= base) throw TemplateError(Where() + "a bad digit in a number");
        v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
      }
      if (at_ == digits) throw TemplateError(Where() + "a number without digits");
      Emit(Token::Type::kInteger, std::to_string(v));
      return;
    }
    auto digits = [&] {
      while (at_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[at_])) || s_[at_] == '_')) ++at_;
    };
    digits();
    bool is_float = false;
    if (at_ + 1 < s_.size() && s_[at_] == '.' && std::isdigit(static_cast<unsigned char>(s_[at_ + 1]))) {
      is_float = true;
      ++at_;
      digits();
    }
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      size_t k = at_ + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        is_float = true;
        at_ = k;
        digits();
      }
    }
    std::string text;
    for (size_t i = start; i < at_; ++i) {
      if (s_[i] != '_') text += s_[i];
    }
    Emit(is_float ? Token::Type::kFloat : Token::Type::kInteger, std::move(text));
  }

  // A string literal with Python's escapes (as jinja2 decodes them).
  void String(char quote) {
    ++at_;
    std::string out;
    while (true) {
      if (at_ >= s_.size()) throw TemplateError(Where() + "a string literal is not closed");
      const char c = s_[at_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || at_ >= s_.size()) {
        out += c;
        continue;
      }
      const char e = s_[at_++];
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          if (at_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[at_]))) {
            throw TemplateError(Where() + "a bad escape in a string literal");
          }
          const char h = s_[at_++];
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                                        : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '7'; ++k) {
            v = v * 8 + static_cast<uint32_t>(s_[at_++] - '0');
          }
          AppendCodePoint(v, &out);
          break;
        }
        case '\n': ++line_; break;  // a line continuation
        case 'x': AppendCodePoint(hex(2), &out); break;
        case 'u': AppendCodePoint(hex(4), &out); break;
        case 'U': AppendCodePoint(hex(8), &out); break;
        default:
          out += '\\';
          out += e;
      }
    }
    Emit(Token::Type::kString, std::move(out));
  }

  void Operator() {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (s_.substr(at_, 2) == op) {
        Emit(Token::Type::kOperator, std::string(op));
        at_ += 2;
        return;
      }
    }
    const char c = s_[at_];
    if (std::string_view("+-*/%~()[]{},.:|=<>").find(c) == std::string_view::npos) {
      throw TemplateError(Where() + "unexpected character '" + std::string(1, c) + "'");
    }
    Emit(Token::Type::kOperator, std::string(1, c));
    ++at_;
  }

  std::string_view s_;
  size_t at_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Tokenize(std::string_view source) {
  // jinja2 reads "\r\n" and "\r" as "\n", and drops one newline at the end of the source
  // (keep_trailing_newline=False).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(normalized).Run();
}

}  // namespace kvserve::jinja
