// DfaMask (see dfa_mask.h).
#include "tests/reference/dfa_mask.h"

namespace kvserve {

TokenMask DfaMask(const TokenTrie& trie, const ByteDfa& dfa, int32_t state) {
  TokenMask mask(trie.vocab_size());
  if (state < 0) return mask;
  // states[d]: the DFA state after the first d bytes of the current path.
  std::vector<int32_t> states(static_cast<size_t>(trie.max_depth()) + 1);
  states[0] = state;
  for (int32_t i = 1; i < trie.num_nodes();) {
    const TokenTrie::Node& node = trie.node(i);
    const int32_t s = dfa.Step(states[node.depth - 1u], node.byte);
    if (s < 0) {
      i = node.end;  // no token below this prefix can match
      continue;
    }
    states[node.depth] = s;
    for (int32_t t : trie.tokens_at(i)) mask.Set(t);
    ++i;
  }
  if (dfa.Accepts(state)) {
    for (int32_t id : trie.eog_tokens()) mask.Set(id);
  }
  return mask;
}

}  // namespace kvserve
