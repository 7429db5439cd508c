// GrammarCache: the compiled grammars the engine keeps for structured outputs.
//
// GrammarCache compiles a spec for a vocabulary and keeps the result by content (kind,
// options and text; least recently used out first), so the requests of an agent that sends one
// schema again and again compile it once; its grammars share their trie walks
// (SharedMaskCache), so a new schema made of familiar strings and numbers masks fast too. Compiling also computes the first mask (the start
// state's cached part), so a request's first sampled token does not wait for it. Thread-safe:
// front-end threads compile (a slow compile holds its own request only); the token trie over
// the vocabulary is built by the first compile.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/grammar/lru_cache.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/output_spec.h"
#include "engine/grammar/token_trie.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

class GrammarCache {
 public:
  // `tokenizer` must outlive the cache. capacity: grammars kept (>= 1), in all at most
  // `max_bytes` as they were when compiled (CompiledGrammar::ApproxBytes; the newest stays).
  GrammarCache(const Tokenizer* tokenizer, size_t capacity, std::chrono::milliseconds time_limit,
               size_t max_bytes = size_t{1} << 30);

  struct Compiled {
    std::shared_ptr<CompiledGrammar> grammar;
    std::vector<std::string> ignored;  // lenient schemas: what was not enforced
    bool cache_hit = false;
    double compile_seconds = 0;        // 0 on a hit
  };
  // INVALID_ARGUMENT for a malformed or unsupported spec or one past a limit (the message
  // says what and where), DEADLINE_EXCEEDED when compiling takes longer than the time limit.
  // A spec that failed is remembered (by a SHA-256 of it; the last 1,024) and refused at once
  // with the same status when it comes back: a client that retries a 40 s schema costs one
  // compile. REQUIRES: spec.active().
  [[nodiscard]] StatusOr<Compiled> Get(const StructuredOutputSpec& spec);
  size_t cached_bytes() const { return compiled_.cost(); }
  int64_t num_compiles() const { return num_compiles_.load(); }  // attempts, failed ones too


 private:
  struct Entry {
    std::shared_ptr<CompiledGrammar> grammar;
    std::vector<std::string> ignored;
  };
  const TokenTrie* Trie();
  StatusOr<Compiled> Compile(const StructuredOutputSpec& spec, const std::string& key);

  const Tokenizer* tokenizer_;
  const std::chrono::milliseconds time_limit_;
  std::once_flag trie_once_;
  std::unique_ptr<TokenTrie> trie_;
  std::shared_ptr<SharedMaskCache> shared_masks_;  // walks its grammars share
  LruCache<std::shared_ptr<const Entry>> compiled_;
  LruCache<std::shared_ptr<const Status>> failed_;  // by SHA-256 of the key
  std::atomic<int64_t> num_compiles_{0};
};

}  // namespace kvserve
