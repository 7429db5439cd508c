// CompiledGrammar and GrammarMatcher (see matcher.h).
#include "engine/grammar/matcher.h"

#include <algorithm>
#include <limits>

namespace kvserve {

namespace {

// Two 64-bit running hashes of a sequence of integers (splitmix64's finalizer per value).
struct Hash128 {
  uint64_t a = 0x243f6a8885a308d3ull, b = 0x13198a2e03707344ull;
  static uint64_t Mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  void Add(int64_t v) {
    a = Mix(a ^ static_cast<uint64_t>(v));
    b = Mix(b + static_cast<uint64_t>(v) * 0x9e3779b97f4a7c15ull);
  }
  std::string Bytes() const {
    std::string out(16, '\0');
    for (int i = 0; i < 8; ++i) {
      out[static_cast<size_t>(i)] = static_cast<char>(a >> (8 * i));
      out[static_cast<size_t>(8 + i)] = static_cast<char>(b >> (8 * i));
    }
    return out;
  }
};

}  // namespace

CompiledGrammar::CompiledGrammar(LexGrammar grammar, const TokenTrie* trie, std::shared_ptr<SharedMaskCache> shared,
                                 int64_t max_parser_work_per_token)
    : grammar_(std::move(grammar)),
      trie_(trie),
      max_parser_work_per_token_(max_parser_work_per_token),
      shared_(shared ? std::move(shared) : std::make_shared<SharedMaskCache>()),
      digests_(grammar_.lexemes.size()) {
  std::vector<const ByteDfa*> automata = {&grammar_.whitespace};
  for (const ByteDfa& dfa : grammar_.lexemes) automata.push_back(&dfa);
  for (const ByteDfa* dfa : automata) {
    std::map<std::pair<uint8_t, uint8_t>, uint8_t> meet;
    for (size_t b = 0; b < 256; ++b) {
      byte_class_[b] = meet.try_emplace({byte_class_[b], dfa->byte_class[b]}, static_cast<uint8_t>(meet.size())).first->second;
    }
    num_classes_ = static_cast<int32_t>(meet.size());
  }
}

const std::string& CompiledGrammar::LexemeDigest(int32_t lexeme) {
  std::string& d = digests_[static_cast<size_t>(lexeme)];
  if (!d.empty()) return d;
  const ByteDfa& dfa = grammar_.lexemes[static_cast<size_t>(lexeme)];
  const CodePointBound& bound = grammar_.bounds[static_cast<size_t>(lexeme)];
  Hash128 h;
  for (int64_t v : {int64_t{dfa.num_states()}, int64_t{dfa.start}, int64_t{bound.min}, int64_t{bound.max}, int64_t{bound.open}}) {
    h.Add(v);
  }
  std::vector<const ByteDfa*> automata = {&dfa};
  if (grammar_.leading_ws[static_cast<size_t>(lexeme)]) automata.push_back(&grammar_.whitespace);
  for (const ByteDfa* a : automata) {
    h.Add(a->num_states());
    h.Add(a->start);
    for (uint8_t c : a->byte_class) h.Add(c);
    for (char acc : a->accepting) h.Add(acc);
    for (int32_t t : a->table) h.Add(t);
  }
  d = h.Bytes();
  return d;
}

std::string CompiledGrammar::SharedKey(int32_t state) {
  // A counted lexeme's count matters to a walk only through how far it is from the bounds,
  // up to the longest token: every position of a long string far from them shares one walk.
  const int32_t reach = trie_->max_depth() + 1;
  std::string key;
  auto add = [&key](int32_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  for (auto [lexeme, st] : states_[static_cast<size_t>(state)].pairs) {
    key += LexemeDigest(lexeme);
    const CodePointBound& b = grammar_.bounds[static_cast<size_t>(lexeme)];
    if (!b.active()) {
      add(st);
      continue;
    }
    const int32_t n = grammar_.LexemeStates(lexeme);
    const int32_t count = st / n;
    add(st % n);
    add(std::clamp(b.min - count, 0, reach));
    add(b.max < 0 ? -1 : std::clamp(b.max - count, 0, reach));
  }
  return key;
}

int CompiledGrammar::num_lexer_states() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(states_.size());
}

size_t CompiledGrammar::ApproxBytes() const {
  std::lock_guard lock(mu_);
  size_t bytes = grammar_.whitespace.memory_bytes();
  for (const ByteDfa& dfa : grammar_.lexemes) bytes += dfa.memory_bytes();
  for (const auto& alts : grammar_.rules) {
    for (const auto& alt : alts) bytes += sizeof(alt) + alt.size() * sizeof(int32_t);
  }
  for (const LexState& s : states_) bytes += sizeof(LexState) + s.pairs.size() * 8 + (s.accepted.size() + s.next.size()) * 4;
  for (const auto& e : entries_) {
    if (e) bytes += sizeof(MaskEntry) + e->boundary.size() * 8;
  }
  return bytes;
}

int32_t CompiledGrammar::Intern(std::vector<std::pair<int32_t, int32_t>> pairs) {
  if (pairs.empty()) return ByteDfa::kDead;
  auto [it, added] = state_ids_.try_emplace(pairs, static_cast<int32_t>(states_.size()));
  if (!added) return it->second;
  LexState s;
  for (auto [lexeme, st] : pairs) {
    if (grammar_.LexemeAccepts(lexeme, st)) s.accepted.push_back(lexeme);
  }
  s.accepted.erase(std::unique(s.accepted.begin(), s.accepted.end()), s.accepted.end());
  s.pairs = std::move(pairs);
  s.next.assign(static_cast<size_t>(num_classes_), kUnknown);
  states_.push_back(std::move(s));
  return it->second;
}

int32_t CompiledGrammar::StartState(const std::vector<int32_t>& expected) {
  const auto it = start_states_.find(expected);
  if (it != start_states_.end()) return it->second;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (int32_t lexeme : expected) {
    const int32_t start = grammar_.LexemeStart(lexeme);
    if (start >= 0) pairs.push_back({lexeme, start});
  }
  const int32_t id = Intern(std::move(pairs));
  start_states_.emplace(expected, id);
  return id;
}

int32_t CompiledGrammar::ComputeStep(int32_t state, uint8_t byte) {
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (auto [lexeme, st] : states_[static_cast<size_t>(state)].pairs) {
    const int32_t t = grammar_.LexemeStep(lexeme, st, byte);
    if (t >= 0) pairs.push_back({lexeme, t});
  }
  const int32_t next = Intern(std::move(pairs));  // may move states_
  states_[static_cast<size_t>(state)].next[byte_class_[byte]] = next;
  return next;
}

namespace {

// Whether every text character (TokenTrie::Utf8Step) from `start` stays alive and comes back
// to `start`: a search over (decoder state, automaton state) pairs.
template <typename StepFn>
bool TextLoops(int32_t start, StepFn step) {
  std::vector<std::pair<uint8_t, int32_t>> todo = {{0, start}}, seen = todo;
  while (!todo.empty()) {
    const auto [d, s] = todo.back();
    todo.pop_back();
    for (int b = 0; b < 256; ++b) {
      const uint8_t nd = TokenTrie::Utf8Step(d, static_cast<uint8_t>(b));
      if (nd == TokenTrie::kUtf8Invalid) continue;
      const int32_t t = step(s, static_cast<uint8_t>(b));
      if (t < 0 || (nd == 0 && t != start)) return false;
      if (nd == 0 || std::find(seen.begin(), seen.end(), std::pair{nd, t}) != seen.end()) continue;
      if (seen.size() > 64) return false;  // not a string's inside
      seen.push_back({nd, t});
      todo.push_back({nd, t});
    }
  }
  return true;
}

}  // namespace

int32_t CompiledGrammar::BulkReach(int32_t state) {
  if (states_[static_cast<size_t>(state)].bulk_reach != kUnknown) return states_[static_cast<size_t>(state)].bulk_reach;
  int32_t reach = -1;
  if (TextLoops(state, [this](int32_t s, uint8_t b) { return Step(s, b); })) {
    reach = std::numeric_limits<int32_t>::max();
  } else if (states_[static_cast<size_t>(state)].pairs.size() == 1) {
    const auto [lexeme, st] = states_[static_cast<size_t>(state)].pairs[0];
    const CodePointBound& bound = grammar_.bounds[static_cast<size_t>(lexeme)];
    const ByteDfa& dfa = grammar_.lexemes[static_cast<size_t>(lexeme)];
    // Between two characters of a counted string: each character counts one, so a subtree no
    // deeper (in bytes) than the count left stays inside.
    const int32_t n = grammar_.LexemeStates(lexeme);
    if (bound.active() && st % n == bound.open &&
        TextLoops(bound.open, [&dfa](int32_t s, uint8_t b) { return dfa.Step(s, b); })) {
      reach = bound.max < 0 ? std::numeric_limits<int32_t>::max() : bound.max - st / n;
    }
  }
  states_[static_cast<size_t>(state)].bulk_reach = reach;
  return reach;
}

std::shared_ptr<const SharedMaskCache::Entry> CompiledGrammar::Walk(int32_t state) {
  auto e = std::make_shared<SharedMaskCache::Entry>();
  e->inside = TokenMask(trie_->vocab_size());
  // One depth-first pass over the flat trie: at[d] is the lexer state after d bytes.
  std::vector<int32_t> at(1, state);
  const int32_t n = trie_->num_nodes();
  for (int32_t i = 1; i < n;) {
    const TokenTrie::Node& node = trie_->node(i);
    const int32_t parent = at[node.depth - 1u];
    const int32_t t = Step(parent, node.byte);
    if (t < 0) {
      if (!Accepted(parent).empty()) e->boundary.push_back(i);
      i = node.end;
      continue;
    }
    if (trie_->Utf8State(i) == 0 && trie_->text_below(i) && BulkReach(t) >= trie_->height(i)) {
      // The whole subtree stays inside: no step per node.
      for (int32_t token : trie_->subtree_tokens(i)) e->inside.Set(token);
      i = node.end;
      continue;
    }
    if (at.size() <= node.depth) at.resize(node.depth + 1u);
    at[node.depth] = t;
    for (int32_t token : trie_->tokens_at(i)) e->inside.Set(token);
    ++i;
  }
  return e;
}

const CompiledGrammar::MaskEntry& CompiledGrammar::Entry(int32_t state) {
  if (entries_.size() <= static_cast<size_t>(state)) entries_.resize(static_cast<size_t>(state) + 1);
  if (entries_[static_cast<size_t>(state)]) return *entries_[static_cast<size_t>(state)];
  const std::string key = SharedKey(state);
  std::shared_ptr<const SharedMaskCache::Entry> shared = shared_->Find(key);
  if (!shared) {
    std::shared_ptr<const SharedMaskCache::Entry> walked = Walk(state);
    const size_t bytes = walked->bytes();
    shared = shared_->Insert(key, std::move(walked), bytes);
  }
  // This grammar's lexer state before each boundary node: the walk from `state` along the
  // node's path (Step may grow states_, so nothing holds a reference into it).
  auto e = std::make_unique<MaskEntry>();
  std::string path;
  for (int32_t c : shared->boundary) {
    path.clear();
    for (int32_t p = trie_->parent(c); p > 0; p = trie_->parent(p)) path += static_cast<char>(trie_->node(p).byte);
    int32_t before = state;
    for (auto it = path.rbegin(); it != path.rend() && before >= 0; ++it) before = Step(before, static_cast<uint8_t>(*it));
    e->boundary.push_back({c, before});
  }
  // Grouped by the state before the boundary: one parser scan per group.
  std::stable_sort(e->boundary.begin(), e->boundary.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  e->shared = std::move(shared);
  if (entries_.size() <= static_cast<size_t>(state)) entries_.resize(static_cast<size_t>(state) + 1);
  entries_[static_cast<size_t>(state)] = std::move(e);
  return *entries_[static_cast<size_t>(state)];
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar)
    : g_(std::move(grammar)), parser_(&g_->grammar(), g_->max_parser_work_per_token_) {
  std::lock_guard lock(g_->mu_);
  state_ = g_->StartState(parser_.Expected());
}

bool GrammarMatcher::StepByte(uint8_t byte) {
  if (state_ < 0) return false;
  int32_t t = g_->Step(state_, byte);
  if (t >= 0) {
    state_ = t;
    fresh_ = false;
    return true;
  }
  if (fresh_ || g_->Accepted(state_).empty()) return false;
  const std::vector<int32_t> accepted = g_->Accepted(state_);
  if (!parser_.Scan(accepted)) return false;
  const int32_t next = g_->StartState(parser_.Expected());
  t = next < 0 ? ByteDfa::kDead : g_->Step(next, byte);
  if (t < 0) {
    parser_.Pop();
    return false;
  }
  state_ = t;
  return true;
}

void GrammarMatcher::RestoreTo(const Position& p) {
  while (parser_.num_scans() > p.scans) parser_.Pop();
  state_ = p.state;
  fresh_ = p.fresh;
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  std::lock_guard lock(g_->mu_);
  const Position before{parser_.num_scans(), state_, fresh_};
  for (char c : bytes) {
    if (!StepByte(static_cast<uint8_t>(c))) {
      RestoreTo(before);
      return false;
    }
  }
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t token) {
  if (token < 0 || token >= g_->trie().vocab_size()) return false;
  const std::string& bytes = g_->trie().bytes(token);
  if (bytes.empty()) return false;
  const Position before{parser_.num_scans(), state_, fresh_};
  parser_.StartBudget();
  if (!AcceptBytes(bytes)) return false;
  history_.push_back(before);
  return true;
}

bool GrammarMatcher::CanEnd() {
  std::lock_guard lock(g_->mu_);
  if (fresh_) return parser_.AcceptsEnd();
  if (state_ < 0) return false;
  const std::vector<int32_t> accepted = g_->Accepted(state_);
  if (accepted.empty() || !parser_.Scan(accepted)) return false;
  const bool end = parser_.AcceptsEnd();
  parser_.Pop();
  return end;
}

void GrammarMatcher::Rollback(int n) {
  n = std::clamp(n, 0, num_tokens());
  if (n == 0) return;
  RestoreTo(history_[history_.size() - static_cast<size_t>(n)]);
  history_.resize(history_.size() - static_cast<size_t>(n));
}

// Marks the tokens below trie node `parent`, reached in lexer state `state`: children that
// continue the lexeme directly, the others through a parser scan of what ended there.
void GrammarMatcher::WalkChildren(int32_t parent, int32_t state, TokenMask* mask) {
  const TokenTrie& trie = g_->trie();
  std::vector<int32_t> boundary;
  for (int32_t c = parent + 1; c < trie.node(parent).end; c = trie.node(c).end) {
    const int32_t t = g_->Step(state, trie.node(c).byte);
    if (t >= 0) {
      for (int32_t token : trie.tokens_at(c)) mask->Set(token);
      WalkChildren(c, t, mask);
    } else if (!g_->Accepted(state).empty()) {
      boundary.push_back(c);
    }
  }
  if (boundary.empty()) return;
  const std::vector<int32_t> accepted = g_->Accepted(state);
  if (!parser_.Scan(accepted)) return;
  const int32_t next = g_->StartState(parser_.Expected());
  for (int32_t c : boundary) {
    const int32_t t = next < 0 ? ByteDfa::kDead : g_->Step(next, trie.node(c).byte);
    if (t < 0) continue;
    for (int32_t token : trie.tokens_at(c)) mask->Set(token);
    WalkChildren(c, t, mask);
  }
  parser_.Pop();
}

void GrammarMatcher::FillMask(TokenMask* mask) {
  parser_.StartBudget();  // a token's mask and its acceptance share one budget
  const bool end = CanEnd();
  std::lock_guard lock(g_->mu_);
  if (state_ < 0) {
    *mask = TokenMask(g_->trie().vocab_size());
  } else {
    const CompiledGrammar::MaskEntry& e = g_->Entry(state_);
    *mask = e.shared->inside;
    const TokenTrie& trie = g_->trie();
    for (size_t i = 0; i < e.boundary.size();) {
      const int32_t before = e.boundary[i].second;
      size_t j = i;
      while (j < e.boundary.size() && e.boundary[j].second == before) ++j;
      const std::vector<int32_t> accepted = g_->Accepted(before);
      if (parser_.Scan(accepted)) {
        const int32_t next = g_->StartState(parser_.Expected());
        for (size_t k = i; k < j && next >= 0; ++k) {
          const int32_t c = e.boundary[k].first;
          const int32_t t = g_->Step(next, trie.node(c).byte);
          if (t < 0) continue;
          for (int32_t token : trie.tokens_at(c)) mask->Set(token);
          WalkChildren(c, t, mask);
        }
        parser_.Pop();
      }
      i = j;
    }
  }
  if (end) {
    for (int32_t token : g_->trie().eog_tokens()) mask->Set(token);
  }
}

}  // namespace kvserve
