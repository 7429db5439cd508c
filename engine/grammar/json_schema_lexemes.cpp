// Number and string lexemes of the JSON Schema compiler (json_schema_internal.h).
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/grammar/formats.h"
#include "engine/grammar/json_schema_internal.h"

namespace kvserve::json_schema {
namespace {

// Equal-length digit strings lo <= hi: a regex for the strings between them.
std::string SameLength(const std::string& lo, const std::string& hi) {
  if (lo == hi) return lo;
  size_t i = 0;
  while (lo[i] == hi[i]) ++i;
  const std::string prefix = lo.substr(0, i);
  const size_t rest = lo.size() - i - 1;
  auto digits = [](char a, char b) { return a == b ? std::string(1, a) : fmt::format("[{}-{}]", a, b); };
  auto any = [&](size_t n) { return n == 0 ? std::string() : fmt::format("[0-9]{{{}}}", n); };
  const std::string lo_tail = lo.substr(i + 1), hi_tail = hi.substr(i + 1);
  if (lo_tail == std::string(rest, '0') && hi_tail == std::string(rest, '9')) {
    return prefix + digits(lo[i], hi[i]) + any(rest);
  }
  std::vector<std::string> alts;
  alts.push_back(std::string(1, lo[i]) + "(" + SameLength(lo_tail, std::string(rest, '9')) + ")");
  if (lo[i] + 1 <= hi[i] - 1) alts.push_back(digits(static_cast<char>(lo[i] + 1), static_cast<char>(hi[i] - 1)) + any(rest));
  alts.push_back(std::string(1, hi[i]) + "(" + SameLength(std::string(rest, '0'), hi_tail) + ")");
  std::string out = prefix + "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? "|" : "") + alts[k];
  return out + ")";
}

// Non-negative integers in [lo, hi] (hi nullopt: unbounded), no leading zeros.
std::string NonNegative(uint64_t lo, std::optional<uint64_t> hi) {
  if (hi && *hi < lo) return "";
  std::vector<std::string> alts;
  const std::string los = std::to_string(lo);
  const size_t max_len = hi ? std::to_string(*hi).size() : los.size();
  for (size_t len = los.size(); len <= max_len; ++len) {
    const std::string a = len == los.size() ? los : "1" + std::string(len - 1, '0');
    const std::string b = hi && len == max_len ? std::to_string(*hi) : std::string(len, '9');
    alts.push_back(SameLength(a, b));
  }
  if (!hi) alts.push_back(fmt::format("[1-9][0-9]{{{},}}", los.size()));
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? "|" : "") + alts[k];
  return out + ")";
}

uint64_t Magnitude(int64_t v) { return v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }

constexpr std::string_view kFraction = "(\\.[0-9]+)?";
constexpr std::string_view kNonZeroFraction = "\\.[0-9]*[1-9][0-9]*";

std::optional<double> NumberKeyword(const Json& schema, const char* name) {
  const auto it = schema.find(name);
  if (it == schema.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

std::string IntegerRangeRegex(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) return "";
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {  // negatives: -x for x in [max(1, -hi), -lo]
    const uint64_t from = hi && *hi < 0 ? Magnitude(*hi) : 1;
    const std::optional<uint64_t> to = lo ? std::optional<uint64_t>(Magnitude(*lo)) : std::nullopt;
    const std::string r = NonNegative(from, to);
    if (!r.empty()) alts.push_back("-" + r);
  }
  if (!hi || *hi >= 0) {
    const std::string r = NonNegative(lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0,
                                      hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt);
    if (!r.empty()) alts.push_back(r);
  }
  if (alts.empty()) return "";
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? "|" : "") + alts[k];
  return out + ")";
}

std::string NumberAtLeastRegex(int64_t a, bool exclusive) {
  const std::string nonneg = fmt::format("(0|[1-9][0-9]*){}", kFraction);
  if (a >= 0) {
    const uint64_t u = static_cast<uint64_t>(a);
    if (!exclusive) return NonNegative(u, std::nullopt) + std::string(kFraction);
    return fmt::format("({}{}|{}{})", NonNegative(u + 1, std::nullopt), kFraction, u, kNonZeroFraction);
  }
  const uint64_t m = Magnitude(a);  // x >= -m: x >= 0, or -x with |x| <= m (< m if exclusive)
  const std::string below = fmt::format("{}{}", NonNegative(0, m - 1), kFraction);
  if (exclusive) return fmt::format("({}|-{})", nonneg, below);
  return fmt::format("({}|-({}|{}(\\.0+)?))", nonneg, below, m);
}

std::string NumberAtMostRegex(int64_t b, bool exclusive) {
  const std::string negative = fmt::format("-(0|[1-9][0-9]*){}", kFraction);
  const std::string strictly_negative = fmt::format("-([1-9][0-9]*{}|0{})", kFraction, kNonZeroFraction);
  if (b >= 0) {
    const uint64_t u = static_cast<uint64_t>(b);
    std::string nonneg_part;  // 0 <= x <= b (or < b)
    if (u >= 1) nonneg_part = fmt::format("{}{}", NonNegative(0, u - 1), kFraction);
    if (!exclusive) nonneg_part += fmt::format("{}{}(\\.0+)?", nonneg_part.empty() ? "" : "|", u);
    if (nonneg_part.empty()) return strictly_negative;  // x < 0
    return fmt::format("({}|{})", exclusive ? strictly_negative : negative, nonneg_part);
  }
  const uint64_t m = Magnitude(b);  // x <= -m: -x with |x| >= m (> m if exclusive)
  if (!exclusive) return fmt::format("-{}{}", NonNegative(m, std::nullopt), kFraction);
  return fmt::format("-({}{}|{}{})", NonNegative(m + 1, std::nullopt), kFraction, m, kNonZeroFraction);
}

ByteDfa DivisibleDfa(int64_t k) {
  // Classes: 0 every other byte, 1 '-', 2 + d the digit d.
  constexpr size_t kWidth = 12;
  std::array<uint8_t, 256> byte_class{};
  byte_class['-'] = 1;
  for (int d = 0; d <= 9; ++d) byte_class[static_cast<size_t>('0' + d)] = static_cast<uint8_t>(2 + d);
  std::vector<int32_t> table;
  std::vector<char> accepting;
  auto add = [&](bool accepts) {
    table.insert(table.end(), kWidth, ByteDfa::kDead);
    accepting.push_back(accepts ? 1 : 0);
    return static_cast<int32_t>(accepting.size()) - 1;
  };
  auto set = [&](int32_t from, size_t cls, int32_t to) { table[static_cast<size_t>(from) * kWidth + cls] = to; };
  const int32_t start = add(false), minus = add(false), zero = add(true);
  const int32_t rem0 = static_cast<int32_t>(accepting.size());
  for (int64_t r = 0; r < k; ++r) add(r == 0);
  set(start, 1, minus);
  set(start, 2, zero);
  for (int d = 1; d <= 9; ++d) {
    set(start, static_cast<size_t>(2 + d), rem0 + static_cast<int32_t>(d % k));
    set(minus, static_cast<size_t>(2 + d), rem0 + static_cast<int32_t>(d % k));
  }
  for (int64_t r = 0; r < k; ++r) {
    for (int d = 0; d <= 9; ++d) set(rem0 + static_cast<int32_t>(r), static_cast<size_t>(2 + d), rem0 + static_cast<int32_t>((r * 10 + d) % k));
  }
  return PruneDfa(ByteDfa::FromTable(byte_class, kWidth, std::move(table), std::move(accepting), start));
}

StatusOr<LexemeSpec> NumberLexeme(const Json& schema, bool integer, const std::string& pointer,
                                  const GrammarLimits& limits) {
  std::optional<double> lo = NumberKeyword(schema, "minimum"), hi = NumberKeyword(schema, "maximum");
  bool lo_ex = false, hi_ex = false;
  // Draft 4: exclusiveMinimum is a boolean on minimum; later drafts: a bound of its own.
  if (const auto it = schema.find("exclusiveMinimum"); it != schema.end()) {
    if (it->is_boolean()) {
      lo_ex = it->get<bool>() && lo;
    } else if (it->is_number() && (!lo || it->get<double>() >= *lo)) {
      lo = it->get<double>(), lo_ex = true;
    }
  }
  if (const auto it = schema.find("exclusiveMaximum"); it != schema.end()) {
    if (it->is_boolean()) {
      hi_ex = it->get<bool>() && hi;
    } else if (it->is_number() && (!hi || it->get<double>() <= *hi)) {
      hi = it->get<double>(), hi_ex = true;
    }
  }
  // OpenAPI's integer formats (Kubernetes schemas use them; ajv-formats checks them): whole
  // numbers in the type's range (int64 within the bounds below).
  if (const auto f = schema.find("format"); f != schema.end() && (*f == "int32" || *f == "int64")) {
    integer = true;
    const double bound = *f == "int32" ? 2147483648.0 : 9.0e18;
    if (!lo || *lo < -bound) lo = -bound, lo_ex = false;
    if (!hi || *hi > bound - 1) hi = bound - 1, hi_ex = false;
  }
  std::optional<double> multiple = NumberKeyword(schema, "multipleOf");
  constexpr double kLimit = 9.0e18;
  if ((lo && std::fabs(*lo) > kLimit) || (hi && std::fabs(*hi) > kLimit)) {
    return InvalidArgumentError(fmt::format("minimum/maximum at {} beyond 9e18 are not supported", pointer));
  }
  // Whole values only: integers, or numbers that must be multiples of an integer.
  const bool integral_multiple = multiple && *multiple > 0 && *multiple == std::floor(*multiple) && *multiple <= 100000;
  const bool whole = integer || integral_multiple;
  // Bounds rounded inwards to integers (exact for whole values; a subset for numbers).
  std::optional<int64_t> ilo, ihi;
  bool flo_ex = lo_ex, fhi_ex = hi_ex;
  if (lo) {
    const double c = std::ceil(*lo);
    ilo = static_cast<int64_t>(c);
    if (c != *lo) flo_ex = false;  // x >= ceil(lo) implies x > lo
    if (whole && lo_ex && c == *lo) ++*ilo;
  }
  if (hi) {
    const double f = std::floor(*hi);
    ihi = static_cast<int64_t>(f);
    if (f != *hi) fhi_ex = false;
    if (whole && hi_ex && f == *hi) --*ihi;
  }
  if (multiple && *multiple <= 0) return InvalidArgumentError(fmt::format("multipleOf at {} must be positive", pointer));
  if (integer && multiple && !integral_multiple && std::fmod(1.0, *multiple) != 0.0) {
    return InvalidArgumentError(fmt::format("multipleOf {} at {} is not supported for integers", *multiple, pointer));
  }
  if (whole) {
    const std::string range = IntegerRangeRegex(ilo, ihi);
    std::string key = fmt::format("int:{}:{}", range, integral_multiple ? static_cast<int64_t>(*multiple) : 1);
    if (range.empty()) return LexemeSpec{key, ByteDfa{}};
    ASSIGN_OR_RETURN(ByteDfa dfa, CompileRegex(range, RegexOptionsWithin(limits, /*anchored=*/true)));
    if (integral_multiple && *multiple > 1) {
      ASSIGN_OR_RETURN(dfa, IntersectDfa(dfa, DivisibleDfa(static_cast<int64_t>(*multiple)), /*keep_b=*/true, limits.max_regex_states));
    }
    return LexemeSpec{std::move(key), std::move(dfa)};
  }
  std::string base(kNumberRegex);
  if (multiple) {  // 10^-k: at most k decimals
    const double digits = -std::log10(*multiple);
    if (digits < 0 || digits > 20 || std::fabs(digits - std::round(digits)) > 1e-9) {
      return InvalidArgumentError(fmt::format("multipleOf {} at {} is not supported (integers or 10^-k)", *multiple, pointer));
    }
    base = fmt::format("-?(0|[1-9][0-9]*)(\\.[0-9]{{1,{}}})?", static_cast<int>(std::round(digits)));
    if (std::round(digits) == 0) base = kIntegerRegex;
  }
  std::string key = "num:" + base;
  ASSIGN_OR_RETURN(ByteDfa dfa, CompileRegex(base, RegexOptionsWithin(limits, /*anchored=*/true)));
  if (ilo) {
    const std::string r = NumberAtLeastRegex(*ilo, flo_ex);
    ASSIGN_OR_RETURN(ByteDfa b, CompileRegex(r, RegexOptionsWithin(limits, /*anchored=*/true)));
    ASSIGN_OR_RETURN(dfa, IntersectDfa(dfa, b, /*keep_b=*/true, limits.max_regex_states));
    key += "&" + r;
  }
  if (ihi) {
    const std::string r = NumberAtMostRegex(*ihi, fhi_ex);
    ASSIGN_OR_RETURN(ByteDfa b, CompileRegex(r, RegexOptionsWithin(limits, /*anchored=*/true)));
    ASSIGN_OR_RETURN(dfa, IntersectDfa(dfa, b, /*keep_b=*/true, limits.max_regex_states));
    key += "&" + r;
  }
  return LexemeSpec{std::move(key), std::move(dfa)};
}

StatusOr<LexemeSpec> StringLexeme(const Json& schema, const std::string& pointer, bool lenient, const GrammarLimits& limits,
                                  std::vector<std::string>* ignored, const LexGrammar* known) {
  const int64_t min_len = CountOf(schema, "minLength", 0), max_len = CountOf(schema, "maxLength", -1);
  if (max_len >= 0 && max_len < min_len) return LexemeSpec{"str:empty", ByteDfa{}};
  std::string length = max_len < 0 ? fmt::format("[\\s\\S]{{{},}}", min_len)
                                    : fmt::format("[\\s\\S]{{{},{}}}", min_len, max_len);
  std::vector<std::string> patterns;
  if (const auto it = schema.find("pattern"); it != schema.end() && it->is_string()) patterns.push_back(it->get<std::string>());
  if (const auto it = schema.find("$kvserve_patterns"); it != schema.end()) {
    for (const Json& p : *it) patterns.push_back(p.get<std::string>());
  }
  std::vector<std::string> excluded;  // JSON literals of strings `not` excludes
  if (const auto it = schema.find("$kvserve_excluded"); it != schema.end()) {
    for (const Json& v : *it) excluded.push_back(JsonStringLiteral(v.get<std::string>()));
  }
  std::optional<std::string_view> format_regex;
  std::string format_name;
  if (const auto it = schema.find("format"); it != schema.end() && it->is_string()) {
    format_name = it->get<std::string>();
    format_regex = FormatRegex(format_name);
    // A format of the specification that is not enforced is an error; any other name is an
    // annotation, which validators ignore (the specification says so).
    if (!format_regex && IsStandardFormat(format_name)) {
      if (!lenient) return InvalidArgumentError(fmt::format("format \"{}\" at {} is not supported", format_name, pointer));
      ignored->push_back(fmt::format("format \"{}\" at {}", format_name, pointer));
    }
  }
  std::string key = "str:" + length;
  for (const std::string& p : patterns) key += "&p:" + p;
  if (format_regex) key += "&f:" + format_name;
  for (const std::string& x : excluded) key += "&x:" + x;
  if (known && known->FindLexeme(key) >= 0) return LexemeSpec{std::move(key), ByteDfa{}};
  if (patterns.empty() && !format_regex && excluded.empty()) {
    // Only a length: any string, counted by the lexer.
    ASSIGN_OR_RETURN(ByteDfa any, CompileRegex("[\\s\\S]*", RegexOptionsWithin(limits, /*anchored=*/true, /*json_string=*/true)));
    // Minimal, so that every character ends in one state (CodePointBound::open).
    return LexemeSpec{std::move(key), MinimizeDfa(any), min_len, max_len};
  }
  // With a pattern, a format or excluded strings the count is part of the automaton (the
  // intersection's states do not say where a character starts): bounded by kMaxRepeat, longer strings refused.
  if (min_len > kMaxRepeat) {
    return InvalidArgumentError(fmt::format("minLength {} at {} is over {} (with a pattern or format)", min_len,
                                            pointer, kMaxRepeat));
  }
  if (max_len > kMaxRepeat) length = fmt::format("[\\s\\S]{{{},{}}}", min_len, kMaxRepeat);  // a subset
  ASSIGN_OR_RETURN(ByteDfa dfa, CompileRegex(length, RegexOptionsWithin(limits, /*anchored=*/true, /*json_string=*/true)));
  for (const std::string& p : patterns) {
    auto pdfa = CompileRegex(p, RegexOptionsWithin(limits, /*anchored=*/false, /*json_string=*/true));
    if (!pdfa.ok()) {
      return Status(pdfa.status().code(), fmt::format("pattern at {}: {}", pointer, pdfa.status().message()));
    }
    ASSIGN_OR_RETURN(dfa, IntersectDfa(dfa, *pdfa, /*keep_b=*/true, limits.max_regex_states));
  }
  if (format_regex) {
    ASSIGN_OR_RETURN(ByteDfa fdfa, CompileRegex(*format_regex, RegexOptionsWithin(limits, /*anchored=*/true, /*json_string=*/true)));
    ASSIGN_OR_RETURN(dfa, IntersectDfa(dfa, fdfa, /*keep_b=*/true, limits.max_regex_states));
  }
  if (!excluded.empty()) {
    ASSIGN_OR_RETURN(dfa, IntersectDfa(dfa, ChoiceDfa(excluded), /*keep_b=*/false, limits.max_regex_states));
  }
  return LexemeSpec{std::move(key), std::move(dfa)};
}

}  // namespace kvserve::json_schema
