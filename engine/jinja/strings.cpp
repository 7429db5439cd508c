// Python's str methods on UTF-8 text (see strings.h).
#include "engine/jinja/strings.h"

#include "engine/jinja/utf8.h"

namespace kvserve::jinja {

bool SpaceAt(std::string_view s, size_t i, size_t* len) {
  const uint32_t cp = DecodeCodePoint(s, i, len);
  if (cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1c && cp <= 0x1f)) return true;
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

namespace {

// The code points of `s` as byte ranges [begin, end).
std::vector<std::pair<size_t, size_t>> CodePoints(std::string_view s) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    DecodeCodePoint(s, i, &len);
    out.emplace_back(i, i + len);
    i += len;
  }
  return out;
}

}  // namespace

std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto cps = CodePoints(s);
  auto strippable = [&](size_t k) {
    const std::string_view cp = s.substr(cps[k].first, cps[k].second - cps[k].first);
    if (!chars) {
      size_t len = 0;
      return SpaceAt(s, cps[k].first, &len);
    }
    for (const auto& [b, e] : CodePoints(*chars)) {
      if (std::string_view(*chars).substr(b, e - b) == cp) return true;
    }
    return false;
  };
  size_t first = 0, last = cps.size();
  if (left) {
    while (first < last && strippable(first)) ++first;
  }
  if (right) {
    while (last > first && strippable(last - 1)) --last;
  }
  if (first == last) return "";
  return std::string(s.substr(cps[first].first, cps[last - 1].second - cps[first].first));
}

std::vector<std::string> SplitWhitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  // Words as byte ranges, then the limit applied from the chosen end.
  std::vector<std::pair<size_t, size_t>> words;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 1;
    if (SpaceAt(s, i, &len)) {
      i += len;
      continue;
    }
    const size_t start = i;
    while (i < s.size() && !SpaceAt(s, i, &len)) i += len;
    words.emplace_back(start, i);
  }
  std::vector<std::string> out;
  if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
    for (const auto& [b, e] : words) out.emplace_back(s.substr(b, e - b));
    return out;
  }
  const auto m = static_cast<size_t>(maxsplit);
  if (!from_right) {
    for (size_t k = 0; k < m; ++k) out.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
    out.emplace_back(s.substr(words[m].first));  // the rest, trailing whitespace kept (Python's)
    return out;
  }
  const size_t keep = words.size() - m;
  out.emplace_back(s.substr(0, words[keep - 1].second));  // leading whitespace kept (Python's)
  for (size_t k = keep; k < words.size(); ++k) out.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
  return out;
}

std::vector<std::string> Split(std::string_view s, std::string_view sep, int64_t maxsplit, bool from_right) {
  std::vector<size_t> cuts;
  for (size_t at = s.find(sep); at != std::string_view::npos; at = s.find(sep, at + sep.size())) cuts.push_back(at);
  if (maxsplit >= 0 && cuts.size() > static_cast<size_t>(maxsplit)) {
    if (from_right) {
      // rsplit finds separators from the right; overlapping ones resolve the other way.
      std::vector<size_t> right;
      for (size_t end = s.size(); right.size() < static_cast<size_t>(maxsplit);) {
        if (end < sep.size()) break;
        const size_t at = s.rfind(sep, end - sep.size());
        if (at == std::string_view::npos) break;
        right.insert(right.begin(), at);
        end = at;
      }
      cuts = right;
    } else {
      cuts.resize(static_cast<size_t>(maxsplit));
    }
  }
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t at : cuts) {
    out.emplace_back(s.substr(from, at - from));
    from = at + sep.size();
  }
  out.emplace_back(s.substr(from));
  return out;
}

std::vector<std::string> SplitLines(std::string_view s, bool keepends) {
  // Python's line boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029.
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const uint32_t cp = DecodeCodePoint(s, i, &len);
    const bool boundary = cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || (cp >= 0x1c && cp <= 0x1e) ||
                          cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!boundary) {
      i += len;
      continue;
    }
    if (cp == '\r' && i + 1 < s.size() && s[i + 1] == '\n') len = 2;
    out.emplace_back(s.substr(start, (keepends ? i + len : i) - start));
    i += len;
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    int64_t n = 0;
    for (const auto& [b, e] : CodePoints(s)) {
      if (count < 0 || n < count) out += to, ++n;
      out += s.substr(b, e - b);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t at = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t next = s.find(from, at);
    if (next == std::string_view::npos) break;
    out += s.substr(at, next - at);
    out += to;
    at = next + from.size();
    ++done;
  }
  out += s.substr(at);
  return out;
}

int64_t CountOccurrences(std::string_view s, std::string_view needle) {
  if (needle.empty()) return static_cast<int64_t>(CodePoints(s).size()) + 1;
  int64_t n = 0;
  for (size_t at = s.find(needle); at != std::string_view::npos; at = s.find(needle, at + needle.size())) ++n;
  return n;
}

std::string AsciiUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(previous_cased ? std::tolower(u) : std::toupper(u));
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return out;
}

std::string Capitalize(std::string_view s) {
  std::string out = AsciiLower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

}  // namespace kvserve::jinja
