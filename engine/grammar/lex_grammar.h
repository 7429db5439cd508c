// LexGrammar: a context-free grammar over lexemes, what JSON Schemas compile to. A lexeme is a
// byte automaton (regex.h: a string with its pattern, a number with its bounds, a key, a
// punctuation mark), after the grammar's leading whitespace where it has some; rules are
// sequences of lexemes and rules. Lexing is by longest match: a lexeme ends where the next byte
// cannot continue it, so lexemes must not be prefixes of a valid continuation (JSON's are not:
// a value is always followed by punctuation or whitespace that cannot extend it).
//
// LexEarley parses lexemes with Earley's algorithm: the lexemes each step expects, the scan of
// a lexeme the lexer recognized (as a set: the candidates that matched the same bytes), undo.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "engine/grammar/regex.h"

namespace kvserve {

// A JSON string lexeme's length in code points, counted by the lexer: an automaton that counts
// needs a copy of the character automaton (about 33 states) per count, 33,000 states for a
// maxLength of 1,000. The lexeme's automaton matches a string of any length; its state
// `open` is where a character starts (after the opening quote and after each character).
// A lexer state of such a lexeme is count * num_states + state, where num_states counts the
// lexeme's states with its leading whitespace's (LexGrammar::LexemeStates).
struct CodePointBound {
  int32_t min = 0;
  int32_t max = -1;   // -1: none (counts stop at min then)
  int32_t open = -1;

  bool active() const { return max >= 0 || min > 0; }
  // The bound for `dfa` (a JSON string literal's automaton) of `num_states` lexer states;
  // min and max are lowered to what a lexer state can count.
  static CodePointBound For(const ByteDfa& dfa, int32_t num_states, int64_t min, int64_t max);
  // The lexer state after `state` when the step of its state (state % num_states) is `t`
  // (`t_accepts`: an accepting one): the count moved on; kDead past the bound.
  int32_t Next(int32_t num_states, int32_t state, int32_t t, bool t_accepts) const;
  // `text` is one of `dfa`'s strings (no leading whitespace) within the bound.
  bool Matches(const ByteDfa& dfa, std::string_view text) const;
};

struct LexGrammar {
  // A symbol: a rule id (>= 0) or a lexeme (Lexeme(id) < 0).
  static constexpr int32_t Lexeme(int32_t id) { return -1 - id; }
  static constexpr int32_t LexemeId(int32_t symbol) { return -1 - symbol; }

  std::vector<ByteDfa> lexemes;
  // Leading whitespace (a JSON Schema's, WhitespaceLayout): one automaton the lexer runs before
  // each lexeme that has it (leading_ws), instead of a copy in each. A lexeme's lexer states
  // are its automaton's, then the whitespace's (LexemeStates).
  ByteDfa whitespace;
  std::vector<char> leading_ws;          // [lexeme]
  std::vector<CodePointBound> bounds;    // [lexeme]
  std::vector<std::string> lexeme_keys;  // [lexeme] what built it (equal keys, equal automata)
  std::vector<std::vector<std::vector<int32_t>>> rules;  // [rule] -> alternatives
  std::vector<std::string> rule_names;                   // [rule] for errors and dumps
  int32_t root = -1;

  // The automaton states of all lexemes (GrammarLimits::max_grammar_states bounds them).
  int64_t num_dfa_states() const { return num_dfa_states_; }
  // The lexeme built by `key`, added with `dfa` (and a length bound, see CodePointBound::For;
  // after `whitespace` when `leading_whitespace`) when new. Set `whitespace` first.
  int32_t AddLexeme(const std::string& key, ByteDfa dfa, int64_t min_code_points = 0, int64_t max_code_points = -1,
                    bool leading_whitespace = false);
  // Lexer steps through lexeme `l` (its whitespace, automaton and count).
  int32_t LexemeStates(int32_t l) const {
    return lexemes[static_cast<size_t>(l)].num_states() + (leading_ws[static_cast<size_t>(l)] ? whitespace.num_states() : 0);
  }
  int32_t LexemeStart(int32_t l) const {
    const ByteDfa& d = lexemes[static_cast<size_t>(l)];
    return d.start < 0 || !leading_ws[static_cast<size_t>(l)] ? d.start : d.num_states() + whitespace.start;
  }
  int32_t LexemeStep(int32_t l, int32_t state, uint8_t byte) const {
    const CodePointBound& b = bounds[static_cast<size_t>(l)];
    if (!b.active() || state < 0) return StepUncounted(l, state, byte);
    const int32_t n = LexemeStates(l);
    const int32_t t = StepUncounted(l, state % n, byte);
    return b.Next(n, state, t, AcceptsUncounted(l, t));
  }
  bool LexemeAccepts(int32_t l, int32_t state) const {
    return AcceptsUncounted(l, bounds[static_cast<size_t>(l)].active() ? state % LexemeStates(l) : state);
  }
  int32_t FindLexeme(const std::string& key) const;
  int32_t AddRule(std::string name);
  void AddAlternative(int32_t rule, std::vector<int32_t> symbols);
  // Drops alternatives that derive no finite string (a dead lexeme, an unproductive rule), so
  // every item the parser holds can still complete. FAILED_PRECONDITION when the root derives
  // nothing (an unsatisfiable schema, a grammar whose root never ends); `what` names the input.
  [[nodiscard]] Status RemoveUnproductive(std::string_view what = "schema");

