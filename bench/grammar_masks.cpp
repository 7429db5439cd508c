// bench_grammar_masks: the time of one token mask (tests/reference/dfa_mask.h) over a real vocabulary
// for regex constraints at states that allow many tokens (inside a JSON string: most of the
// vocabulary) and few (a number, a choice), against checking each token's bytes on its own
// (what a mask costs without the trie), and a mask served by DfaMaskCache once its state was
// seen (a copy of the bitset), one thread. Prints a Markdown table.
//
//   bench_grammar_masks [VOCAB.gguf ...]   (default: ../shared/tokenizer's deepseek-llm, gpt-2, llama-spm)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/grammar/regex.h"
#include "engine/grammar/token_trie.h"
#include "tests/reference/dfa_mask.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"

namespace {

using namespace kvserve;

// Median of `reps` timings of fn, in microseconds.
template <typename F>
double MedianUs(int reps, F&& fn) {
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    const auto t = std::chrono::steady_clock::now();
    fn();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files(argv + 1, argv + argc);
  if (files.empty()) {
    for (const char* v : {"deepseek-llm", "gpt-2", "llama-spm"}) {
      files.push_back(std::string(KVSERVE_SHARED_DIR) + "/tokenizer/ggml-vocab-" + v + ".gguf");
    }
  }
  struct Case {
    const char* name;
    const char* pattern;
    const char* prefix;
  };
  const Case kCases[] = {
      {"JSON string content", "^\"([^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4})*\"$", "\"the "},
      {"JSON number", "^-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?$", "-12"},
      {"date (format)", "^\\d{4}-\\d{2}-\\d{2}$", "2024-"},
      {"choice of 3", "^(apple|banana|cherry)$", ""},
  };
  std::printf("| vocabulary | tokens | trie nodes | constraint | allowed | trie walk (us) | token by token (us) | "
              "speed-up | cached (us) |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& path : files) {
    auto file = GgufFile::Open(path);
    if (!file.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), file.status().ToString().c_str());
      return 1;
    }
    auto vocab = LoadVocab(**file);
    auto tok = vocab.ok() ? Tokenizer::Create(std::move(vocab).value()) : vocab.status();
    if (!tok.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), tok.status().ToString().c_str());
      return 1;
    }
    const TokenTrie trie(**tok);
    const std::string name = path.substr(path.find_last_of('/') + 1);
    for (const Case& c : kCases) {
      StatusOr<ByteDfa> dfa = CompileRegex(c.pattern);
      if (!dfa.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name, dfa.status().ToString().c_str());
        return 1;
      }
      const int32_t state = dfa->Walk(dfa->start, c.prefix);
      int allowed = 0;
      const double mask_us = MedianUs(51, [&] { allowed = DfaMask(trie, *dfa, state).Count(); });
      const double each_us = MedianUs(5, [&] {
        TokenMask m(trie.vocab_size());
        for (int32_t id = 0; id < trie.vocab_size(); ++id) {
          if (!trie.bytes(id).empty() && dfa->Walk(state, trie.bytes(id)) >= 0) m.Set(id);
        }
      });
      DfaMaskCache cache(&trie, &*dfa);
      cache.Mask(state);
      TokenMask copy;
      const double cached_us = MedianUs(51, [&] { copy = cache.Mask(state); });
      std::printf("| %s | %d | %d | %s | %d | %.1f | %.1f | %.1fx | %.2f |\n", name.c_str(), trie.vocab_size(),
                  trie.num_nodes(), c.name, allowed, mask_us, each_us, each_us / mask_us, cached_us);
    }
  }
  return 0;
}
