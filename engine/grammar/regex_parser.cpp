// The regex parser: a recursive descent over the pattern's code points (regex.h's syntax).
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "engine/grammar/regex.h"
#include "engine/grammar/regex_ast.h"

namespace kvserve::regex_ast {

// Sorted, merged, without surrogates (they have no UTF-8 encoding).
Ranges NormalizeRanges(Ranges r) {
  Ranges split;
  for (auto [lo, hi] : r) {
    if (lo <= 0xD7FF) split.push_back({lo, std::min<uint32_t>(hi, 0xD7FF)});
    if (hi >= 0xE000) split.push_back({std::max<uint32_t>(lo, 0xE000), hi});
  }
  std::sort(split.begin(), split.end());
  Ranges out;
  for (auto [lo, hi] : split) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.push_back({lo, hi});
    }
  }
  return out;
}

Ranges ComplementRanges(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : NormalizeRanges(r)) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return NormalizeRanges(out);
}

std::optional<uint32_t> DecodeUtf8(std::string_view text, size_t* at) {
  const auto b = static_cast<uint8_t>(text[*at]);
  if (b < 0x80) return ++*at, b;
  if (b < 0xC2 || b > 0xF4) return std::nullopt;
  const int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
  uint32_t cp = b & (0x3F >> extra);
  for (int i = 1; i <= extra; ++i) {
    if (*at + static_cast<size_t>(i) >= text.size()) return std::nullopt;
    const auto c = static_cast<uint8_t>(text[*at + static_cast<size_t>(i)]);
    if ((c & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (c & 0x3F);
  }
  static constexpr uint32_t kShortest[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kShortest[extra] || cp > kMaxCodePoint || IsSurrogate(cp)) return std::nullopt;
  *at += static_cast<size_t>(extra) + 1;
  return cp;
}

namespace {

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kAny = {{0, kMaxCodePoint}};
const Ranges kDot = ComplementRanges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  StatusOr<int> Parse(std::vector<Node>* nodes) {
    nodes_ = nodes;
    const int root = Alternation();
    if (error_.empty() && at_ < p_.size()) Fail("unbalanced ')'");
    if (!error_.empty()) return InvalidArgumentError(fmt::format("regex /{}/: {}", Abbreviated(p_), error_));
    return root;
  }

 private:
  int Add(Node n) {
    nodes_->push_back(std::move(n));
    return static_cast<int>(nodes_->size()) - 1;
  }
  void Fail(std::string what) {
    if (error_.empty()) error_ = fmt::format("{} at offset {}", what, at_);
  }
  bool More() const { return at_ < p_.size() && error_.empty(); }
  bool Eat(char c) {
    if (at_ < p_.size() && p_[at_] == c) return ++at_, true;
    return false;
  }
  // The next code point of the pattern, which must be UTF-8 (a pattern is text: a byte that is
  // not would make the automaton's output invalid UTF-8 too).
  uint32_t CodePoint() {
    if (std::optional<uint32_t> cp = DecodeUtf8(p_, &at_)) return *cp;
    Fail("a byte that is not UTF-8");
    at_ = p_.size();
    return 0;
  }
  std::optional<uint32_t> Hex(size_t digits) {
    if (at_ + digits > p_.size()) return std::nullopt;
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char c = p_[at_ + i];
      if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    at_ += digits;
    return v;
  }

  int Alternation() {
    std::vector<int> alts = {Concatenation()};
    bool has_empty = IsEmpty(alts[0]);
    while (More() && Eat('|')) {
      const int alt = Concatenation();
      if (IsEmpty(alt) && std::exchange(has_empty, true)) continue;  // a|||b is a|b|: one empty branch
      alts.push_back(alt);
    }
    return alts.size() == 1 ? alts[0] : Add({Node::kAlt, {}, alts});
  }
  bool IsEmpty(int node) const {
    const Node& n = (*nodes_)[static_cast<size_t>(node)];
    return n.kind == Node::kConcat && n.kids.empty();
  }

  int Concatenation() {
    std::vector<int> items;
    while (More() && p_[at_] != '|' && p_[at_] != ')') items.push_back(Quantified());
    return items.size() == 1 ? items[0] : Add({Node::kConcat, {}, items});
  }

  // An atom and at most one quantifier (and its lazy '?'): a quantifier after a quantifier has
  // nothing to repeat, as in ECMAScript and Python (a** is refused, so quantifiers cannot nest
  // deeper than groups do).
  int Quantified() {
    const int atom = Atom();
    int min = 0, max = -1;
    if (!Quantifier(&min, &max)) return atom;
    if (nodes_->at(atom).kind == Node::kStart || nodes_->at(atom).kind == Node::kEnd) {
      Fail("a quantifier after an anchor");
      return atom;
    }
    Eat('?');  // lazy: the same language
    const size_t at = at_;
    int again_min = 0, again_max = -1;
    if (More() && Quantifier(&again_min, &again_max)) {
      at_ = at;
      Fail("a quantifier after a quantifier (nothing to repeat)");
    }
    return Add({Node::kRepeat, {}, {atom}, min, max});
  }

  // * + ? {n} {n,} {n,m} at the current offset, consumed.
  bool Quantifier(int* min, int* max) {
    if (!More()) return false;
    if (Eat('*')) return true;
    if (Eat('+')) return *min = 1, true;
    if (Eat('?')) return *max = 1, true;
    return p_[at_] == '{' && Counts(min, max);
  }

  // {n}, {n,}, {n,m}; anything else is a literal '{' (as ECMAScript's Annex B).
  bool Counts(int* min, int* max) {
    size_t i = at_ + 1;
    auto number = [&](int* out) {
      const size_t begin = i;
      int64_t v = 0;
      while (i < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i]))) v = std::min<int64_t>(v * 10 + (p_[i++] - '0'), 1 << 30);
      *out = static_cast<int>(v);
      return i > begin;
    };
    if (!number(min)) return false;
    *max = *min;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      *max = -1;
      if (i < p_.size() && p_[i] != '}' && !number(max)) return false;
    }
    if (i >= p_.size() || p_[i] != '}') return false;
    at_ = i + 1;
    if (*min > kMaxRepeat || *max > kMaxRepeat) Fail(fmt::format("a count over {}", kMaxRepeat));
    if (*max >= 0 && *max < *min) Fail("a count {n,m} with m < n");
    return true;
  }

  int Atom() {
    const char c = p_[at_];
    if (c == '(') {
      if (++depth_ > kMaxRegexNesting) {
        Fail(fmt::format("groups nested over {} deep", kMaxRegexNesting));
        at_ = p_.size();
        return Add({Node::kConcat});
      }
      ++at_;
      if (Eat('?')) {
        if (Eat(':')) {
        } else if (at_ < p_.size() && p_[at_] == '<' && at_ + 1 < p_.size() && p_[at_ + 1] != '=' && p_[at_ + 1] != '!') {
          const size_t close = p_.find('>', at_);
          if (close == std::string_view::npos) Fail("an unterminated group name");
          at_ = close == std::string_view::npos ? p_.size() : close + 1;
        } else {
          Fail("lookaround is not supported");
          return Add({Node::kConcat});
        }
      }
      const int inner = Alternation();
      if (!Eat(')')) Fail("an unterminated group");
      --depth_;
      return inner;
    }
    if (c == ')' || c == '|') return Add({Node::kConcat});
    ++at_;
    switch (c) {
      case '^': return Add({Node::kStart});
      case '$': return Add({Node::kEnd});
      case '.': return Add({Node::kClass, kDot});
      case '[': return Class();
      case '\\': return Add({Node::kClass, Escape(/*in_class=*/false)});
      case '*': case '+': case '?':
        Fail("a quantifier with nothing to repeat");
        return Add({Node::kConcat});
      default:
        --at_;
        const uint32_t cp = CodePoint();
        return Add({Node::kClass, {{cp, cp}}});
    }
  }

  // After '\'. A class escape gives its ranges; a character escape one code point.
  Ranges Escape(bool in_class) {
    if (at_ >= p_.size()) {
      Fail("a trailing backslash");
      return {};
    }
    const char c = p_[at_++];
    auto one = [](uint32_t cp) { return Ranges{{cp, cp}}; };
    switch (c) {
      case 'd': return kDigit;
      case 'D': return ComplementRanges(kDigit);
      case 'w': return kWord;
      case 'W': return ComplementRanges(kWord);
      case 's': return kSpace;
      case 'S': return ComplementRanges(kSpace);
      case 'n': return one('\n');
      case 'r': return one('\r');
      case 't': return one('\t');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'b':
        if (in_class) return one('\b');
        Fail("word boundaries (\\b) are not supported");
        return {};
      case 'B':
        Fail("word boundaries (\\B) are not supported");
        return {};
      case 'x': {
        if (std::optional<uint32_t> v = Hex(2)) return one(*v);
        Fail("a bad \\x escape");
        return {};
      }
      case 'u': {
        if (Eat('{')) {
          const size_t close = p_.find('}', at_);
          std::optional<uint32_t> v = close == std::string_view::npos ? std::nullopt : Hex(close - at_);
          if (!v || *v > kMaxCodePoint || !Eat('}')) Fail("a bad \\u{...} escape");
          if (v && IsSurrogate(*v) && !in_class) Fail("an unpaired surrogate");
          return one(v.value_or(0));
        }
        std::optional<uint32_t> v = Hex(4);
        if (!v) Fail("a bad \\u escape");
        // A surrogate pair \uD83D\uDE00 is one code point.
        if (v && *v >= 0xD800 && *v <= 0xDBFF && p_.substr(at_, 2) == "\\u") {
          at_ += 2;
          std::optional<uint32_t> low = Hex(4);
          if (low && *low >= 0xDC00 && *low <= 0xDFFF) return one(0x10000 + ((*v - 0xD800) << 10) + (*low - 0xDC00));
          Fail("an unpaired surrogate");
        }
        // A surrogate alone has no UTF-8 encoding: in a class it is a range's end (its code
        // points are dropped), elsewhere it could only match bytes that are not text.
        if (v && IsSurrogate(*v) && !in_class) Fail("an unpaired surrogate");
        return one(v.value_or(0));
      }
      case 'c': case 'p': case 'P': case 'k':
        Fail(fmt::format("the escape \\{} is not supported", c));
        return {};
      default:
        if (c >= '1' && c <= '9') {
          Fail("backreferences are not supported");
          return {};
        }
        --at_;
        return one(CodePoint());  // an escaped literal: \. \/ \- \\ ...
    }
  }

  int Class() {
    const bool negate = Eat('^');
    Ranges ranges;
    while (true) {
      if (at_ >= p_.size()) {
        Fail("an unterminated character class");
        break;
      }
      if (Eat(']')) break;  // "[]" matches nothing, "[^]" anything (ECMAScript)
      Ranges lo = Member();
      if (lo.size() == 1 && lo[0].first == lo[0].second && at_ + 1 < p_.size() && p_[at_] == '-' && p_[at_ + 1] != ']') {
        ++at_;
        Ranges hi = Member();
        if (hi.size() != 1 || hi[0].first != hi[0].second) {
          Fail("a class range with a class escape");
        } else if (hi[0].first < lo[0].first) {
          Fail("a class range out of order");
        } else {
          ranges.push_back({lo[0].first, hi[0].first});
        }
        continue;
      }
      ranges.insert(ranges.end(), lo.begin(), lo.end());
    }
    return Add({Node::kClass, negate ? ComplementRanges(ranges) : NormalizeRanges(ranges)});
  }

  Ranges Member() {
    if (Eat('\\')) return Escape(/*in_class=*/true);
    const uint32_t cp = CodePoint();
    return {{cp, cp}};
  }

  std::string_view p_;
  size_t at_ = 0;
  int depth_ = 0;  // open groups
  std::vector<Node>* nodes_ = nullptr;
  std::string error_;
};

}  // namespace

StatusOr<int> Parse(std::string_view pattern, std::vector<Node>* nodes) { return Parser(pattern).Parse(nodes); }

Ranges AnyCodePoint() { return kAny; }

}  // namespace kvserve::regex_ast