 private:
  int32_t StepUncounted(int32_t l, int32_t state, uint8_t byte) const {
    const ByteDfa& d = lexemes[static_cast<size_t>(l)];
    if (state < d.num_states()) return d.Step(state, byte);  // kDead too
    const int32_t w = state - d.num_states();
    const int32_t t = whitespace.Step(w, byte);
    if (t >= 0) return d.num_states() + t;
    return whitespace.Accepts(w) ? d.Step(d.start, byte) : ByteDfa::kDead;  // the lexeme starts
  }
  bool AcceptsUncounted(int32_t l, int32_t state) const {
    const ByteDfa& d = lexemes[static_cast<size_t>(l)];
    if (state < d.num_states()) return d.Accepts(state);
    return whitespace.Accepts(state - d.num_states()) && d.Accepts(d.start);
  }

  std::unordered_map<std::string, int32_t> lexeme_ids_;
  int64_t num_dfa_states_ = 0;
};

// One-lexeme grammars: a regex (regex.h syntax, anchored), one of `choices`.
[[nodiscard]] StatusOr<LexGrammar> RegexGrammar(std::string_view pattern, const GrammarLimits& limits = {});
LexGrammar ChoiceGrammar(const std::vector<std::string>& choices);
// A byte-level Grammar (grammar.h: GBNF) as a LexGrammar whose lexemes are its byte ranges.
LexGrammar ByteGrammar(const struct Grammar& grammar);

// Not thread-safe; `grammar` must outlive it.
class LexEarley {
 public:
  // max_work_per_token: see StartBudget.
  explicit LexEarley(const LexGrammar* grammar, int64_t max_work_per_token = GrammarLimits{}.max_parser_work_per_token);

  // Scans a lexeme that matched as any of `lexemes` (sorted ids): false, and nothing changes,
  // when the parser expects none of them (or after 2^20 lexemes, or once exhausted()).
  bool Scan(std::span<const int32_t> lexemes);
  // The work of Earley's algorithm is unbounded on an ambiguous grammar (s ::= s s s | s s |
  // "a": items per set grow with the text, completions with their square). Parsing counts it
  // (items added and waiting items visited) from the last StartBudget; past the bound the
  // parser is exhausted for good: Scan fails, and the caller must end the request
  // (GrammarMatcher::exhausted).
  int64_t max_work_per_budget() const { return max_work_; }
  void StartBudget() { budget_start_ = work_; }
  bool exhausted() const { return exhausted_; }
  int64_t work() const { return work_; }  // all so far
  // Undoes the last Scan.
  void Pop();
  int num_scans() const { return static_cast<int>(sets_.size()) - 1; }
  // The lexemes the parser expects next (sorted).
  const std::vector<int32_t>& Expected() const { return sets_.back().expected; }
  // The lexemes scanned so far are a sentence.
  bool AcceptsEnd() const { return sets_.back().accepts_end; }

 private:
  struct Item {
    int32_t prod, dot, origin;
    bool operator==(const Item&) const = default;
  };
  struct Set {
    std::vector<Item> items;
    std::vector<int32_t> expected;
    bool accepts_end = false;
    std::unordered_map<int32_t, std::vector<int32_t>> waiting;  // rule -> items whose next symbol it is
  };
  void Add(const Item& item);
  // Predictions and completions of the last set.
  void Close();

  const LexGrammar* g_;
  // The alternatives of all rules, numbered.
  std::vector<int32_t> prod_rule_;
  std::vector<std::vector<int32_t>> prod_symbols_;
  std::vector<std::vector<int32_t>> rule_prods_;
  std::vector<char> nullable_;
  std::vector<Set> sets_;
  std::unordered_set<uint64_t> seen_;  // the items of the set being built
  int64_t max_work_;
  int64_t work_ = 0;
  int64_t budget_start_ = 0;
  bool exhausted_ = false;
};

}  // namespace kvserve
