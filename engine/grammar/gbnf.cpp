// The GBNF parser (grammar.h): a recursive descent over the text; repetitions and groups
// become generated rules, code point classes rules of UTF-8 byte sequences.
#include <cctype>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/regex.h"
#include "engine/grammar/regex_ast.h"

namespace kvserve {
namespace {

using regex_ast::Ranges;

bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : t_(text) {}

  StatusOr<Grammar> Parse() {
    Space(true);
    while (ok() && at_ < t_.size()) {
      const size_t name_at = at_;
      const std::string name = Name();
      if (name.empty()) return Fail("expected a rule name"), Error();
      Space(false);
      if (t_.substr(at_, 3) != "::=") return Fail("expected ::= after the rule name"), Error();
      at_ += 3;
      Space(true);
      const int32_t id = RuleId(name, name_at);
      if (defined_[static_cast<size_t>(id)]) {
        at_ = name_at;
        return Fail(fmt::format("rule '{}' is defined twice", name)), Error();
      }
      defined_[static_cast<size_t>(id)] = 1;
      std::vector<GrammarSequence> alts = Alternatives(name, /*nested=*/false);
      if (!ok()) break;
      g_.rules[static_cast<size_t>(id)] = std::move(alts);
      Space(false);
      if (at_ < t_.size() && t_[at_] != '\n' && t_[at_] != '\r') return Fail("expected the end of the rule"), Error();
      Space(true);
    }
    if (!ok()) return Error();
    for (size_t r = 0; r < g_.rules.size(); ++r) {
      if (!defined_[r]) {
        at_ = first_use_[r];
        return Fail(fmt::format("rule '{}' is used but not defined", g_.names[r])), Error();
      }
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) return InvalidArgumentError("GBNF: the grammar has no 'root' rule");
    g_.root = root->second;
    return std::move(g_);
  }

 private:
  bool ok() const { return error_.empty(); }
  Status Error() const { return InvalidArgumentError(error_); }
  void Fail(const std::string& what) {
    if (error_.empty()) {
      size_t line = 1, col = 1;
      for (size_t i = 0; i < at_ && i < t_.size(); ++i) {
        if (t_[i] == '\n') ++line, col = 0;
        ++col;
      }
      error_ = fmt::format("GBNF line {}, column {}: {}", line, col, what);
    }
  }

  // Blanks and comments; newlines too when `newlines`.
  void Space(bool newlines) {
    while (at_ < t_.size()) {
      const char c = t_[at_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++at_;
      } else if (c == '#') {
        while (at_ < t_.size() && t_[at_] != '\n') ++at_;
      } else {
        break;
      }
    }
  }

  std::string Name() {
    const size_t begin = at_;
    while (at_ < t_.size() && IsNameChar(t_[at_])) ++at_;
    return std::string(t_.substr(begin, at_ - begin));
  }

  int32_t AddRule(std::string name) {
    g_.names.push_back(std::move(name));
    g_.rules.emplace_back();
    defined_.push_back(0);
    first_use_.push_back(at_);
    return static_cast<int32_t>(g_.rules.size()) - 1;
  }
  int32_t RuleId(const std::string& name, size_t used_at) {
    auto [it, added] = ids_.try_emplace(name, 0);
    if (added) {
      it->second = AddRule(name);
      first_use_.back() = used_at;
    }
    return it->second;
  }
  // A generated rule (groups, repetitions, classes): defined at once.
  int32_t Generated(const std::string& base, std::vector<GrammarSequence> alts) {
    const int32_t id = AddRule(fmt::format("{}#{}", base, ++generated_));
    g_.rules[static_cast<size_t>(id)] = std::move(alts);
    defined_[static_cast<size_t>(id)] = 1;
    return id;
  }
  static GrammarSymbol Ref(int32_t rule) { return {GrammarSymbol::kRule, 0, 0, rule}; }

  std::vector<GrammarSequence> Alternatives(const std::string& name, bool nested) {
    std::vector<GrammarSequence> alts = {Sequence(name, nested)};
    while (ok() && at_ < t_.size() && t_[at_] == '|') {
      ++at_;
      Space(true);
      alts.push_back(Sequence(name, nested));
    }
    return alts;
  }

