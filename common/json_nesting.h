// JsonNesting: the nesting depth of JSON text read one byte at a time, strings (and their
// escapes) skipped. The one scanner for the HTTP codec's depth limit (before a body is parsed)
// and the tool-call parser (where a streamed call's arguments end).
#pragma once

#include <algorithm>
#include <string_view>

namespace kvserve {

struct JsonNesting {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;

  // The depth after `ch`.
  int Step(char ch) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      ++depth;
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
    return depth;
  }
};

// The deepest nesting of arrays and objects in `text`; stops counting once over `limit`.
inline int JsonDepth(std::string_view text, int limit) {
  JsonNesting n;
  int deepest = 0;
  for (char c : text) {
    deepest = std::max(deepest, n.Step(c));
    if (deepest > limit) break;
  }
  return deepest;
}

}  // namespace kvserve
