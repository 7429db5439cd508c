// EarleyRecognizer: follows a byte string through a Grammar (engine/grammar/grammar.h), byte by
// byte: which bytes may come next, whether the string so far is a sentence, and undo. Any
// context-free grammar (left recursion, ambiguity, empty rules: Earley with Aycock and
// Horspool's nullable completion). It is the tests' reference for the grammar library: the
// fast token masks (engine/grammar/matcher.h) and the GBNF fuzzer are checked against it. One
// chart set per byte, so memory grows with the text. Test code, not linked into kvserve.
//
// Each set keeps, per rule, the items waiting for it, so a completion visits only those (not
// the whole origin set), and the set being built finds duplicates by hash.
//
// Not thread-safe; `grammar` must outlive it.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/token_mask.h"
#include "engine/grammar/token_trie.h"

namespace kvserve {

class EarleyRecognizer {
 public:
  explicit EarleyRecognizer(const Grammar* grammar);

  // Consumes `byte`; false (and nothing changes) when no sentence continues with it.
  bool Advance(uint8_t byte);
  // Consumes every byte of `bytes` or none (false).
  bool AdvanceAll(std::string_view bytes);
  // The bytes consumed so far form a sentence.
  bool AcceptsEnd() const;
  // Undoes the last `n` bytes (n <= num_bytes()).
  void Rollback(int n);
  int num_bytes() const { return static_cast<int>(sets_.size()) - 1; }
  // Whether `byte` may come next (Advance would succeed).
  bool Allows(uint8_t byte) const;

 private:
  struct Item {
    int32_t rule, alt, dot, origin;
    bool operator==(const Item&) const = default;
  };
  struct ItemHash {
    size_t operator()(const Item& i) const {
      uint64_t h = static_cast<uint32_t>(i.rule);
      h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(i.alt);
      h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(i.dot);
      h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(i.origin);
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  struct Set {
    std::vector<Item> items;
    std::unordered_map<int32_t, std::vector<int32_t>> waiting;  // rule -> items whose next is it
  };
  // Adds `item` to the last set unless there.
  void Add(const Item& item);
  // Predictions and completions of the last set.
  void Close();
  const GrammarSymbol* Next(const Item& item) const;

  const Grammar* g_;
  std::vector<char> nullable_;  // [rule]
  std::vector<Set> sets_;
  std::unordered_set<Item, ItemHash> seen_;  // the items of the last set
};

// The tokens whose bytes `recognizer` can consume from where it is, plus the end-of-generation
// tokens when what it consumed is a sentence; `recognizer` ends where it started. Exact for any
// grammar; a byte costs an Earley step: the reference the fast masks are compared with.
TokenMask ReferenceGrammarMask(const TokenTrie& trie, EarleyRecognizer* recognizer);

}  // namespace kvserve
