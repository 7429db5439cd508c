// Operations on byte automata (regex.h): pruning, intersection and difference, JSON's
// whitespace layout, and the JSON string encoding of a regex's classes.
#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/grammar/regex.h"
#include "engine/grammar/regex_ast.h"

namespace kvserve {

int32_t ByteDfa::Walk(int32_t state, std::string_view bytes) const {
  for (char c : bytes) {
    if (state < 0) return kDead;
    state = Step(state, static_cast<uint8_t>(c));
  }
  return state;
}

ByteDfa ByteDfa::FromRows(std::span<const Row> rows, std::vector<char> accepting, int32_t start) {
  std::array<uint8_t, 256> identity;
  for (int b = 0; b < 256; ++b) identity[static_cast<size_t>(b)] = static_cast<uint8_t>(b);
  std::vector<int32_t> table;
  table.reserve(rows.size() * 256);
  for (const Row& row : rows) table.insert(table.end(), row.begin(), row.end());
  return FromTable(identity, 256, std::move(table), std::move(accepting), start);
}

ByteDfa ByteDfa::FromTable(const std::array<uint8_t, 256>& byte_class, int32_t num_classes, std::vector<int32_t> table,
                           std::vector<char> accepting, int32_t start) {
  const size_t n = accepting.size(), width = static_cast<size_t>(num_classes);
  auto same_column = [&](size_t a, size_t b) {
    for (size_t s = 0; s < n; ++s) {
      if (table[s * width + a] != table[s * width + b]) return false;
    }
    return true;
  };
  // Columns by hash, then compared; classes renumbered in the order of their first byte.
  std::vector<int32_t> renumber(width, -1);
  std::vector<size_t> kept;  // [new class] its column in `table`
  std::unordered_map<uint64_t, std::vector<int32_t>> by_hash;
  ByteDfa out;
  for (int b = 0; b < 256; ++b) {
    const size_t c = byte_class[static_cast<size_t>(b)];
    if (renumber[c] < 0) {
      uint64_t h = 0x9e3779b97f4a7c15ull;
      for (size_t s = 0; s < n; ++s) h = (h ^ static_cast<uint32_t>(table[s * width + c])) * 0x100000001b3ull;
      std::vector<int32_t>& candidates = by_hash[h];
      for (int32_t k : candidates) {
        if (same_column(kept[static_cast<size_t>(k)], c)) renumber[c] = k;
      }
      if (renumber[c] < 0) {
        renumber[c] = static_cast<int32_t>(kept.size());
        candidates.push_back(renumber[c]);
        kept.push_back(c);
      }
    }
    out.byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(renumber[c]);
  }
  out.num_classes = static_cast<int32_t>(kept.size());
  if (kept.size() == width && std::is_sorted(kept.begin(), kept.end())) {
    out.table = std::move(table);  // already canonical
  } else {
    out.table.reserve(n * kept.size());
    for (size_t s = 0; s < n; ++s) {
      for (size_t c : kept) out.table.push_back(table[s * width + c]);
    }
  }
  out.accepting = std::move(accepting);
  out.start = start;
  return out;
}

ByteDfa PruneDfa(ByteDfa dfa) {
  const size_t n = static_cast<size_t>(dfa.num_states()), width = static_cast<size_t>(dfa.num_classes);
  std::vector<std::vector<int32_t>> back(n);
  for (size_t s = 0; s < n; ++s) {
    for (size_t c = 0; c < width; ++c) {
      const int32_t t = dfa.table[s * width + c];
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
  std::vector<char> accepting;
  for (size_t s = 0; s < n; ++s) {
    if (live[s]) remap[s] = static_cast<int32_t>(accepting.size()), accepting.push_back(dfa.accepting[s]);
  }
  std::vector<int32_t> table;
  table.reserve(accepting.size() * width);
  for (size_t s = 0; s < n; ++s) {
    if (!live[s]) continue;
    for (size_t c = 0; c < width; ++c) {
      const int32_t t = dfa.table[s * width + c];
      table.push_back(t < 0 ? ByteDfa::kDead : remap[static_cast<size_t>(t)]);
    }
  }
  const int32_t start = dfa.start < 0 ? ByteDfa::kDead : remap[static_cast<size_t>(dfa.start)];
  return ByteDfa::FromTable(dfa.byte_class, dfa.num_classes, std::move(table), std::move(accepting), start);
}

ByteDfa MinimizeDfa(const ByteDfa& dfa) {
  // Moore's refinement: states are equal until a class of bytes leads them to different classes.
  const size_t n = static_cast<size_t>(dfa.num_states()), width = static_cast<size_t>(dfa.num_classes);
  std::vector<int32_t> cls(n);
  for (size_t s = 0; s < n; ++s) cls[s] = dfa.accepting[s] ? 1 : 0;
  for (size_t classes = 0;;) {
    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<int32_t> next_cls(n);
    for (size_t s = 0; s < n; ++s) {
      std::vector<int32_t> signature = {cls[s]};
      for (size_t c = 0; c < width; ++c) {
        const int32_t t = dfa.table[s * width + c];
        signature.push_back(t < 0 ? -1 : cls[static_cast<size_t>(t)]);
      }
      next_cls[s] = ids.try_emplace(std::move(signature), static_cast<int32_t>(ids.size())).first->second;
    }
    cls.swap(next_cls);
    if (ids.size() == classes) break;
    classes = ids.size();
  }
  const int32_t count = n == 0 ? 0 : *std::max_element(cls.begin(), cls.end()) + 1;
  std::vector<int32_t> table(static_cast<size_t>(count) * width);
  std::vector<char> accepting(static_cast<size_t>(count), 0);
  for (size_t s = 0; s < n; ++s) {
    const size_t c = static_cast<size_t>(cls[s]);
    accepting[c] = dfa.accepting[s];
    for (size_t k = 0; k < width; ++k) {
      const int32_t t = dfa.table[s * width + k];
      table[c * width + k] = t < 0 ? ByteDfa::kDead : cls[static_cast<size_t>(t)];
    }
  }
  const int32_t start = dfa.start < 0 ? ByteDfa::kDead : cls[static_cast<size_t>(dfa.start)];
  return ByteDfa::FromTable(dfa.byte_class, dfa.num_classes, std::move(table), std::move(accepting), start);
}

StatusOr<ByteDfa> IntersectDfa(const ByteDfa& a, const ByteDfa& b, bool keep_b, int max_states) {
  if (a.start < 0 || (keep_b && b.start < 0)) return ByteDfa{};
  // The product's classes: the bytes both automata treat alike, each with a byte standing for it.
  std::array<uint8_t, 256> byte_class;
  std::vector<uint8_t> sample;
  std::map<std::pair<uint8_t, uint8_t>, uint8_t> joint;
  for (int byte = 0; byte < 256; ++byte) {
    const std::pair key{a.byte_class[static_cast<size_t>(byte)], b.byte_class[static_cast<size_t>(byte)]};
    auto [it, added] = joint.try_emplace(key, static_cast<uint8_t>(sample.size()));
    if (added) sample.push_back(static_cast<uint8_t>(byte));
    byte_class[static_cast<size_t>(byte)] = it->second;
  }
  // b's dead state stays a (non-accepting) state of the product when b is subtracted.
  std::map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs = {{a.start, b.start}};
  ids[pairs[0]] = 0;
  std::vector<int32_t> table;
  std::vector<char> accepting;
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (static_cast<int>(pairs.size()) > max_states) {
      return ResourceExhaustedError(fmt::format("an intersection of automata needs more than {} states", max_states));
    }
    const auto [sa, sb] = pairs[i];
    for (uint8_t byte : sample) {
      const int32_t ta = a.Step(sa, byte), tb = b.Step(sb, byte);
      if (ta < 0 || (keep_b && tb < 0)) {
        table.push_back(ByteDfa::kDead);
        continue;
      }
      auto [it, added] = ids.try_emplace({ta, tb}, static_cast<int32_t>(pairs.size()));
      if (added) pairs.push_back({ta, tb});
      table.push_back(it->second);
    }
    accepting.push_back(a.Accepts(sa) && b.Accepts(sb) == keep_b ? 1 : 0);
  }
  return PruneDfa(ByteDfa::FromTable(byte_class, static_cast<int32_t>(sample.size()), std::move(table),
                                     std::move(accepting), 0));
}

ByteDfa WhitespaceLayout(int max_ws) {
  // Classes: 0 any other byte, then space, tab, \n and \r. Unbounded: one state that loops on
  // whitespace. Bounded by k: the layout of JSON as people and models write it, with no run of
  // blank lines: s_0 (the start) .. s_k have read i spaces or tabs; from s_0 one line break
  // ("\n", or "\r" then "\n") goes to n_0, and n_0 .. n_k read the indentation after it.
  constexpr size_t kWidth = 5;
  std::array<uint8_t, 256> byte_class{};
  byte_class[' '] = 1, byte_class['\t'] = 2, byte_class['\n'] = 3, byte_class['\r'] = 4;
  std::vector<int32_t> table;
  std::vector<char> accepting;
  auto add_state = [&](bool accepts) {
    table.insert(table.end(), kWidth, ByteDfa::kDead);
    accepting.push_back(accepts ? 1 : 0);
    return static_cast<int32_t>(accepting.size()) - 1;
  };
  auto set = [&](int32_t from, uint8_t byte, int32_t to) { table[static_cast<size_t>(from) * kWidth + byte_class[byte]] = to; };
  int32_t start = ByteDfa::kDead;
  if (max_ws < 0) {
    start = add_state(true);
    for (uint8_t ws : {' ', '\t', '\n', '\r'}) set(start, ws, start);
  } else {
    std::vector<int32_t> spaces, indent;
    for (int i = 0; i <= max_ws; ++i) spaces.push_back(add_state(true));
    for (int i = 0; max_ws > 0 && i <= max_ws; ++i) indent.push_back(add_state(true));
    if (max_ws > 0) {
      const int32_t cr = add_state(false);  // after "\r": only "\n"
      for (int i = 0; i <= max_ws; ++i) {
        const int32_t next_space = i < max_ws ? spaces[static_cast<size_t>(i) + 1] : ByteDfa::kDead;
        const int32_t next_indent = i < max_ws ? indent[static_cast<size_t>(i) + 1] : ByteDfa::kDead;
        for (uint8_t ws : {' ', '\t'}) {
          set(spaces[static_cast<size_t>(i)], ws, next_space);
          set(indent[static_cast<size_t>(i)], ws, next_indent);
        }
      }
      set(spaces[0], '\n', indent[0]);
      set(spaces[0], '\r', cr);
      set(cr, '\n', indent[0]);
    }
    start = spaces[0];
  }
  return ByteDfa::FromTable(byte_class, kWidth, std::move(table), std::move(accepting), start);
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
