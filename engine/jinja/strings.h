// Python's str methods on UTF-8 text, as templates call them (strip, split, replace, ...).
// Whitespace is Python's (str.isspace: ASCII whitespace, \x1c-\x1f and the Unicode spaces);
// case mapping is ASCII only.
#pragma once

#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::jinja {

// Whether the code point at s[i] is Python whitespace; its length in *len.
bool SpaceAt(std::string_view s, size_t i, size_t* len);

// strip/lstrip/rstrip: `chars` (code points) or whitespace.
std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// split()/rsplit() without a separator; `maxsplit` < 0: no limit.
std::vector<std::string> SplitWhitespace(std::string_view s, int64_t maxsplit, bool from_right);
std::vector<std::string> Split(std::string_view s, std::string_view sep, int64_t maxsplit, bool from_right);
std::vector<std::string> SplitLines(std::string_view s, bool keepends = false);
std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
int64_t CountOccurrences(std::string_view s, std::string_view needle);
std::string AsciiUpper(std::string_view s);
std::string AsciiLower(std::string_view s);
std::string Title(std::string_view s);
std::string Capitalize(std::string_view s);

// Non-empty and every byte passes `pred` (ASCII classes).
inline bool AllOf(std::string_view s, int (*pred)(int)) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!pred(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace kvserve::jinja
