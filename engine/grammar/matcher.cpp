// CompiledGrammar and GrammarMatcher (see matcher.h).
#include "engine/grammar/matcher.h"

#include <algorithm>

namespace kvserve {

CompiledGrammar::CompiledGrammar(LexGrammar grammar, const TokenTrie* trie) : grammar_(std::move(grammar)), trie_(trie) {}

int CompiledGrammar::num_lexer_states() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(states_.size());
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
  s.next.fill(kUnknown);
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
  states_[static_cast<size_t>(state)].next[byte] = next;
  return next;
}

const CompiledGrammar::MaskEntry& CompiledGrammar::Entry(int32_t state) {
  if (entries_.size() <= static_cast<size_t>(state)) entries_.resize(static_cast<size_t>(state) + 1);
  std::unique_ptr<MaskEntry>& slot = entries_[static_cast<size_t>(state)];
  if (slot) return *slot;
  auto e = std::make_unique<MaskEntry>(MaskEntry{TokenMask(trie_->vocab_size()), {}});
  // One depth-first pass over the flat trie: at[d] is the lexer state after d bytes.
  std::vector<int32_t> at(1, state);
  const int32_t n = trie_->num_nodes();
  for (int32_t i = 1; i < n;) {
    const TokenTrie::Node& node = trie_->node(i);
    const int32_t parent = at[node.depth - 1u];
    const int32_t t = Step(parent, node.byte);
    if (t < 0) {
      if (!Accepted(parent).empty()) e->boundary.push_back({i, parent});
      i = node.end;
      continue;
    }
    if (at.size() <= node.depth) at.resize(node.depth + 1u);
    at[node.depth] = t;
    for (int32_t token : trie_->tokens_at(i)) e->inside.Set(token);
    ++i;
  }
  // Grouped by the state before the boundary: one parser scan per group.
  std::stable_sort(e->boundary.begin(), e->boundary.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  if (entries_.size() <= static_cast<size_t>(state)) entries_.resize(static_cast<size_t>(state) + 1);
  entries_[static_cast<size_t>(state)] = std::move(e);
  return *entries_[static_cast<size_t>(state)];
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar)
    : g_(std::move(grammar)), parser_(&g_->grammar()) {
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
  const bool end = CanEnd();
  std::lock_guard lock(g_->mu_);
  if (state_ < 0) {
    *mask = TokenMask(g_->trie().vocab_size());
  } else {
    const CompiledGrammar::MaskEntry& e = g_->Entry(state_);
    *mask = e.inside;
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
