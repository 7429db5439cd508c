#include "engine/history_match.h"

#include <algorithm>
#include <string>
#include <vector>

namespace kvserve {
namespace {

// Symbols 0-255 are bytes; a token without text (BOS, <|im_end|>, ...) is kTextless + its id.
constexpr int32_t kTextless = 256;

bool IsSpace(int32_t symbol) { return symbol == ' ' || symbol == '\n' || symbol == '\t' || symbol == '\r'; }

// A token stream as symbols.
struct Symbols {
  std::vector<int32_t> sym;
  // Per symbol offset 0..sym.size(): the number of tokens before it when it is a token
  // boundary, else -1.
  std::vector<int> tokens_before;
  std::vector<char> generated;  // per symbol: the token it comes from was generated
};

// Symbols of tokens[first, end); `generated` in positions of `tokens`.
Symbols ToSymbols(std::span<const int32_t> tokens, int first, std::span<const TokenRange> generated,
                  const Tokenizer& tokenizer) {
  Symbols s;
  s.tokens_before.push_back(0);
  size_t g = 0;
  for (int pos = first; pos < static_cast<int>(tokens.size()); ++pos) {
    while (g < generated.size() && generated[g].end <= pos) ++g;
    const char gen = g < generated.size() && generated[g].begin <= pos;
    const int32_t token = tokens[static_cast<size_t>(pos)];
    const std::string piece = tokenizer.TokenToPiece(token);
    if (piece.empty()) {
      s.sym.push_back(kTextless + token);
    } else {
      for (unsigned char c : piece) s.sym.push_back(c);
    }
    s.generated.resize(s.sym.size(), gen);
    s.tokens_before.resize(s.sym.size(), -1);
    s.tokens_before.push_back(pos + 1 - first);
  }
  return s;
}

// The generated runs as the client received them: StreamingDetokenizer turned each maximal
// invalid UTF-8 subpart of a reply into one U+FFFD. Token boundaries inside a replaced subpart
// are no boundaries of the text.
Symbols AsReceived(const Symbols& s) {
  Symbols out;
  out.tokens_before.push_back(s.tokens_before[0]);
  const size_t n = s.sym.size();
  auto is_generated_byte = [&](size_t k) { return k < n && s.generated[k] && s.sym[k] < kTextless; };
  for (size_t i = 0; i < n;) {
    size_t len = 1;
    bool replace = false;
    if (is_generated_byte(i) && s.sym[i] >= 0x80) {
      std::string bytes;
      for (size_t k = i; k < i + 4 && is_generated_byte(k); ++k) bytes.push_back(static_cast<char>(s.sym[k]));
      const Utf8Unit unit = NextUtf8Unit(bytes);
      len = unit.length;
      replace = !unit.valid;
    }
    if (replace) {
      for (int32_t b : {0xEF, 0xBF, 0xBD}) {
        out.sym.push_back(b);
        out.generated.push_back(1);
        out.tokens_before.push_back(-1);
      }
      out.tokens_before.back() = s.tokens_before[i + len];
    } else {
      for (size_t k = i; k < i + len; ++k) {
        out.sym.push_back(s.sym[k]);
        out.generated.push_back(s.generated[k]);
        out.tokens_before.push_back(s.tokens_before[k + 1]);
      }
    }
    i += len;
  }
  return out;
}

// Per history symbol: whether whitespace that only one side has may be skipped there. That
// is inside a generated run's leading or trailing whitespace (its start and end included),
// and right after a generated run.
std::vector<char> ReplyEdges(const Symbols& h) {
  const size_t n = h.sym.size();
  std::vector<char> edge(n, 0);
  bool leading = false;  // all symbols of the current run so far are whitespace
  for (size_t i = 0; i < n; ++i) {
    if (!h.generated[i]) {
      edge[i] = i > 0 && h.generated[i - 1];
      leading = false;
      continue;
    }
    if (i == 0 || !h.generated[i - 1]) leading = true;
    edge[i] = leading;
    leading = leading && IsSpace(h.sym[i]);
  }
  bool trailing = false;  // all symbols of the current run from here on are whitespace
  for (size_t i = n; i-- > 0;) {
    if (!h.generated[i]) continue;
    if (i + 1 == n || !h.generated[i + 1]) trailing = true;
    trailing = trailing && IsSpace(h.sym[i]);
    if (trailing) edge[i] = 1;
  }
  return edge;
}

}  // namespace

HistoryReuse MatchHistory(std::span<const int32_t> history, std::span<const TokenRange> generated,
                          std::span<const int32_t> prompt, const Tokenizer& tokenizer) {
  int c0 = 0;
  const int limit = static_cast<int>(std::min(history.size(), prompt.size()));
  while (c0 < limit && history[static_cast<size_t>(c0)] == prompt[static_cast<size_t>(c0)]) ++c0;
  if (c0 == static_cast<int>(history.size())) return {c0, c0};
  // Compare text from the start of the reply the exact prefix ends in (or just after), so
  // its leading whitespace is known.
  for (const TokenRange& r : generated) {
    if (r.begin < c0 && c0 <= r.end) c0 = r.begin;
  }
  const Symbols h = AsReceived(ToSymbols(history, c0, generated, tokenizer));
  const Symbols p = ToSymbols(prompt, c0, {}, tokenizer);
  const std::vector<char> edge = ReplyEdges(h);
  HistoryReuse best{c0, c0};
  size_t i = 0, j = 0;
  while (true) {
    if (h.tokens_before[i] >= 0 && p.tokens_before[j] >= 0) {
      best = {c0 + h.tokens_before[i], c0 + p.tokens_before[j]};
    }
    if (i == h.sym.size() || j == p.sym.size()) break;
    if (h.sym[i] == p.sym[j]) {
      ++i;
      ++j;
    } else if (h.generated[i] && h.sym[i] >= kTextless) {
      ++i;  // a control token the model generated inside its reply: the client never saw it
    } else if (edge[i] && IsSpace(h.sym[i])) {
      ++i;
    } else if (edge[i] && IsSpace(p.sym[j])) {
      ++j;
    } else {
      break;
    }
  }
  return best;
}

}  // namespace kvserve
