// Private to engine/grammar: the parsed form of a regex (regex.h) and the code point range
// helpers the GBNF parser shares.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvserve::regex_ast {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code points, inclusive
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct Node {
  enum Kind { kClass, kConcat, kAlt, kRepeat, kStart, kEnd };
  Node(Kind k, Ranges r = {}, std::vector<int> children = {}, int lo = 0, int hi = -1)
      : kind(k), ranges(std::move(r)), kids(std::move(children)), min(lo), max(hi) {}
  Kind kind;
  Ranges ranges;            // kClass: sorted, merged, no surrogates
  std::vector<int> kids;    // kConcat, kAlt (empty kConcat: the empty string); kRepeat: one
  int min = 0, max = -1;    // kRepeat; max -1: unbounded
};

// Parses `pattern` into `nodes`; returns the root's index. INVALID_ARGUMENT names what is
// wrong or unsupported, and where.
[[nodiscard]] StatusOr<int> Parse(std::string_view pattern, std::vector<Node>* nodes);

inline bool IsSurrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }
// The code point at text[*at] (*at < text.size()), *at moved past it; nullopt, *at unmoved,
// unless it is well-formed UTF-8 (shortest form, no surrogate, at most U+10FFFF).
std::optional<uint32_t> DecodeUtf8(std::string_view text, size_t* at);

// Every code point (the prefix and suffix of a search).
Ranges AnyCodePoint();
// Sorted, merged, without surrogates (they have no UTF-8 encoding).
Ranges NormalizeRanges(Ranges r);
// Every code point not in `r`, normalized.
Ranges ComplementRanges(const Ranges& r);
// Byte-range sequences that encode exactly the code points [lo, hi] in UTF-8.
using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;
void Utf8Sequences(uint32_t lo, uint32_t hi, std::vector<ByteSeq>* out);

// Rewrites every class below `root` to the JSON encodings of its code points and returns a
// node for the JSON string literal (quotes included) of what `root` matches (regex.h's
// RegexOptions::json_string).
int JsonStringOf(int root, std::vector<Node>* nodes);

}  // namespace kvserve::regex_ast

namespace kvserve {
struct ByteDfa;
// Keeps the states of `dfa` that reach an accepting state (from `dfa.start`), renumbered;
// start kDead when none.
ByteDfa PruneDfa(ByteDfa dfa);
}  // namespace kvserve
