// Token masks for a LexGrammar (lex_grammar.h) over a vocabulary: which tokens may come next.
//
// CompiledGrammar holds what all sequences under one grammar share: the lexer's states (the
// set of (lexeme, automaton state) pairs still alive in the current lexeme, interned, with
// their byte transitions filled in as they are met) and, per lexer state, the part of the mask
// that does not depend on the parser: the tokens whose bytes stay inside the current lexeme
// (one walk of the token trie, then cached), and the trie nodes where a lexeme ends inside a
// token. A mask is that cached set plus a walk below those nodes with the parser, so the
// Earley parser runs only where a token crosses a lexeme boundary (after a string's closing
// quote, a number's last digit, a punctuation mark).
//
// GrammarMatcher is one sequence's position: the parser, the lexer state, a history for
// Rollback. Matchers of one grammar may run on different threads (the shared caches lock).
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/lex_grammar.h"
#include "engine/grammar/lru_cache.h"
#include "engine/grammar/token_trie.h"

namespace kvserve {

// The part of a mask no grammar owns: for a lexer state named by its automata's contents and
// their states (not by one grammar's numbering), the tokens that stay inside the lexeme and the
// trie nodes where a lexeme ends. Schemas repeat their lexemes (a plain string, an integer, a
// date), so every grammar over one vocabulary shares these walks. Least recently used out
// first; thread-safe.
struct SharedMaskEntry {
  TokenMask inside;
  std::vector<int32_t> boundary;  // trie nodes whose byte cannot continue, after a lexeme ended
  size_t bytes() const { return sizeof(SharedMaskEntry) + inside.memory_bytes() + boundary.size() * sizeof(int32_t); }
};
class SharedMaskCache : public LruCache<std::shared_ptr<const SharedMaskEntry>> {
 public:
  using Entry = SharedMaskEntry;
  // At most `max_bytes` of masks and boundaries (Entry::bytes), however many entries.
  explicit SharedMaskCache(size_t max_bytes = GrammarLimits{}.shared_mask_bytes) : LruCache(SIZE_MAX, max_bytes) {}
};

class CompiledGrammar {
 public:
  // `trie` must outlive it. `shared` (null: a cache of its own) holds the walks other grammars
  // over the same vocabulary may reuse. Its matchers' parsers stop past
  // `max_parser_work_per_token` (GrammarLimits).
  CompiledGrammar(LexGrammar grammar, const TokenTrie* trie, std::shared_ptr<SharedMaskCache> shared = nullptr,
                  int64_t max_parser_work_per_token = GrammarLimits{}.max_parser_work_per_token);
  const LexGrammar& grammar() const { return grammar_; }
  const TokenTrie& trie() const { return *trie_; }
  int num_lexer_states() const;
  // What it holds now, approximately (its automata, and the lexer states and mask entries met
  // so far): the cost GrammarCache bounds.
  size_t ApproxBytes() const;

 private:
  friend class GrammarMatcher;
  static constexpr int32_t kUnknown = -2;
  struct LexState {
    std::vector<std::pair<int32_t, int32_t>> pairs;  // (lexeme, automaton state), sorted
    std::vector<int32_t> accepted;                   // lexemes in an accepting state, sorted
    std::vector<int32_t> next;                       // [byte class] kUnknown until met; kDead
    int32_t bulk_reach = kUnknown;                   // BulkReach, once computed
  };
  struct MaskEntry {
    std::shared_ptr<const SharedMaskCache::Entry> shared;  // tokens that stay inside the lexeme
    std::vector<std::pair<int32_t, int32_t>> boundary;     // (trie node, lexer state before it)
  };

  // REQUIRES: mu_ held.
  int32_t Intern(std::vector<std::pair<int32_t, int32_t>> pairs);
  int32_t StartState(const std::vector<int32_t>& expected);
  int32_t Step(int32_t state, uint8_t byte) {
    const int32_t t = states_[static_cast<size_t>(state)].next[byte_class_[byte]];
    return t != kUnknown ? t : ComputeStep(state, byte);
  }
  // Interns the next state (which may move states_) and records it.
  int32_t ComputeStep(int32_t state, uint8_t byte);
  const std::vector<int32_t>& Accepted(int32_t state) const { return states_[static_cast<size_t>(state)].accepted; }
  const MaskEntry& Entry(int32_t state);
  // How deep a subtree of text (TokenTrie::Utf8Step) may go from `state`, between two
  // characters, and stay inside the lexeme with every token in it allowed: unbounded where
  // each character of text comes back to the state (a free string's inside), the count left
  // for a counted string (CodePointBound); -1 otherwise. REQUIRES: mu_ held.
  int32_t BulkReach(int32_t state);
  // The walk behind Entry: grammar-independent. REQUIRES: mu_ held.
  std::shared_ptr<const SharedMaskCache::Entry> Walk(int32_t state);
  // The SharedMaskCache key of a lexer state: its automata's contents and states.
  std::string SharedKey(int32_t state);
  const std::string& LexemeDigest(int32_t lexeme);

  LexGrammar grammar_;
  const TokenTrie* trie_;
  int64_t max_parser_work_per_token_;
  std::shared_ptr<SharedMaskCache> shared_;
  mutable std::mutex mu_;
  // The bytes every lexeme treats alike (the meet of their classes): a lexer state's row.
  std::array<uint8_t, 256> byte_class_{};
  int32_t num_classes_ = 1;
  std::vector<std::string> digests_;  // [lexeme] its automaton's content hash ("" until needed)
  std::vector<LexState> states_;
  std::map<std::vector<std::pair<int32_t, int32_t>>, int32_t> state_ids_;
  std::map<std::vector<int32_t>, int32_t> start_states_;
  std::vector<std::unique_ptr<MaskEntry>> entries_;  // [lexer state]
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar);

  // Consumes the token's bytes: false (nothing changes) when the grammar refuses them or the
  // token has none (a control token).
  bool AcceptToken(int32_t token);
  // Consumes `bytes`, all or nothing.
  bool AcceptBytes(std::string_view bytes);
  // The bytes so far are a complete sentence (end-of-generation may come).
  bool CanEnd();
  // The tokens that may come next; end-of-generation tokens where CanEnd.
  void FillMask(TokenMask* mask);
  // Undoes the last `n` accepted tokens (n <= num_tokens()).
  void Rollback(int n);
  int num_tokens() const { return static_cast<int>(history_.size()); }
  // The parser ran past its work bound for one token (GrammarLimits::max_parser_work_per_token: an
  // ambiguous grammar): the masks are no longer exact and the sequence must end (an error).
  bool exhausted() const { return parser_.exhausted(); }
  int64_t parser_work() const { return parser_.work(); }  // LexEarley::work, all tokens so far

 private:
  struct Position {
    int32_t scans;   // parser depth
    int32_t state;   // lexer state
    bool fresh;      // nothing of the current lexeme consumed yet
  };
  // REQUIRES: g_->mu_ held.
  bool StepByte(uint8_t byte);
  void RestoreTo(const Position& p);
  void WalkChildren(int32_t parent, int32_t state, TokenMask* mask);

  std::shared_ptr<CompiledGrammar> g_;
  LexEarley parser_;
  int32_t state_;
  bool fresh_ = true;
  std::vector<Position> history_;  // before each accepted token
};

}  // namespace kvserve
