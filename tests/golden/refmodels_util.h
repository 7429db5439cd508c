// The llama.cpp reference distributions of ../shared/refmodels (read its README) and the
// teacher-forced comparison with them, for any backend: tests/golden/refmodels_test.cpp runs it
// on the CPU backend, tests/gpu/cuda_refmodels_test.cpp on the CUDA one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/model/weights.h"
#include "tests/test_paths.h"

namespace kvserve::testing {

inline constexpr char kRefModelsJsonl[] = "refmodels/llamacpp-refs.jsonl";

// The reference lines of kRefModelsJsonl by model file name.
inline std::map<std::string, std::vector<nlohmann::json>> LoadRefsByModel() {
  std::map<std::string, std::vector<nlohmann::json>> by_model;
  std::ifstream in(SharedPath(kRefModelsJsonl));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) {
      nlohmann::json j = nlohmann::json::parse(line);
      by_model[j["model"].get<std::string>()].push_back(std::move(j));
    }
  }
  return by_model;
}

// log-softmax of `logits`.
inline std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(x - max);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - max - std::log(sum);
  return out;
}

struct Agreement {
  int steps = 0;
  int top1 = 0;
  double abs_logprob_sum = 0;
  int compared = 0;
  double max_abs_logprob = 0;
  double top1_share() const { return static_cast<double>(top1) / steps; }
  double mean_abs_logprob() const { return abs_logprob_sum / compared; }
};

// Computes tokens at positions [start, start + n) of one sequence (a fresh one per reference
// line) and returns the last one's logits.
using RunTokens = std::function<std::vector<float>(std::span<const int32_t> tokens, int start)>;

// The prompt in one step, then each reference token forced in turn; compares every step's
// distribution with the reference's top 10 and adds to `a`.
inline void TeacherForce(const Model& model, const nlohmann::json& ref, const RunTokens& run, Agreement* a) {
  const ModelConfig& c = model.config();
  const auto tokens = ref["tokens"].get<std::vector<int32_t>>();
  // [first, last]: the 256 byte tokens of the SentencePiece vocabulary.
  const auto banned = ref["banned_token_ids"].get<std::array<int32_t, 2>>();
  std::vector<int32_t> all = ref["prompt_tokens"].get<std::vector<int32_t>>();
  std::vector<bool> excluded(c.vocab_size);
  for (int t = 0; t < c.vocab_size; ++t) {
    excluded[t] = (t >= banned[0] && t <= banned[1]) || model.tokenizer().IsEndOfGeneration(t);
  }
  int computed = 0;
  for (size_t step = 0; step < tokens.size(); ++step) {
    const std::vector<float> logits = run(std::span(all).subspan(computed), computed);
    computed = static_cast<int>(all.size());

    const std::vector<double> lp = LogSoftmax(logits);
    int best = -1;
    for (int t = 0; t < c.vocab_size; ++t) {
      if (!excluded[t] && (best < 0 || lp[t] > lp[best])) best = t;
    }
    ++a->steps;
    a->top1 += best == tokens[step];
    for (const auto& pair : ref["top_logprobs"][step]) {
      const double d = std::abs(lp[pair[0].get<int>()] - pair[1].get<double>());
      a->abs_logprob_sum += d;
      a->max_abs_logprob = std::max(a->max_abs_logprob, d);
      ++a->compared;
    }
    all.push_back(tokens[step]);
  }
}

}  // namespace kvserve::testing
