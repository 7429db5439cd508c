// LexGrammar and LexEarley (see lex_grammar.h).
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/lex_grammar.h"

namespace kvserve {

CodePointBound CodePointBound::For(const ByteDfa& dfa, int32_t num_states, int64_t min, int64_t max) {
  CodePointBound b;
  if (max < 0 && min == 0) return b;
  const int64_t limit = std::numeric_limits<int32_t>::max() / std::max(1, num_states) - 1;
  b.min = static_cast<int32_t>(std::min(min, limit));
  b.max = max < 0 ? -1 : static_cast<int32_t>(std::min(max, limit));  // longer: a subset
  b.open = dfa.Step(dfa.start, '"');
  return b;
}

int32_t CodePointBound::Next(int32_t num_states, int32_t state, int32_t t, bool t_accepts) const {
  if (state < 0 || t < 0) return ByteDfa::kDead;
  const int32_t n = num_states;
  const int32_t count = state / n;
  if (state % n != open) return count * n + t;
  if (t_accepts) return count >= min ? count * n + t : ByteDfa::kDead;  // the closing quote
  if (max < 0) return std::min(count + 1, min) * n + t;  // a character starts; only min matters
  return count < max ? (count + 1) * n + t : ByteDfa::kDead;
}

bool CodePointBound::Matches(const ByteDfa& dfa, std::string_view text) const {
  if (!active()) return dfa.Matches(text);
  const int32_t n = dfa.num_states();
  int32_t s = dfa.start;
  for (char c : text) {
    if (s < 0) return false;
    const int32_t t = dfa.Step(s % n, static_cast<uint8_t>(c));
    s = Next(n, s, t, dfa.Accepts(t));
  }
  return s >= 0 && dfa.Accepts(s % n);
}

int32_t LexGrammar::AddLexeme(const std::string& key, ByteDfa dfa, int64_t min_code_points, int64_t max_code_points,
                              bool leading_whitespace) {
  auto [it, added] = lexeme_ids_.try_emplace(key, static_cast<int32_t>(lexemes.size()));
  if (added) {
    leading_whitespace = leading_whitespace && whitespace.start >= 0;
    const int32_t states = dfa.num_states() + (leading_whitespace ? whitespace.num_states() : 0);
    bounds.push_back(CodePointBound::For(dfa, states, min_code_points, max_code_points));
    num_dfa_states_ += dfa.num_states();
    lexemes.push_back(std::move(dfa));
    leading_ws.push_back(leading_whitespace ? 1 : 0);
    lexeme_keys.push_back(key);
  }
  return it->second;
}

int32_t LexGrammar::FindLexeme(const std::string& key) const {
  const auto it = lexeme_ids_.find(key);
  return it == lexeme_ids_.end() ? -1 : it->second;
}

int32_t LexGrammar::AddRule(std::string name) {
  rules.emplace_back();
  rule_names.push_back(std::move(name));
  return static_cast<int32_t>(rules.size()) - 1;
}

void LexGrammar::AddAlternative(int32_t rule, std::vector<int32_t> symbols) {
  rules[static_cast<size_t>(rule)].push_back(std::move(symbols));
}

Status LexGrammar::RemoveUnproductive(std::string_view what) {
  std::vector<char> productive(rules.size(), 0);
  auto symbol_ok = [&](int32_t s) {
    return s >= 0 ? productive[static_cast<size_t>(s)] != 0 : lexemes[static_cast<size_t>(LexemeId(s))].start >= 0;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (productive[r]) continue;
      for (const auto& alt : rules[r]) {
        if (std::all_of(alt.begin(), alt.end(), symbol_ok)) {
          productive[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  if (root < 0 || !productive[static_cast<size_t>(root)]) {
    return FailedPreconditionError(fmt::format("the {} allows no value at all", what));
  }
  for (auto& alts : rules) {
    std::erase_if(alts, [&](const std::vector<int32_t>& alt) { return !std::all_of(alt.begin(), alt.end(), symbol_ok); });
  }
  return OkStatus();
}

StatusOr<LexGrammar> RegexGrammar(std::string_view pattern, const GrammarLimits& limits) {
  ASSIGN_OR_RETURN(ByteDfa dfa, CompileRegex(pattern, RegexOptionsWithin(limits, /*anchored=*/true)));
  LexGrammar g;
  g.root = g.AddRule("root");
  g.AddAlternative(g.root, {LexGrammar::Lexeme(g.AddLexeme("regex", std::move(dfa)))});
  RETURN_IF_ERROR(g.RemoveUnproductive("regex"));
  return g;
}

LexGrammar ChoiceGrammar(const std::vector<std::string>& choices) {
  LexGrammar g;
  g.root = g.AddRule("root");
  g.AddAlternative(g.root, {LexGrammar::Lexeme(g.AddLexeme("choice", ChoiceDfa(choices)))});
  return g;
}

LexGrammar ByteGrammar(const Grammar& grammar) {
  LexGrammar g;
  for (size_t r = 0; r < grammar.rules.size(); ++r) g.AddRule(grammar.names[r]);
  for (size_t r = 0; r < grammar.rules.size(); ++r) {
    for (const GrammarSequence& seq : grammar.rules[r]) {
      std::vector<int32_t> symbols;
      for (const GrammarSymbol& sym : seq) {
        if (sym.kind == GrammarSymbol::kRule) {
          symbols.push_back(sym.rule);
          continue;
        }
        const std::string key = fmt::format("{}-{}", sym.lo, sym.hi);
        int32_t id = g.FindLexeme(key);
        if (id < 0) {  // one byte in [lo, hi], then nothing
          std::vector<ByteDfa::Row> rows(2);
          for (ByteDfa::Row& row : rows) row.fill(ByteDfa::kDead);
          for (int b = sym.lo; b <= sym.hi; ++b) rows[0][static_cast<size_t>(b)] = 1;
          id = g.AddLexeme(key, ByteDfa::FromRows(rows, {0, 1}, 0));
        }
        symbols.push_back(LexGrammar::Lexeme(id));
      }
      g.AddAlternative(static_cast<int32_t>(r), std::move(symbols));
    }
  }
  g.root = grammar.root;
  return g;
}

LexEarley::LexEarley(const LexGrammar* grammar, int64_t max_work_per_token) : g_(grammar), max_work_(max_work_per_token) {
  rule_prods_.resize(g_->rules.size());
  for (size_t r = 0; r < g_->rules.size(); ++r) {
    for (const auto& alt : g_->rules[r]) {
      rule_prods_[r].push_back(static_cast<int32_t>(prod_symbols_.size()));
      prod_rule_.push_back(static_cast<int32_t>(r));
      prod_symbols_.push_back(alt);
    }
  }
  nullable_.assign(g_->rules.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t p = 0; p < prod_symbols_.size(); ++p) {
      const size_t r = static_cast<size_t>(prod_rule_[p]);
      if (nullable_[r]) continue;
      if (std::all_of(prod_symbols_[p].begin(), prod_symbols_[p].end(),
                      [&](int32_t s) { return s >= 0 && nullable_[static_cast<size_t>(s)]; })) {
        nullable_[r] = 1;
        changed = true;
      }
    }
  }
  sets_.emplace_back();
  seen_.clear();
  if (g_->root >= 0) {
    for (int32_t p : rule_prods_[static_cast<size_t>(g_->root)]) Add({p, 0, 0});
  }
  Close();
}

void LexEarley::Add(const Item& item) {
  // 24 bits of production, 20 of dot, 20 of origin (Scan stops at 2^20 lexemes;
  // grammars stay far below 2^24 productions and 2^20 symbols in one: kMaxRules, GBNF's bound).
  const uint64_t key = (static_cast<uint64_t>(item.prod) << 40) | (static_cast<uint64_t>(item.dot) << 20) |
                       static_cast<uint64_t>(item.origin);
  ++work_;
  if (!seen_.insert(key).second) return;
  Set& set = sets_.back();
  const std::vector<int32_t>& symbols = prod_symbols_[static_cast<size_t>(item.prod)];
  if (item.dot < static_cast<int32_t>(symbols.size()) && symbols[static_cast<size_t>(item.dot)] >= 0) {
    set.waiting[symbols[static_cast<size_t>(item.dot)]].push_back(static_cast<int32_t>(set.items.size()));
  }
  set.items.push_back(item);
}

void LexEarley::Close() {
  Set& set = sets_.back();
  const int32_t here = static_cast<int32_t>(sets_.size()) - 1;
  for (size_t i = 0; i < set.items.size(); ++i) {
    if (work_ - budget_start_ > max_work_) {
      exhausted_ = true;  // the set is incomplete: nothing may be scanned from it
      break;
    }
    const Item item = set.items[i];
    const std::vector<int32_t>& symbols = prod_symbols_[static_cast<size_t>(item.prod)];
    if (item.dot < static_cast<int32_t>(symbols.size())) {
      const int32_t s = symbols[static_cast<size_t>(item.dot)];
      if (s < 0) {
        set.expected.push_back(LexGrammar::LexemeId(s));
        continue;
      }
      for (int32_t p : rule_prods_[static_cast<size_t>(s)]) Add({p, 0, here});
      if (nullable_[static_cast<size_t>(s)]) Add({item.prod, item.dot + 1, item.origin});
      continue;
    }
    const int32_t rule = prod_rule_[static_cast<size_t>(item.prod)];
    if (rule == g_->root && item.origin == 0) set.accepts_end = true;
    if (item.origin == here) continue;  // an empty derivation: prediction advanced past it
    // Whoever waited for this rule at the origin moves on (an earlier, complete set).
    const Set& origin = sets_[static_cast<size_t>(item.origin)];
    const auto found = origin.waiting.find(rule);
    if (found == origin.waiting.end()) continue;
    for (int32_t j : found->second) {
      const Item w = origin.items[static_cast<size_t>(j)];
      Add({w.prod, w.dot + 1, w.origin});
    }
  }
  std::sort(set.expected.begin(), set.expected.end());
  set.expected.erase(std::unique(set.expected.begin(), set.expected.end()), set.expected.end());
  seen_.clear();
}

bool LexEarley::Scan(std::span<const int32_t> lexemes) {
  if (exhausted_) return false;
  const Set& last = sets_.back();
  std::vector<Item> advanced;
  for (const Item& item : last.items) {
    const std::vector<int32_t>& symbols = prod_symbols_[static_cast<size_t>(item.prod)];
    if (item.dot >= static_cast<int32_t>(symbols.size())) continue;
    const int32_t s = symbols[static_cast<size_t>(item.dot)];
    if (s < 0 && std::binary_search(lexemes.begin(), lexemes.end(), LexGrammar::LexemeId(s))) {
      advanced.push_back({item.prod, item.dot + 1, item.origin});
    }
  }
  if (advanced.empty() || sets_.size() >= (size_t{1} << 20)) return false;
  sets_.emplace_back();
  for (const Item& item : advanced) Add(item);
  Close();
  return true;
}

void LexEarley::Pop() {
  if (sets_.size() > 1) sets_.pop_back();
}

}  // namespace kvserve
