// GrammarCache: the compiled grammars the engine keeps for structured outputs.
//
// GrammarCache compiles a spec for a vocabulary and keeps the result by content (kind,
// options and text; least recently used out first), so the requests of an agent that sends one
// schema again and again compile it once; its grammars share their trie walks
// (SharedMaskCache), so a new schema made of familiar strings and numbers masks fast too.
// Compiling also computes the first mask (the start state's cached part), so a request's first
// sampled token does not wait for it. Compiles run on threads of the cache's own
// (GrammarLimits::compile_threads), never on the caller's: a caller waits for its result up to
// the compile timeout, requests of one spec share one compile, and past
// max_waiting_compiles queued compiles a new one is refused at once. Thread-safe; the token
// trie over the vocabulary is built by the first compile.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/grammar/grammar_limits.h"
#include "engine/grammar/lru_cache.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/output_spec.h"
#include "engine/grammar/token_trie.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

class GrammarCache {
 public:
  // `tokenizer` must outlive the cache.
  explicit GrammarCache(const Tokenizer* tokenizer, GrammarLimits limits = {});
  ~GrammarCache();  // compiles queued are refused (UNAVAILABLE); a running one is waited for
  GrammarCache(const GrammarCache&) = delete;
  GrammarCache& operator=(const GrammarCache&) = delete;

  struct Compiled {
    std::shared_ptr<CompiledGrammar> grammar;
    std::vector<std::string> ignored;  // lenient schemas: what was not enforced
    bool cache_hit = false;
    double compile_seconds = 0;        // 0 on a hit
  };
  // INVALID_ARGUMENT for a malformed or unsupported spec or one past a limit (the message
  // says what and where); DEADLINE_EXCEEDED when its compile runs longer than the compile
  // timeout (the caller stops waiting then, the compile goes on and keeps its result);
  // RESOURCE_EXHAUSTED (retry later) when max_waiting_compiles compiles are queued already, or
  // when it waited the whole timeout for a compile thread.
  // A spec that failed is remembered (by a SHA-256 of it; the last 1,024) and refused at once
  // with the same status when it comes back: a client that retries a 40 s schema costs one
  // compile. REQUIRES: spec.active().
  [[nodiscard]] StatusOr<Compiled> Get(const StructuredOutputSpec& spec);
  const GrammarLimits& limits() const { return limits_; }
  size_t cached_bytes() const { return compiled_.cost(); }
  size_t shared_mask_bytes() const { return shared_masks_->cost(); }
  int64_t num_compiles() const { return num_compiles_.load(); }  // started, failed ones too
  int num_compiling() const;                                      // queued or running

 private:
  struct Entry {
    std::shared_ptr<CompiledGrammar> grammar;
    std::vector<std::string> ignored;
  };
  struct Job {
    StructuredOutputSpec spec;
    std::string key;
    std::promise<StatusOr<Compiled>> done;
  };
  const TokenTrie* Trie();
  void CompileLoop();
  StatusOr<Compiled> Compile(const StructuredOutputSpec& spec, const std::string& key);

  const Tokenizer* tokenizer_;
  const GrammarLimits limits_;
  std::once_flag trie_once_;
  std::unique_ptr<TokenTrie> trie_;
  std::shared_ptr<SharedMaskCache> shared_masks_;  // walks its grammars share
  LruCache<std::shared_ptr<const Entry>> compiled_;
  LruCache<std::shared_ptr<const Status>> failed_;  // by SHA-256 of the key
  std::atomic<int64_t> num_compiles_{0};

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable work_cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  // Compiles queued or running, by key: a second request of one spec waits for the first's.
  std::map<std::string, std::shared_future<StatusOr<Compiled>>> in_flight_;
  bool stop_ = false;
  int idle_ = 0;  // compile threads waiting for a job
  std::vector<std::thread> threads_;
};

}  // namespace kvserve
