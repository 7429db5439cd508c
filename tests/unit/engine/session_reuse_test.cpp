// Chat sessions driven as OpenAI clients drive them: every turn re-sends the whole
// conversation, the assistant's replies as the text the server returned, rendered with the
// model's chat template and tokenized as the server does (ChatTemplate::RenderChat + Encode).
// Models: random weights over real vocabularies (../shared/tokenizer) with published
// templates, so replies re-tokenize differently, templates trim or add spaces, end-of-turn
// tokens and stop strings are cut, and byte-level pieces split UTF-8.
//
// Measured per turn, as issue 36 states it: of the previous turn's prompt and reply, the
// tokens computed again, prompt + completion of the previous turn - cached tokens of this
// one. The bound is 2 per turn on average (the reply's last sampled token, never computed,
// and the template's end-of-turn glue), window on or off, greedy or sampled.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine/tokenizer/chat_template.h"
#include "tests/chat_template_texts.h"
#include "tests/unit/engine/engine_test_util.h"
#include "tests/unit/engine/vocab_model_util.h"

namespace kvserve {
namespace session_reuse_test {

using testing::VocabModelSpec;

struct TemplateCase {
  const char* name;
  VocabModelSpec spec;
};

const TemplateCase kCases[] = {
    {"chatml_gpt2", {"gpt-2", testing::kOpenHermesChatml, {"<|im_start|>", "<|im_end|>"}, "", "<|im_end|>"}},
    {"llama3_gpt2",
     {"gpt-2", testing::kLlama3, {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
      "<|begin_of_text|>", "<|eot_id|>"}},
    {"llama2_spm", {"llama-spm", testing::kLlama2Chat, {}, "", ""}},
    {"mistral_spm", {"llama-spm", testing::kMixtral, {}, "", ""}},
    {"gemma_spm", {"llama-spm", testing::kGemma2, {"<start_of_turn>", "<end_of_turn>"}, "", "<end_of_turn>"}},
    {"phi3", {"phi-3", testing::kPhi3, {"<|user|>", "<|assistant|>", "<|system|>", "<|end|>"}, "", "<|end|>"}},
    {"zephyr_gpt2", {"gpt-2", testing::kZephyr, {"<|user|>", "<|assistant|>", "<|system|>"}, "", ""}},
};

// Models are built once per vocabulary and template.
std::shared_ptr<const Model> ModelFor(const TemplateCase& c) {
  static std::map<std::string, std::shared_ptr<const Model>> models;
  auto it = models.find(c.name);
  if (it == models.end()) it = models.emplace(c.name, testing::LoadVocabModel(c.spec)).first;
  return it->second;
}

std::string UserText(int turn) {
  static const char* kLines[] = {
      "Hello! Can you tell me a story about a dragon?", "That's nice. What happened next?",
      "Why did the dragon do that?",                    "Tell me about the village, then.",
      "Who lived there?  Describe them.",               "Was anyone afraid of the dragon?",
      "Give the story a happy ending, please.",         "Thanks! Summarise it in one line.",
  };
  return kLines[turn % 8];
}

struct ChatRun {
  std::vector<int> recomputed;  // per turn after the first
  int stop_string_turns = 0;
};

// `turns` turns of one session; every turn checks that cached_tokens is what the engine
// skipped (its prompt_tokens_total grows by the prompt minus the cached tokens).
ChatRun RunChat(Engine& engine, const Model& model, int turns, float temperature, std::vector<std::string> stop) {
  const Tokenizer& tok = model.tokenizer();
  const ChatTemplate tmpl = ChatTemplate::Detect(tok.vocab().chat_template, tok);
  std::vector<ChatMessage> messages = {{"user", UserText(0)}};
  ChatRun run;
  int prev_prompt = 0, prev_completion = 0;
  for (int turn = 0; turn < turns; ++turn) {
    StatusOr<RenderedChat> rendered = tmpl.RenderChat(messages, /*add_generation_prompt=*/true);
    EXPECT_TRUE(rendered.ok()) << rendered.status().ToString();
    if (!rendered.ok()) return run;
    GenerationRequest r;
    r.prompt_tokens = tmpl.Encode(*rendered, tok);
    r.session_id = "chat";
    r.tenant = "key";
    r.sampling.temperature = temperature;
    r.sampling.seed = 100 + turn;
    r.sampling.max_tokens = 24;
    r.sampling.stop = stop;
    const int64_t computed_before = engine.GetStats().prompt_tokens_total;
    const testing::RunResult res = testing::RunRequest(engine, r);
    EXPECT_TRUE(res.status.ok()) << res.status.ToString();
    if (!res.status.ok()) return run;
    // The stats are published after the step that ended the stream: wait for them.
    const int64_t computed_by_usage = res.usage.prompt_tokens - res.usage.cached_prompt_tokens;
    EXPECT_TRUE(testing::WaitFor(
        [&] { return engine.GetStats().prompt_tokens_total - computed_before == computed_by_usage; }, 5))
        << "turn " << turn << ": cached_tokens is not what the engine skipped: it computed "
        << engine.GetStats().prompt_tokens_total - computed_before << " prompt tokens, usage says "
        << computed_by_usage;
    if (turn > 0) run.recomputed.push_back(std::max(0, prev_prompt + prev_completion - res.usage.cached_prompt_tokens));
    run.stop_string_turns += !res.choices[0].matched_stop.empty();
    prev_prompt = res.usage.prompt_tokens;
    prev_completion = res.usage.completion_tokens;
    messages.push_back({"assistant", res.choices[0].text});
    messages.push_back({"user", UserText(turn + 1)});
  }
  return run;
}

double Mean(const std::vector<int>& v) {
  double sum = 0;
  for (int x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += std::to_string(x) + " ";
  return s;
}

// One test per template (the model is built once); inside, window off and on, greedy and
// sampled.
class SessionReuseTest : public ::testing::TestWithParam<int> {};

TEST_P(SessionReuseTest, ATurnRecomputesOnlyWhatIsNew) {
  const TemplateCase& c = kCases[GetParam()];
  REQUIRE_SHARED_FILE(testing::VocabFile(c.spec.vocab));
  std::shared_ptr<const Model> model = ModelFor(c);
  ASSERT_NE(model, nullptr);
  for (const bool window : {false, true}) {
    for (const float temperature : {0.0f, 0.9f}) {
      SCOPED_TRACE(std::string(c.name) + (window ? ", window 128" : ", no window") +
                   (temperature > 0 ? ", temperature 0.9" : ", greedy"));
      EngineConfig config = testing::TestConfig(512);
      if (window) config.chat_window_tokens = 128;  // the history outgrows it by the third turn
      auto engine = testing::MakeEngine(model, config);
      const ChatRun run = RunChat(*engine, *model, 8, temperature, {});
      ASSERT_EQ(run.recomputed.size(), 7u);
      EXPECT_LE(Mean(run.recomputed), 2.0) << "recomputed per turn: " << Join(run.recomputed);
      std::printf("%-12s %-9s %-7s recomputed per turn: mean %.2f (%s)\n", c.name, window ? "window" : "no window",
                  temperature > 0 ? "t=0.9" : "greedy", Mean(run.recomputed), Join(run.recomputed).c_str());
      if (window) {
        EXPECT_GT(engine->GetStats().cache.evicted_blocks[static_cast<int>(EvictionReason::kWindow)], 0)
            << "the window never evicted";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, SessionReuseTest, ::testing::Range(0, static_cast<int>(std::size(kCases))),
                         [](const auto& info) { return std::string(kCases[info.param].name); });

TEST(SessionReuseStopTest, AReplyCutByAStopStringIsReusedUpToTheCut) {
  const TemplateCase& c = kCases[0];
  REQUIRE_SHARED_FILE(testing::VocabFile(c.spec.vocab));
  std::shared_ptr<const Model> model = ModelFor(c);
  ASSERT_NE(model, nullptr);
  auto engine = testing::MakeEngine(model, testing::TestConfig(512));
  // Common letters: most replies of random weights stop on one of them.
  const ChatRun run = RunChat(*engine, *model, 8, 0.9f, {"e", "a", "o"});
  ASSERT_EQ(run.recomputed.size(), 7u);
  EXPECT_GE(run.stop_string_turns, 4) << "too few replies ended on a stop string to test anything";
  // Beyond the last sampled token and the glue: the stop string's own tokens, one or two.
  EXPECT_LE(Mean(run.recomputed), 4.0) << "recomputed per turn: " << Join(run.recomputed);
}

}  // namespace session_reuse_test
}  // namespace kvserve
