// MaskBench (JSONSchemaBench's mask benchmark, arXiv 2501.10868) over kvserve's grammar
// engine: per file, compile the schema (time to first mask: compile + the first mask), then
// for each test instance serialize it as Python's json.dumps(data, ensure_ascii=False) does,
// tokenize it without special tokens and, token by token, compute the mask (timed: time
// between masks) and check the token is in it; then end-of-text. A valid instance must be
// allowed to the end, an invalid one refused somewhere. See ../shared/structured/README.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/matcher.h"
#include "engine/grammar/token_trie.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

struct MaskBenchResult {
  std::string file;
  // passing, compile_error, validation_error, invalidation_error, timeout (or read_error)
  std::string status;
  std::string detail;     // what failed: the compile error, or the test and token refused
  double ttfm_us = 0;     // compile + first mask
  int num_tokens = 0;     // tokens checked (all tests)
  std::vector<double> tbm_us;  // each mask after the first (the one in ttfm_us)
  double tbm_us_max = 0;
};

struct MaskBenchOptions {
  double time_limit_s = 60;  // per file
  // The trie walks every grammar over the vocabulary may reuse, as the engine shares them
  // between requests; null: each file starts cold.
  std::shared_ptr<SharedMaskCache> shared_masks;
};

// One MaskBench file. `trie` is over `tokenizer`'s vocabulary.
MaskBenchResult RunMaskBenchFile(const std::string& path, const Tokenizer& tokenizer, const TokenTrie& trie,
                                 const MaskBenchOptions& options);

// Python's json.dumps(value, ensure_ascii=False): ", " and ": " separators, floats as repr.
std::string PythonJsonDumps(const nlohmann::ordered_json& value);

}  // namespace kvserve
