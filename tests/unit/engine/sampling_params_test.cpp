// SamplingParams::Validate: the defaults are valid, each out-of-range field is refused by
// name, and the message states the allowed range.
#include "engine/sampling_params.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvserve {
namespace sampling_params_test {

TEST(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_TRUE(SamplingParams{}.Validate(32000).ok());
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_k = -1;
  params.max_tokens = 0;
  params.logprobs = 20;
  params.logit_bias = {{0, -100.0f}, {31999, 100.0f}};
  params.stop = {"a", std::string(256, 'x')};
  params.stop_token_ids = {2, 31999};
  params.presence_penalty = -2.0f;
  params.frequency_penalty = 2.0f;
  params.min_p = 1.0f;
  EXPECT_TRUE(params.Validate(32000).ok()) << params.Validate(32000).ToString();
}

TEST(SamplingParamsTest, RejectsEachOutOfRangeFieldByName) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::string field;
    std::function<void(SamplingParams&)> mutate;
  };
  const std::vector<Case> cases = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [nan](SamplingParams& p) { p.temperature = nan; }},
      {"temperature", [](SamplingParams& p) { p.temperature = INFINITY; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty", [nan](SamplingParams& p) { p.repetition_penalty = nan; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = -2.01f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -3.0f; }},
      {"frequency_penalty", [nan](SamplingParams& p) { p.frequency_penalty = nan; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{100, 1.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{5, 100.5f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{5, 1.0f}, {5, 2.0f}}; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = -1; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = -1; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = 17; }},  // > max_tokens = 16
      {"stop", [](SamplingParams& p) { p.stop.assign(17, "x"); }},
      {"stop[1]", [](SamplingParams& p) { p.stop = {"ok", ""}; }},
      {"stop[0]", [](SamplingParams& p) { p.stop = {std::string(257, 'x')}; }},
      {"stop_token_ids[0]", [](SamplingParams& p) { p.stop_token_ids = {100}; }},
      {"stop_token_ids[1]", [](SamplingParams& p) { p.stop_token_ids = {1, -5}; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -2; }},
  };
  for (const Case& c : cases) {
    SamplingParams params;
    c.mutate(params);
    const Status status = params.Validate(100);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(status.message().rfind(c.field, 0), 0u)
        << "message should start with the field name '" << c.field << "': " << status.message();
  }
}

TEST(SamplingParamsTest, MessageStatesTheAllowedRange) {
  SamplingParams params;
  params.top_p = 1.5f;
  EXPECT_EQ(params.Validate(10).message(), "top_p must be in (0, 1], got 1.5");
  params = SamplingParams{};
  params.logprobs = 25;
  EXPECT_EQ(params.Validate(10).message(), "logprobs must be -1 (off) or in [0, 20], got 25");
}

}  // namespace sampling_params_test
}  // namespace kvserve
