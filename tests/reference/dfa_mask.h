// The token mask of one byte automaton over a vocabulary (the tokens whose bytes keep it
// alive), by one walk of the token trie: the reference the grammar masks of
// engine/grammar/matcher.h are checked against for a regex or a choice, and what
// bench/grammar_masks.cpp times. Test code, not linked into kvserve.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/grammar/regex.h"
#include "engine/grammar/token_mask.h"
#include "engine/grammar/token_trie.h"

namespace kvserve {

// The tokens whose bytes keep `dfa` alive from `state` (each is the prefix of a match), plus
// the end-of-generation tokens when `state` accepts. Nothing when `state` is dead.
TokenMask DfaMask(const TokenTrie& trie, const ByteDfa& dfa, int32_t state);

// The masks of one automaton, each computed once (a DFA state's mask depends on the state
// alone). Not thread-safe; `trie` and `dfa` must outlive it.
class DfaMaskCache {
 public:
  DfaMaskCache(const TokenTrie* trie, const ByteDfa* dfa)
      : trie_(trie), dfa_(dfa), masks_(static_cast<size_t>(dfa->num_states())) {}
  // REQUIRES: state is a live state of the automaton.
  const TokenMask& Mask(int32_t state) {
    std::optional<TokenMask>& m = masks_[static_cast<size_t>(state)];
    if (!m) m = DfaMask(*trie_, *dfa_, state);
    return *m;
  }

 private:
  const TokenTrie* trie_;
  const ByteDfa* dfa_;
  std::vector<std::optional<TokenMask>> masks_;
};

}  // namespace kvserve
