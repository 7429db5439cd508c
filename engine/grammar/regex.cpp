// Regex -> AST (regex_parser.cpp) -> Thompson NFA over bytes
// (code point ranges split into UTF-8 byte-range sequences) -> DFA by subset construction,
// dead ends pruned. See regex.h.
#include "engine/grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/grammar/regex_ast.h"

namespace kvserve {
namespace {

using regex_ast::Node;
using regex_ast::Ranges;

// ---- NFA -------------------------------------------------------------------------------------

struct Nfa {
  struct Edge {
    uint8_t lo, hi;
    int to;
  };
  std::vector<std::vector<Edge>> edges;
  std::vector<std::vector<int>> eps;
  int NewState() {
    edges.emplace_back();
    eps.emplace_back();
    return static_cast<int>(edges.size()) - 1;
  }
};

class NfaBuilder {
 public:
  NfaBuilder(const std::vector<Node>& nodes, Nfa* nfa, int max_states) : nodes_(nodes), nfa_(nfa), max_states_(max_states) {}

  // Past the state limit: what Build returned since is a stub and the NFA is to be dropped.
  bool exceeded() const { return static_cast<int64_t>(nfa_->edges.size()) > max_states_; }

  // Adds node `id` between new states; returns {entry, exit}. Recursion: one level per group,
  // quantifier or class of the pattern (regex_parser.cpp bounds those).
  std::pair<int, int> Build(int id) {
    if (exceeded()) return {0, 0};  // stop at once: copies of copies would build on
    const Node& n = nodes_[static_cast<size_t>(id)];
    switch (n.kind) {
      case Node::kClass: {
        const int in = nfa_->NewState(), out = nfa_->NewState();
        std::vector<regex_ast::ByteSeq> seqs;
        for (auto [lo, hi] : n.ranges) regex_ast::Utf8Sequences(lo, hi, &seqs);
        for (const auto& seq : seqs) {
          int at = in;
          for (size_t i = 0; i < seq.size(); ++i) {
            const int to = i + 1 == seq.size() ? out : nfa_->NewState();
            nfa_->edges[static_cast<size_t>(at)].push_back({seq[i].first, seq[i].second, to});
            at = to;
          }
        }
        return {in, out};
      }
      case Node::kConcat: {
        if (n.kids.empty()) return Empty();
        std::pair<int, int> whole = Build(n.kids[0]);
        for (size_t i = 1; i < n.kids.size(); ++i) {
          const std::pair<int, int> next = Build(n.kids[i]);
          nfa_->eps[static_cast<size_t>(whole.second)].push_back(next.first);
          whole.second = next.second;
        }
        return whole;
      }
      case Node::kAlt: {
        const int in = nfa_->NewState(), out = nfa_->NewState();
        for (int kid : n.kids) {
          const std::pair<int, int> k = Build(kid);
          nfa_->eps[static_cast<size_t>(in)].push_back(k.first);
          nfa_->eps[static_cast<size_t>(k.second)].push_back(out);
        }
        return {in, out};
      }
      case Node::kRepeat: {
        std::pair<int, int> whole = Empty();
        for (int i = 0; i < n.min; ++i) whole = Then(whole, Build(n.kids[0]));
        if (n.max < 0) {
          const std::pair<int, int> loop = Build(n.kids[0]);
          const int hub = nfa_->NewState();
          nfa_->eps[static_cast<size_t>(hub)].push_back(loop.first);
          nfa_->eps[static_cast<size_t>(loop.second)].push_back(hub);
          return Then(whole, {hub, hub});
        }
        // Optional copies that skip straight to the end (x(x(x)?)?)? rather than x?x?x?: the
        // closure of a position then holds one copy, not all that follow.
        if (n.max == n.min) return whole;
        const int exit = nfa_->NewState();
        for (int i = n.min; i < n.max; ++i) {
          const std::pair<int, int> opt = Build(n.kids[0]);
          nfa_->eps[static_cast<size_t>(whole.second)].push_back(exit);
          whole = Then(whole, opt);
        }
        nfa_->eps[static_cast<size_t>(whole.second)].push_back(exit);
        return {whole.first, exit};
      }
      case Node::kStart:
      case Node::kEnd:
        return Empty();  // only at the edges, where CompileRegex placed them
    }
    return Empty();
  }

