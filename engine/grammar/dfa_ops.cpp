// Operations on byte automata (regex.h): pruning, intersection and difference, leading JSON
// whitespace, and the JSON string encoding of a regex's classes.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "engine/grammar/regex.h"
#include "engine/grammar/regex_ast.h"

namespace kvserve {

ByteDfa PruneDfa(ByteDfa dfa) {
  const size_t n = dfa.next.size();
  std::vector<std::vector<int32_t>> back(n);
  for (size_t s = 0; s < n; ++s) {
    for (int32_t t : dfa.next[s]) {
      if (t >= 0) back[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
    }
  }
  std::vector<char> live(n, 0);
  std::vector<int32_t> stack;
  for (size_t s = 0; s < n; ++s) {
    if (dfa.accepting[s]) live[s] = 1, stack.push_back(static_cast<int32_t>(s));
  }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : back[static_cast<size_t>(s)]) {
      if (!live[static_cast<size_t>(p)]) live[static_cast<size_t>(p)] = 1, stack.push_back(p);
    }
  }
  std::vector<int32_t> remap(n, ByteDfa::kDead);
  ByteDfa out;
  for (size_t s = 0; s < n; ++s) {
    if (live[s]) remap[s] = static_cast<int32_t>(out.accepting.size()), out.accepting.push_back(dfa.accepting[s]);
  }
  for (size_t s = 0; s < n; ++s) {
    if (!live[s]) continue;
    std::array<int32_t, 256> row;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.next[s][static_cast<size_t>(b)];
      row[static_cast<size_t>(b)] = t < 0 ? ByteDfa::kDead : remap[static_cast<size_t>(t)];
    }
    out.next.push_back(row);
  }
  out.start = dfa.start < 0 ? ByteDfa::kDead : remap[static_cast<size_t>(dfa.start)];
  return out;
}

ByteDfa MinimizeDfa(const ByteDfa& dfa) {
  // Moore's refinement: states are equal until a byte leads them to different classes.
  const size_t n = dfa.next.size();
  std::vector<int32_t> cls(n);
  for (size_t s = 0; s < n; ++s) cls[s] = dfa.accepting[s] ? 1 : 0;
  for (size_t classes = 0;;) {
    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<int32_t> next_cls(n);
    for (size_t s = 0; s < n; ++s) {
      std::vector<int32_t> signature = {cls[s]};
      for (int32_t t : dfa.next[s]) signature.push_back(t < 0 ? -1 : cls[static_cast<size_t>(t)]);
      next_cls[s] = ids.try_emplace(std::move(signature), static_cast<int32_t>(ids.size())).first->second;
    }
    cls.swap(next_cls);
    if (ids.size() == classes) break;
    classes = ids.size();
  }
  ByteDfa out;
  const int32_t count = n == 0 ? 0 : *std::max_element(cls.begin(), cls.end()) + 1;
  out.next.resize(static_cast<size_t>(count));
  out.accepting.assign(static_cast<size_t>(count), 0);
  for (size_t s = 0; s < n; ++s) {
    const size_t c = static_cast<size_t>(cls[s]);
    out.accepting[c] = dfa.accepting[s];
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.next[s][static_cast<size_t>(b)];
      out.next[c][static_cast<size_t>(b)] = t < 0 ? ByteDfa::kDead : cls[static_cast<size_t>(t)];
    }
  }
  out.start = dfa.start < 0 ? ByteDfa::kDead : cls[static_cast<size_t>(dfa.start)];
  return out;
}