  GrammarSequence Sequence(const std::string& name, bool nested) {
    GrammarSequence seq;
    while (ok() && at_ < t_.size()) {
      const size_t item = seq.size();
      const char c = t_[at_];
      if (c == '"') {
        ++at_;
        std::string bytes;
        while (ok() && at_ < t_.size() && t_[at_] != '"') {
          if (std::optional<uint32_t> cp = Char()) AppendUtf8(*cp, &bytes);
        }
        if (at_ >= t_.size()) {
          Fail("an unterminated literal");
          break;
        }
        ++at_;
        for (char b : bytes) seq.push_back({GrammarSymbol::kBytes, static_cast<uint8_t>(b), static_cast<uint8_t>(b), -1});
      } else if (c == '[' || c == '.') {
        ++at_;
        const Ranges ranges = c == '.' ? regex_ast::AnyCodePoint() : Class();
        if (ranges.size() == 1 && ranges[0].second < 0x80) {
          seq.push_back({GrammarSymbol::kBytes, static_cast<uint8_t>(ranges[0].first),
                         static_cast<uint8_t>(ranges[0].second), -1});
        } else {
          std::vector<regex_ast::ByteSeq> bytes;
          for (auto [lo, hi] : ranges) regex_ast::Utf8Sequences(lo, hi, &bytes);
          std::vector<GrammarSequence> alts;
          for (const regex_ast::ByteSeq& b : bytes) {
            GrammarSequence s;
            for (auto [lo, hi] : b) s.push_back({GrammarSymbol::kBytes, lo, hi, -1});
            alts.push_back(std::move(s));
          }
          seq.push_back(Ref(Generated(name, std::move(alts))));
        }
      } else if (IsNameChar(c)) {
        const size_t at = at_;
        seq.push_back(Ref(RuleId(Name(), at)));
      } else if (c == '(') {
        if (depth_ >= kMaxNesting) {
          Fail(fmt::format("groups nested over {} deep", kMaxNesting));
          break;
        }
        ++at_;
        Space(true);
        ++depth_;
        std::vector<GrammarSequence> alts = Alternatives(name, /*nested=*/true);
        --depth_;
        if (!ok()) break;
        if (at_ >= t_.size() || t_[at_] != ')') {
          Fail("expected ')'");
          break;
        }
        ++at_;
        seq.push_back(Ref(Generated(name, std::move(alts))));
      } else {
        break;
      }
      Space(nested);
      Repeat(name, item, &seq);
      Space(nested);
    }
    return seq;
  }

  // A postfix operator applies to the last item, seq[item...].
  void Repeat(const std::string& name, size_t item, GrammarSequence* seq) {
    if (at_ >= t_.size()) return;
    int min = 0, max = -1;
    const char c = t_[at_];
    if (c == '*') {
      ++at_;
    } else if (c == '+') {
      ++at_, min = 1;
    } else if (c == '?') {
      ++at_, max = 1;
    } else if (c == '{') {
      ++at_;
      if (!Count(&min)) return;
      max = min;
      if (at_ < t_.size() && t_[at_] == ',') {
        ++at_;
        Space(false);
        max = -1;
        if (at_ < t_.size() && t_[at_] != '}' && !Count(&max)) return;
      }
      if (at_ >= t_.size() || t_[at_] != '}') {
        Fail("expected '}' after a count");
        return;
      }
      ++at_;
      if (max >= 0 && max < min) {
        Fail("a count {m,n} with n < m");
        return;
      }
    } else {
      return;
    }
    const GrammarSequence unit(seq->begin() + static_cast<std::ptrdiff_t>(item), seq->end());
    seq->resize(item);
    // Copies are expanded: bound what a count can cost (a client's grammar).
    symbols_ += static_cast<int64_t>(unit.size()) * (max < 0 ? min + 1 : max);
    if (symbols_ > kMaxSymbols) {
      Fail(fmt::format("the grammar expands to over {} symbols", kMaxSymbols));
      return;
    }
    for (int i = 0; i < min; ++i) seq->insert(seq->end(), unit.begin(), unit.end());
    if (max < 0) {
      // R ::= unit R | ""
      const int32_t r = Generated(name, {});
      GrammarSequence more = unit;
      more.push_back(Ref(r));
      g_.rules[static_cast<size_t>(r)] = {more, {}};
      seq->push_back(Ref(r));
      return;
    }
    // Up to max - min more: R1 ::= unit R2 | "", ..., Rk ::= unit | "" (one parse each).
    int32_t tail = -1;
    for (int i = max - min; i > 0; --i) {
      GrammarSequence more = unit;
      if (tail >= 0) more.push_back(Ref(tail));
      tail = Generated(name, {more, {}});
    }
    if (tail >= 0) seq->push_back(Ref(tail));
  }

