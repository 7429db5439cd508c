// EarleyRecognizer and ReferenceGrammarMask (see earley.h).
#include "tests/reference/earley.h"

#include <algorithm>

namespace kvserve {

EarleyRecognizer::EarleyRecognizer(const Grammar* grammar) : g_(grammar), nullable_(grammar->rules.size(), 0) {
  // A rule is nullable when an alternative is all nullable rules (a byte never is).
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g_->rules.size(); ++r) {
      if (nullable_[r]) continue;
      for (const GrammarSequence& alt : g_->rules[r]) {
        if (std::all_of(alt.begin(), alt.end(), [&](const GrammarSymbol& s) {
              return s.kind == GrammarSymbol::kRule && nullable_[static_cast<size_t>(s.rule)];
            })) {
          nullable_[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  sets_.emplace_back();
  if (g_->root < 0) return;
  for (int32_t a = 0; a < static_cast<int32_t>(g_->rules[static_cast<size_t>(g_->root)].size()); ++a) {
    Add({g_->root, a, 0, 0});
  }
  Close();
}

const GrammarSymbol* EarleyRecognizer::Next(const Item& item) const {
  const GrammarSequence& seq = g_->rules[static_cast<size_t>(item.rule)][static_cast<size_t>(item.alt)];
  return item.dot < static_cast<int32_t>(seq.size()) ? &seq[static_cast<size_t>(item.dot)] : nullptr;
}

void EarleyRecognizer::Add(const Item& item) {
  if (!seen_.insert(item).second) return;
  Set& set = sets_.back();
  const GrammarSymbol* next = Next(item);
  if (next != nullptr && next->kind == GrammarSymbol::kRule) {
    set.waiting[next->rule].push_back(static_cast<int32_t>(set.items.size()));
  }
  set.items.push_back(item);
}

void EarleyRecognizer::Close() {
  const auto k = static_cast<int32_t>(sets_.size()) - 1;
  for (size_t i = 0; i < sets_.back().items.size(); ++i) {
    const Item item = sets_.back().items[i];  // a copy: Add may grow the set
    const GrammarSymbol* next = Next(item);
    if (next == nullptr) {
      // Complete: whoever waited for this rule at its origin moves on. Indices, not
      // iterators: when the origin is this set, Add may grow both lists.
      Set& origin = sets_[static_cast<size_t>(item.origin)];
      const auto found = origin.waiting.find(item.rule);
      if (found == origin.waiting.end()) continue;
      const std::vector<int32_t>& waiting = found->second;  // a reference survives a rehash
      for (size_t j = 0; j < waiting.size(); ++j) {
        const Item w = origin.items[static_cast<size_t>(waiting[j])];
        Add({w.rule, w.alt, w.dot + 1, w.origin});
      }
    } else if (next->kind == GrammarSymbol::kRule) {
      const auto& alts = g_->rules[static_cast<size_t>(next->rule)];
      for (int32_t a = 0; a < static_cast<int32_t>(alts.size()); ++a) Add({next->rule, a, 0, k});
      // An empty rule completes at once, before its completion could see this item.
      if (nullable_[static_cast<size_t>(next->rule)]) Add({item.rule, item.alt, item.dot + 1, item.origin});
    }
  }
}

bool EarleyRecognizer::Allows(uint8_t byte) const {
  for (const Item& item : sets_.back().items) {
    const GrammarSymbol* s = Next(item);
    if (s != nullptr && s->kind == GrammarSymbol::kBytes && s->lo <= byte && byte <= s->hi) return true;
  }
  return false;
}

bool EarleyRecognizer::Advance(uint8_t byte) {
  std::vector<Item> next;
  for (const Item& item : sets_.back().items) {
    const GrammarSymbol* s = Next(item);
    if (s != nullptr && s->kind == GrammarSymbol::kBytes && s->lo <= byte && byte <= s->hi) {
      next.push_back({item.rule, item.alt, item.dot + 1, item.origin});
    }
  }
  if (next.empty()) return false;
  sets_.emplace_back();
  seen_.clear();
  for (const Item& item : next) Add(item);
  Close();
  return true;
}

bool EarleyRecognizer::AdvanceAll(std::string_view bytes) {
  int done = 0;
  for (char c : bytes) {
    if (!Advance(static_cast<uint8_t>(c))) {
      Rollback(done);
      return false;
    }
    ++done;
  }
  return true;
}

bool EarleyRecognizer::AcceptsEnd() const {
  for (const Item& item : sets_.back().items) {
    if (item.rule == g_->root && item.origin == 0 && Next(item) == nullptr) return true;
  }
  return false;
}

void EarleyRecognizer::Rollback(int n) {
  // seen_ belongs to the set being built; a rolled-back-to set is complete (Close ran), so the
  // next Add is always into a fresh set, which clears it.
  sets_.resize(sets_.size() - static_cast<size_t>(std::clamp(n, 0, num_bytes())));
}

TokenMask ReferenceGrammarMask(const TokenTrie& trie, EarleyRecognizer* recognizer) {
  TokenMask mask(trie.vocab_size());
  const int base = recognizer->num_bytes();
  const auto n = static_cast<int32_t>(trie.num_nodes());
  for (int32_t i = 1; i < n;) {
    const TokenTrie::Node& node = trie.node(i);
    // The recognizer holds the path's first depth - 1 bytes.
    recognizer->Rollback(recognizer->num_bytes() - (base + node.depth - 1));
    if (!recognizer->Advance(node.byte)) {
      i = node.end;
      continue;
    }
    for (int32_t t : trie.tokens_at(i)) mask.Set(t);
    ++i;
  }
  recognizer->Rollback(recognizer->num_bytes() - base);
  if (recognizer->AcceptsEnd()) {
    for (int32_t id : trie.eog_tokens()) mask.Set(id);
  }
  return mask;
}

}  // namespace kvserve
