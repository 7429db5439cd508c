#include "engine/sampling_params.h"

#include <cmath>
#include <sstream>
#include <unordered_set>

namespace kvserve {
namespace {

// Builds "INVALID_ARGUMENT: <field> must be <range>, got <value>".
template <typename T>
Status RangeError(std::string_view field, std::string_view range, const T& value) {
  std::ostringstream out;
  out << field << " must be " << range << ", got " << value;
  return InvalidArgumentError(out.str());
}

// NaN fails every comparison, so these reject NaN as well as out-of-range values.
bool InClosed(float v, float lo, float hi) { return v >= lo && v <= hi; }

}  // namespace

Status SamplingParams::Validate(int vocab_size) const {
  CHECK_GT(vocab_size, 0);
  if (!(temperature >= 0.0f && std::isfinite(temperature))) {
    return RangeError("temperature", "a finite number >= 0 (0 = greedy)", temperature);
  }
  if (top_k < -1) {
    return RangeError("top_k", "-1 or 0 (off) or >= 1", top_k);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return RangeError("top_p", "in (0, 1]", top_p);
  }
  if (!InClosed(min_p, 0.0f, 1.0f)) {
    return RangeError("min_p", "in [0, 1]", min_p);
  }
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty))) {
    return RangeError("repetition_penalty", "a finite number > 0 (1 = off)", repetition_penalty);
  }
  if (!InClosed(presence_penalty, -kMaxPenalty, kMaxPenalty)) {
    return RangeError("presence_penalty", "in [-2, 2]", presence_penalty);
  }
  if (!InClosed(frequency_penalty, -kMaxPenalty, kMaxPenalty)) {
    return RangeError("frequency_penalty", "in [-2, 2]", frequency_penalty);
  }
  std::unordered_set<int32_t> biased_ids;
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return RangeError("logit_bias token id",
                        "in [0, " + std::to_string(vocab_size) + ")", id);
    }
    if (!InClosed(bias, -kMaxLogitBias, kMaxLogitBias)) {
      return RangeError("logit_bias value for token " + std::to_string(id), "in [-100, 100]",
                        bias);
    }
    if (!biased_ids.insert(id).second) {
      return InvalidArgumentError("logit_bias lists token id " + std::to_string(id) +
                                  " more than once");
    }
  }
  if (max_tokens < 0) {
    return RangeError("max_tokens", ">= 0", max_tokens);
  }
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return RangeError("min_tokens", "in [0, max_tokens = " + std::to_string(max_tokens) + "]",
                      min_tokens);
  }
  if (stop.size() > static_cast<size_t>(kMaxStopStrings)) {
    return RangeError("stop", "at most 16 strings", std::to_string(stop.size()) + " strings");
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty() || stop[i].size() > static_cast<size_t>(kMaxStopStringBytes)) {
      return RangeError("stop[" + std::to_string(i) + "]", "1 to 256 bytes long",
                        std::to_string(stop[i].size()) + " bytes");
    }
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    const int32_t id = stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return RangeError("stop_token_ids[" + std::to_string(i) + "]",
                        "in [0, " + std::to_string(vocab_size) + ")", id);
    }
  }
  if (logprobs < -1 || logprobs > kMaxLogprobs) {
    return RangeError("logprobs", "-1 (off) or in [0, 20]", logprobs);
  }
  if (prompt_logprobs < -1 || prompt_logprobs > kMaxLogprobs) {
    return RangeError("prompt_logprobs", "-1 (off) or in [0, 20]", prompt_logprobs);
  }
  return OkStatus();
}

}  // namespace kvserve