  bool Count(int* out) {
    Space(false);
    const size_t begin = at_;
    int64_t v = 0;
    while (at_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[at_]))) {
      v = std::min<int64_t>(v * 10 + (t_[at_++] - '0'), kMaxRepeat + 1);
    }
    Space(false);
    if (at_ == begin) return Fail("expected a number in a count"), false;
    if (v > kMaxRepeat) return Fail(fmt::format("a count over {}", kMaxRepeat)), false;
    *out = static_cast<int>(v);
    return true;
  }

  // One character of a literal or class: an escape or a UTF-8 code point.
  std::optional<uint32_t> Char() {
    if (t_[at_] != '\\') {
      if (std::optional<uint32_t> cp = regex_ast::DecodeUtf8(t_, &at_)) return cp;
      return Fail("a byte that is not UTF-8"), std::nullopt;
    }
    ++at_;
    if (at_ >= t_.size()) return Fail("a trailing backslash"), std::nullopt;
    const char e = t_[at_++];
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint8_t>(e);
      case 'x': return Hex(2);
      case 'u': return Hex(4);
      case 'U': return Hex(8);
      default: return Fail(fmt::format("unknown escape \\{}", e)), std::nullopt;
    }
  }
  std::optional<uint32_t> Hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i, ++at_) {
      if (at_ >= t_.size() || !std::isxdigit(static_cast<unsigned char>(t_[at_]))) {
        return Fail("a bad hex escape"), std::nullopt;
      }
      const char c = t_[at_];
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    if (v > regex_ast::kMaxCodePoint) return Fail("a code point past U+10FFFF"), std::nullopt;
    if (regex_ast::IsSurrogate(v) && !in_class_) return Fail("a surrogate code point (no UTF-8 encoding)"), std::nullopt;
    return v;
  }

  // After '['.
  Ranges Class() {
    in_class_ = true;  // a surrogate may end a range there (its code points are dropped)
    Ranges ranges = ClassRanges();
    in_class_ = false;
    return ranges;
  }
  Ranges ClassRanges() {
    bool negate = false;
    if (at_ < t_.size() && t_[at_] == '^') {
      negate = true;
      ++at_;
    }
    Ranges ranges;
    while (ok() && at_ < t_.size() && t_[at_] != ']') {
      const std::optional<uint32_t> lo = Char();
      if (!lo) break;
      uint32_t hi = *lo;
      if (at_ + 1 < t_.size() && t_[at_] == '-' && t_[at_ + 1] != ']') {
        ++at_;
        const std::optional<uint32_t> end = Char();
        if (!end) break;
        if (*end < *lo) Fail("a class range out of order");
        hi = *end;
      }
      ranges.push_back({*lo, hi});
    }
    if (at_ >= t_.size()) Fail("an unterminated character class");
    ++at_;
    return negate ? regex_ast::ComplementRanges(ranges) : regex_ast::NormalizeRanges(ranges);
  }

  std::string_view t_;
  size_t at_ = 0;
  std::string error_;
  Grammar g_;
  std::map<std::string, int32_t> ids_;
  std::vector<char> defined_;
  std::vector<size_t> first_use_;
  int generated_ = 0;
  int64_t symbols_ = 0;  // symbols that repetitions expanded
  static constexpr int64_t kMaxSymbols = int64_t{1} << 20;
  int depth_ = 0;  // open groups: the parser recurses by group
  bool in_class_ = false;
  static constexpr int kMaxNesting = kMaxRegexNesting;
};

}  // namespace

StatusOr<Grammar> ParseGbnf(std::string_view text) { return GbnfParser(text).Parse(); }

}  // namespace kvserve
