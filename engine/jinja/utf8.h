// UTF-8 helpers of the Jinja engine: Python counts, indexes and slices strings in code points.
// Invalid bytes count as one code point each (U+FFFD when decoded).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::jinja {

// The code point at s[i] and its length in bytes (*len >= 1).
inline uint32_t DecodeCodePoint(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  int n = 0;
  uint32_t cp = 0;
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  if ((c & 0xe0) == 0xc0) n = 1, cp = c & 0x1f;
  else if ((c & 0xf0) == 0xe0) n = 2, cp = c & 0x0f;
  else if ((c & 0xf8) == 0xf0) n = 3, cp = c & 0x07;
  else {
    *len = 1;
    return 0xfffd;
  }
  if (i + static_cast<size_t>(n) >= s.size()) {
    *len = 1;
    return 0xfffd;
  }
  for (int k = 1; k <= n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((b & 0xc0) != 0x80) {
      *len = 1;
      return 0xfffd;
    }
    cp = (cp << 6) | (b & 0x3f);
  }
  *len = static_cast<size_t>(n) + 1;
  return cp;
}

inline void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// The byte offset of every code point of `s`, and s.size() last.
inline std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    size_t len = 1;
    DecodeCodePoint(s, i, &len);
    i += len;
  }
  out.push_back(s.size());
  return out;
}

inline int64_t CodePointCount(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    DecodeCodePoint(s, i, &len);
    i += len;
    ++n;
  }
  return n;
}

}  // namespace kvserve::jinja
