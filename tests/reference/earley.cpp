// EarleyRecognizer (see earley.h).
#include "engine/grammar/earley.h"

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
  std::vector<Item>& set = sets_.back();
  if (std::find(set.begin(), set.end(), item) == set.end()) set.push_back(item);
}

void EarleyRecognizer::Close() {
  const auto k = static_cast<int32_t>(sets_.size()) - 1;
  for (size_t i = 0; i < sets_.back().size(); ++i) {
    const Item item = sets_.back()[i];  // a copy: Add may grow the set
    const GrammarSymbol* next = Next(item);
    if (next == nullptr) {
      // Complete: whoever waited for this rule at its origin moves on.
      for (size_t j = 0; j < sets_[static_cast<size_t>(item.origin)].size(); ++j) {
        const Item waiting = sets_[static_cast<size_t>(item.origin)][j];
        const GrammarSymbol* s = Next(waiting);
        if (s != nullptr && s->kind == GrammarSymbol::kRule && s->rule == item.rule) {
          Add({waiting.rule, waiting.alt, waiting.dot + 1, waiting.origin});
        }
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
  for (const Item& item : sets_.back()) {
    const GrammarSymbol* s = Next(item);
    if (s != nullptr && s->kind == GrammarSymbol::kBytes && s->lo <= byte && byte <= s->hi) return true;
  }
  return false;
}

bool EarleyRecognizer::Advance(uint8_t byte) {
  std::vector<Item> next;
  for (const Item& item : sets_.back()) {
    const GrammarSymbol* s = Next(item);
    if (s != nullptr && s->kind == GrammarSymbol::kBytes && s->lo <= byte && byte <= s->hi) {
      next.push_back({item.rule, item.alt, item.dot + 1, item.origin});
    }
  }
  if (next.empty()) return false;
  sets_.emplace_back();
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
  for (const Item& item : sets_.back()) {
    if (item.rule == g_->root && item.origin == 0 && Next(item) == nullptr) return true;
  }
  return false;
}

void EarleyRecognizer::Rollback(int n) { sets_.resize(sets_.size() - static_cast<size_t>(std::clamp(n, 0, num_bytes()))); }

}  // namespace kvserve