StatusOr<ByteDfa> IntersectDfa(const ByteDfa& a, const ByteDfa& b, bool keep_b, int max_states) {
  ByteDfa out;
  if (a.start < 0 || (keep_b && b.start < 0)) return out;
  // b's dead state stays a (non-accepting) state of the product when b is subtracted.
  std::map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs = {{a.start, b.start}};
  ids[pairs[0]] = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (static_cast<int>(pairs.size()) > max_states) {
      return ResourceExhaustedError(fmt::format("an intersection of automata needs more than {} states", max_states));
    }
    const auto [sa, sb] = pairs[i];
    std::array<int32_t, 256> row;
    row.fill(ByteDfa::kDead);
    std::pair<int32_t, int32_t> last = {ByteDfa::kDead, ByteDfa::kDead};
    int32_t last_id = ByteDfa::kDead;
    for (int c = 0; c < 256; ++c) {
      const int32_t ta = a.next[static_cast<size_t>(sa)][static_cast<size_t>(c)];
      const int32_t tb = b.Step(sb, static_cast<uint8_t>(c));
      if (ta < 0 || (keep_b && tb < 0)) continue;
      if (std::pair{ta, tb} != last) {  // neighbouring bytes mostly go to the same pair
        auto [it, added] = ids.try_emplace({ta, tb}, static_cast<int32_t>(pairs.size()));
        if (added) pairs.push_back({ta, tb});
        last = {ta, tb};
        last_id = it->second;
      }
      row[static_cast<size_t>(c)] = last_id;
    }
    out.next.push_back(row);
    out.accepting.push_back(a.Accepts(sa) && b.Accepts(sb) == keep_b ? 1 : 0);
  }
  out.start = 0;
  return PruneDfa(std::move(out));
}

ByteDfa WithLeadingWhitespace(const ByteDfa& dfa, int max_ws) {
  if (dfa.start < 0 || max_ws == 0) return dfa;
  ByteDfa out = dfa;
  // New states, each behaving as the start for any other byte. Unbounded: one state that loops
  // on whitespace. Bounded by k: the layout of JSON as people and models write it, with no run
  // of blank lines: s_0 (the start) .. s_k have read i spaces or tabs; from s_0 one line break
  // ("\n", or "\r" r then "\n") goes to n_0, and n_0 .. n_k read the indentation after it.
  auto add_state = [&] {
    out.next.push_back(dfa.next[static_cast<size_t>(dfa.start)]);
    out.accepting.push_back(dfa.accepting[static_cast<size_t>(dfa.start)]);
    return out.num_states() - 1;
  };
  if (max_ws < 0) {
    const int32_t loop = add_state();
    for (uint8_t ws : {' ', '\t', '\n', '\r'}) out.next[static_cast<size_t>(loop)][ws] = loop;
    out.start = loop;
    return PruneDfa(std::move(out));
  }
  std::vector<int32_t> spaces, indent;
  for (int i = 0; i <= max_ws; ++i) spaces.push_back(add_state());
  for (int i = 0; i <= max_ws; ++i) indent.push_back(add_state());
  const int32_t cr = out.num_states();  // after "\r": only "\n"
  out.next.emplace_back();
  out.next.back().fill(ByteDfa::kDead);
  out.accepting.push_back(0);
  auto set = [&out](int32_t from, uint8_t byte, int32_t to) { out.next[static_cast<size_t>(from)][byte] = to; };
  for (int i = 0; i <= max_ws; ++i) {
    const int32_t next_space = i < max_ws ? spaces[static_cast<size_t>(i) + 1] : ByteDfa::kDead;
    const int32_t next_indent = i < max_ws ? indent[static_cast<size_t>(i) + 1] : ByteDfa::kDead;
    for (uint8_t ws : {' ', '\t'}) {
      set(spaces[static_cast<size_t>(i)], ws, next_space);
      set(indent[static_cast<size_t>(i)], ws, next_indent);
    }
    for (uint8_t br : {'\n', '\r'}) {
      set(spaces[static_cast<size_t>(i)], br, i == 0 ? (br == '\n' ? indent[0] : cr) : ByteDfa::kDead);
      set(indent[static_cast<size_t>(i)], br, ByteDfa::kDead);
    }
  }
  set(cr, '\n', indent[0]);
  out.start = spaces[0];
  return PruneDfa(std::move(out));
}

