// ReasoningParser: a reply's <think> part (and harmony's analysis channel) apart from its
// content, the same whether the text comes whole or in deltas cut anywhere (every split point
// of each case is tried).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/api/reasoning.h"
#include "server/api/tool_calls.h"

namespace kvserve {
namespace reasoning_test {

struct Case {
  std::string text;
  bool starts_open;
  std::string reasoning;
  std::string content;
};

// Feeds each case in three pieces cut at every pair of points.
template <typename MakeParser>
void ExpectSplits(const std::vector<Case>& cases, MakeParser make) {
  for (const Case& c : cases) {
    for (size_t cut1 = 0; cut1 <= c.text.size(); ++cut1) {
      for (size_t cut2 = cut1; cut2 <= c.text.size(); ++cut2) {
        std::unique_ptr<ReasoningParser> p = make(c);
        std::string reasoning, content;
        for (const std::string_view piece : {std::string_view(c.text).substr(0, cut1),
                                             std::string_view(c.text).substr(cut1, cut2 - cut1),
                                             std::string_view(c.text).substr(cut2)}) {
          const ReasoningParser::Delta d = p->Feed(piece);
          reasoning += d.reasoning;
          content += d.content;
        }
        const ReasoningParser::Delta end = p->Finish();
        reasoning += end.reasoning;
        content += end.content;
        EXPECT_EQ(reasoning, c.reasoning) << c.text << " cut at " << cut1 << ", " << cut2;
        EXPECT_EQ(content, c.content) << c.text << " cut at " << cut1 << ", " << cut2;
        EXPECT_EQ(p->reasoning(), c.reasoning);
        EXPECT_EQ(p->content(), c.content);
      }
    }
  }
}

TEST(ReasoningTest, SplitsThinkingFromContentWhereverDeltasAreCut) {
  const std::vector<Case> cases = {
      {"<think>\nLet me see.\n</think>\n\nThe answer is 4.", false, "\nLet me see.\n", "The answer is 4."},
      {"  <think>a</think>b", false, "a", "b"},
      {"Let me see.</think>It is 4.", true, "Let me see.", "It is 4."},  // the prompt opened it
      {"The answer is 4.", false, "", "The answer is 4."},
      {"  plain <think>not at the start</think>", false, "", "  plain <think>not at the start</think>"},
      {"<think>never closed", false, "never closed", ""},
      {"still thinking <", true, "still thinking <", ""},
      {"<thi", false, "", "<thi"},  // a tag cut by the end of the reply is content
      {"<think></think>", false, "", ""},
      {"x</think", true, "x</think", ""},
      {"a<</think>b", true, "a<", "b"},
  };
  ExpectSplits(cases, [](const Case& c) { return std::make_unique<ThinkTagParser>(ReasoningTags{}, c.starts_open); });
}

// gpt-oss's replies (after the generation prompt's "<|start|>assistant"): the analysis channel
// is reasoning, final is content, a message to functions.NAME a call in the template's syntax
// (gpt-oss's, as kvserve derives it from openai-gpt-oss-120b.jinja).
TEST(ReasoningTest, HarmonyChannels) {
  ToolSyntax gpt_oss;
  gpt_oss.kind = ToolSyntax::Kind::kLiteral;
  gpt_oss.call_begin = "to=functions.";
  gpt_oss.name_end = "<|channel|>commentary json<|message|>";
  gpt_oss.parallel = false;
  const std::string call = "to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}";
  const std::vector<Case> cases = {
      {"<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.", false,
       "Let me think.", "It is 4."},
      {"<|channel|>final<|message|>Hi <there>|", false, "", "Hi <there>|"},
      {"<|channel|>analysis<|message|>Weather needed.<|end|><|start|>assistant<|channel|>commentary "
       "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
       false, "Weather needed.", call},
      {" to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}", false, "", call},
      {"<|channel|>analysis<|message|>cut short", false, "cut short", ""},
      {"Plain text.", false, "", "Plain text."},
  };
  ExpectSplits(cases, [&](const Case&) { return std::make_unique<HarmonyParser>(&gpt_oss); });
  // The call passed on parses as one.
  ToolCallParser calls(gpt_oss);
  (void)calls.Feed(call);
  (void)calls.Finish();
  ASSERT_EQ(calls.calls().size(), 1u);
  EXPECT_EQ(calls.calls()[0].name, "get_weather");
  EXPECT_EQ(calls.calls()[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(calls.content(), "");
}

}  // namespace reasoning_test
}  // namespace kvserve
