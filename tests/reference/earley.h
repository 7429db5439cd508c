// EarleyRecognizer: follows a byte string through a Grammar (grammar.h), byte by byte: which
// bytes may come next, whether the string so far is a sentence, and undo. Any context-free
// grammar (left recursion, ambiguity, empty rules: Earley with Aycock and Horspool's nullable
// completion). It is the reference matcher of engine/grammar, against which the fast token
// masks of what follows are checked; one chart set per byte, so memory grows with the text.
//
// Not thread-safe; `grammar` must outlive it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/grammar/grammar.h"

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
  // Adds `item` to the last set unless there.
  void Add(const Item& item);
  // Predictions and completions of the last set.
  void Close();
  const GrammarSymbol* Next(const Item& item) const;

  const Grammar* g_;
  std::vector<char> nullable_;         // [rule]
  std::vector<std::vector<Item>> sets_;
};

}  // namespace kvserve