  std::pair<int, int> Empty() {
    const int s = nfa_->NewState();
    return {s, s};
  }
  std::pair<int, int> Then(std::pair<int, int> a, std::pair<int, int> b) {
    nfa_->eps[static_cast<size_t>(a.second)].push_back(b.first);
    return {a.first, b.second};
  }

 private:
  const std::vector<Node>& nodes_;
  Nfa* nfa_;
  int64_t max_states_;
};

}  // namespace

namespace regex_ast {

// Byte-range sequences that encode exactly the code points [lo, hi] in UTF-8.
void Utf8Sequences(uint32_t lo, uint32_t hi, std::vector<ByteSeq>* out) {
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && hi > max) {
      Utf8Sequences(lo, max, out);
      Utf8Sequences(max + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out->push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Sequences(lo, lo | m, out);
        Utf8Sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Sequences(lo, (hi & ~m) - 1, out);
        Utf8Sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [](uint32_t cp, uint8_t* b) {
    if (cp <= 0x7FF) {
      b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      return 2;
    }
    if (cp <= 0xFFFF) {
      b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      return 3;
    }
    b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
    b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 4;
  };
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out->push_back(std::move(seq));
}

}  // namespace regex_ast

namespace {

// Adds to `set` what its states reach by epsilon moves, sorted. `mark` (one entry per NFA
// state, reused across calls) holds the call's stamp for the states seen.
void Closure(const Nfa& nfa, std::vector<int>* set, std::vector<uint32_t>* mark, uint32_t stamp) {
  std::vector<int> stack = *set;
  for (int s : *set) (*mark)[static_cast<size_t>(s)] = stamp;
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    for (int t : nfa.eps[static_cast<size_t>(s)]) {
      if ((*mark)[static_cast<size_t>(t)] != stamp) {
        (*mark)[static_cast<size_t>(t)] = stamp;
        set->push_back(t);
        stack.push_back(t);
      }
    }
  }
  std::sort(set->begin(), set->end());
}

// Subset construction from `start` to `accept`, then dead ends pruned.
StatusOr<ByteDfa> Determinize(const Nfa& nfa, int start, int accept, const RegexOptions& options) {
  const int max_states = options.max_states;
  struct SetHash {
    size_t operator()(const std::vector<int>& v) const {
      size_t h = v.size();
      for (int x : v) h = h * 1000003u ^ static_cast<size_t>(x);
      return h;
    }
  };
  // Each set is held once, as its key (the keys of an unordered_map do not move).
  std::unordered_map<std::vector<int>, int32_t, SetHash> ids;
  std::vector<const std::vector<int>*> sets;
  // The bytes split into intervals on which every edge agrees: the automaton's classes (one
  // closure per class and set instead of per byte).
  std::vector<int> cuts = {0, 256};
  for (const auto& edges : nfa.edges) {
    for (const Nfa::Edge& e : edges) cuts.push_back(e.lo), cuts.push_back(e.hi + 1);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  const size_t num_classes = cuts.size() - 1;
  std::array<uint8_t, 256> byte_class;
  for (size_t c = 0; c < num_classes; ++c) {
    std::fill(byte_class.begin() + cuts[c], byte_class.begin() + cuts[c + 1], static_cast<uint8_t>(c));
  }
  std::vector<int32_t> table;
  std::vector<char> accepting;
  std::vector<uint32_t> mark(nfa.eps.size(), 0);
  uint32_t stamp = 0;
  std::vector<int> first = {start};
  Closure(nfa, &first, &mark, ++stamp);
  sets.push_back(&ids.try_emplace(std::move(first), 0).first->first);
  int64_t work = 0;  // NFA states of every closure taken (each is visited once per closure)
  for (size_t d = 0; d < sets.size(); ++d) {
    if (static_cast<int>(sets.size()) > max_states) {
      return ResourceExhaustedError(fmt::format("the regex needs more than {} automaton states", max_states));
    }
    const std::vector<int>& set = *sets[d];
    // The classes split further into intervals on which this set's edges agree (each class
    // lies in one): one closure per interval.
    std::vector<int> local = {0, 256};
    for (int s : set) {
      for (const Nfa::Edge& e : nfa.edges[static_cast<size_t>(s)]) local.push_back(e.lo), local.push_back(e.hi + 1);
    }
    std::sort(local.begin(), local.end());
    local.erase(std::unique(local.begin(), local.end()), local.end());
    std::vector<std::vector<int>> targets(local.size() - 1);
    for (int s : set) {
      for (const Nfa::Edge& e : nfa.edges[static_cast<size_t>(s)]) {
        const size_t from = static_cast<size_t>(std::lower_bound(local.begin(), local.end(), int{e.lo}) - local.begin());
        for (size_t c = from; local[c] <= e.hi; ++c) targets[c].push_back(e.to);
      }
    }
    const size_t row = table.size();
    table.resize(row + num_classes, ByteDfa::kDead);
    for (size_t c = 0; c + 1 < local.size(); ++c) {
      std::vector<int>& t = targets[c];
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      Closure(nfa, &t, &mark, ++stamp);
      work += static_cast<int64_t>(t.size());
      if (work > options.max_subset_work) {
        return ResourceExhaustedError("the regex's automaton is too large to build (its subset construction)");
      }
      auto [it, added] = ids.try_emplace(std::move(t), static_cast<int32_t>(sets.size()));
      if (added) sets.push_back(&it->first);
      for (size_t k = byte_class[static_cast<size_t>(local[c])]; k <= byte_class[static_cast<size_t>(local[c + 1] - 1)]; ++k) {
        table[row + k] = it->second;
      }
    }
    accepting.push_back(std::binary_search(set.begin(), set.end(), accept) ? 1 : 0);
  }
  return PruneDfa(ByteDfa::FromTable(byte_class, static_cast<int32_t>(num_classes), std::move(table),
                                     std::move(accepting), 0));
}

}  // namespace

StatusOr<ByteDfa> CompileRegex(std::string_view pattern, const RegexOptions& options) {
  std::vector<Node> nodes;
  ASSIGN_OR_RETURN(int root, regex_ast::Parse(pattern, &nodes));
  // Anchors: only at the edges of the pattern or of a top-level alternative. An unanchored
  // edge of a search gets "any code points" there.
  std::vector<int> alts = nodes[static_cast<size_t>(root)].kind == Node::kAlt ? nodes[static_cast<size_t>(root)].kids
                                                                               : std::vector<int>{root};
  const int any = static_cast<int>(nodes.size());
  nodes.push_back({Node::kClass, regex_ast::AnyCodePoint()});
  const int any_star = static_cast<int>(nodes.size());
  nodes.push_back({Node::kRepeat, {}, {any}, 0, -1});
  std::vector<int> wrapped;
  for (int alt : alts) {
    std::vector<int> items = nodes[static_cast<size_t>(alt)].kind == Node::kConcat ? nodes[static_cast<size_t>(alt)].kids
                                                                                   : std::vector<int>{alt};
    bool start = false, end = false;
    while (!items.empty() && nodes[static_cast<size_t>(items.front())].kind == Node::kStart) {
      start = true;
      items.erase(items.begin());
    }
    while (!items.empty() && nodes[static_cast<size_t>(items.back())].kind == Node::kEnd) {
      end = true;
      items.pop_back();
    }
    if (!options.anchored && !start) items.insert(items.begin(), any_star);
    if (!options.anchored && !end) items.push_back(any_star);
    wrapped.push_back(static_cast<int>(nodes.size()));
    nodes.push_back({Node::kConcat, {}, items});
  }
  // Any anchor left is inside the pattern.
  std::vector<char> reachable(nodes.size(), 0);
  std::vector<int> stack = wrapped;
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (reachable[static_cast<size_t>(id)]) continue;
    reachable[static_cast<size_t>(id)] = 1;
    const Node& n = nodes[static_cast<size_t>(id)];
    if (n.kind == Node::kStart || n.kind == Node::kEnd) {
      return InvalidArgumentError(
          fmt::format("regex /{}/: ^ and $ are supported only at the start and end", Abbreviated(pattern)));
    }
    stack.insert(stack.end(), n.kids.begin(), n.kids.end());
  }
  int top = wrapped.size() == 1 ? wrapped[0] : static_cast<int>(nodes.size());
  if (wrapped.size() > 1) nodes.push_back({Node::kAlt, {}, wrapped});
  if (options.json_string) top = regex_ast::JsonStringOf(top, &nodes);