std::string JsonStringLiteral(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

namespace regex_ast {
namespace {

int AddNode(std::vector<Node>* nodes, Node n) {
  nodes->push_back(std::move(n));
  return static_cast<int>(nodes->size()) - 1;
}

int ByteClass(std::vector<Node>* nodes, std::string_view chars) {
  Ranges r;
  for (char c : chars) r.push_back({static_cast<uint8_t>(c), static_cast<uint8_t>(c)});
  return AddNode(nodes, {Node::kClass, NormalizeRanges(std::move(r))});
}

// The ways JSON writes code point `c` (< 0x80) when it must or may be escaped.
int EscapesOf(uint32_t c, std::vector<Node>* nodes, bool unicode) {
  std::vector<int> alts;
  auto literal = [&](std::string_view s) {
    std::vector<int> kids;
    for (char ch : s) kids.push_back(ByteClass(nodes, std::string_view(&ch, 1)));
    alts.push_back(AddNode(nodes, {Node::kConcat, {}, kids}));
  };
  static constexpr std::string_view kShort = "\"\\/\b\f\n\r\t";
  static constexpr std::string_view kLetter = "\"\\/bfnrt";
  if (const size_t i = kShort.find(static_cast<char>(c)); i != std::string_view::npos) {
    literal(std::string{'\\', kLetter[i]});
  }
  if (c < 0x20 && unicode) {  // \u00XX, hex digits in either case
    const std::string hex = fmt::format("{:02x}", c);
    std::vector<int> kids = {ByteClass(nodes, "\\"), ByteClass(nodes, "u"), ByteClass(nodes, "0"), ByteClass(nodes, "0")};
    for (char h : hex) kids.push_back(ByteClass(nodes, std::string{h, static_cast<char>(std::toupper(h))}));
    alts.push_back(AddNode(nodes, {Node::kConcat, {}, kids}));
  }
  return AddNode(nodes, {Node::kAlt, {}, alts});
}

}  // namespace

int JsonStringOf(int root, std::vector<Node>* nodes) {
  // Classes reachable from `root` (anchors are gone by now).
  std::vector<char> seen(nodes->size(), 0);
  std::vector<int> stack = {root}, classes;
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = 1;
    if ((*nodes)[static_cast<size_t>(id)].kind == Node::kClass) classes.push_back(id);
    const std::vector<int> kids = (*nodes)[static_cast<size_t>(id)].kids;
    stack.insert(stack.end(), kids.begin(), kids.end());
  }
  const Ranges must_escape = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  const Ranges raw_ok = ComplementRanges(must_escape);
  for (int id : classes) {
    const Ranges ranges = (*nodes)[static_cast<size_t>(id)].ranges;
    Ranges raw;
    std::vector<uint32_t> escaped;
    for (auto [lo, hi] : ranges) {
      for (auto [rlo, rhi] : raw_ok) {
        if (std::max(lo, rlo) <= std::min(hi, rhi)) raw.push_back({std::max(lo, rlo), std::min(hi, rhi)});
      }
      for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x7F); ++c) {
        if (c < 0x20 || c == '"' || c == '\\' || c == '/') escaped.push_back(c);
      }
    }
    std::vector<int> alts = {AddNode(nodes, {Node::kClass, NormalizeRanges(std::move(raw))})};
    // Every control character: one \u00XX branch for all (a far smaller automaton).
    const bool all_controls = std::count_if(escaped.begin(), escaped.end(), [](uint32_t c) { return c < 0x20; }) == 0x20;
    if (all_controls) {
      alts.push_back(AddNode(nodes, {Node::kConcat, {}, {ByteClass(nodes, "\\"), ByteClass(nodes, "u"), ByteClass(nodes, "0"),
                                                         ByteClass(nodes, "0"), ByteClass(nodes, "01"),
                                                         ByteClass(nodes, "0123456789abcdefABCDEF")}}));
    }
    for (uint32_t c : escaped) alts.push_back(EscapesOf(c, nodes, /*unicode=*/!all_controls));
    (*nodes)[static_cast<size_t>(id)] = Node(Node::kAlt, {}, std::move(alts));
  }
  const int quote_in = ByteClass(nodes, "\""), quote_out = ByteClass(nodes, "\"");
  return AddNode(nodes, {Node::kConcat, {}, {quote_in, root, quote_out}});
}

}  // namespace regex_ast
}  // namespace kvserve