  Nfa nfa;
  NfaBuilder builder(nodes, &nfa, options.max_nfa_states);
  const auto [in, out] = builder.Build(top);
  if (builder.exceeded()) {
    return ResourceExhaustedError(
        fmt::format("regex /{}/ is too large to compile (over {} NFA states)", Abbreviated(pattern), options.max_nfa_states));
  }
  return Determinize(nfa, in, out, options);
}

Status CheckChoices(std::span<const std::string> choices, std::string_view what, const GrammarLimits& limits) {
  size_t bytes = 0;
  for (const std::string& c : choices) bytes += c.size();
  if (choices.size() > limits.max_choice_strings || bytes > limits.max_choice_bytes) {
    return InvalidArgumentError(fmt::format("{} has {} strings of {} bytes in all; at most {} strings and {} bytes", what,
                                            choices.size(), bytes, limits.max_choice_strings, limits.max_choice_bytes));
  }
  return OkStatus();
}

ByteDfa ChoiceDfa(std::span<const std::string> choices) {
  // A trie of the choices is already deterministic. Its classes: each byte the choices use,
  // and every other byte (dead everywhere).
  std::array<int32_t, 256> used{};
  int32_t num_classes = 1;
  for (const std::string& c : choices) {
    for (char ch : c) {
      int32_t& cls = used[static_cast<uint8_t>(ch)];
      if (cls == 0) cls = num_classes++;
    }
  }
  std::array<uint8_t, 256> byte_class;
  for (int b = 0; b < 256; ++b) {  // all 256 bytes used: one class each
    byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(num_classes > 256 ? b : used[static_cast<size_t>(b)]);
  }
  num_classes = std::min(num_classes, 256);
  const auto width = static_cast<size_t>(num_classes);
  std::vector<int32_t> table;
  std::vector<char> accepting;
  auto add_state = [&] {
    table.insert(table.end(), width, ByteDfa::kDead);
    accepting.push_back(0);
    return static_cast<int32_t>(accepting.size()) - 1;
  };
  const int32_t start = add_state();
  for (const std::string& c : choices) {
    int32_t at = start;
    for (char ch : c) {
      const size_t cell = static_cast<size_t>(at) * width + byte_class[static_cast<uint8_t>(ch)];
      if (table[cell] < 0) {
        const int32_t fresh = add_state();  // may move the table
        table[cell] = fresh;
      }
      at = table[cell];
    }
    accepting[static_cast<size_t>(at)] = 1;
  }
  return ByteDfa::FromTable(byte_class, num_classes, std::move(table), std::move(accepting),
                            choices.empty() ? ByteDfa::kDead : start);
}

}  // namespace kvserve
