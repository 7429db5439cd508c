// ReasoningParser: a reply's <think> part apart from its content, the same whether the text
// comes whole or in deltas cut anywhere (every split point of each case is tried).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/api/reasoning.h"

namespace kvserve {
namespace reasoning_test {

struct Case {
  std::string text;
  bool starts_open;
  std::string reasoning;
  std::string content;
};

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
  for (const Case& c : cases) {
    for (size_t cut1 = 0; cut1 <= c.text.size(); ++cut1) {
      for (size_t cut2 = cut1; cut2 <= c.text.size(); ++cut2) {
        ReasoningParser p(ReasoningTags{}, c.starts_open);
        std::string reasoning, content;
        for (const std::string_view piece : {std::string_view(c.text).substr(0, cut1),
                                             std::string_view(c.text).substr(cut1, cut2 - cut1),
                                             std::string_view(c.text).substr(cut2)}) {
          const ReasoningParser::Delta d = p.Feed(piece);
          reasoning += d.reasoning;
          content += d.content;
        }
        const ReasoningParser::Delta end = p.Finish();
        reasoning += end.reasoning;
        content += end.content;
        EXPECT_EQ(reasoning, c.reasoning) << c.text << " cut at " << cut1 << ", " << cut2;
        EXPECT_EQ(content, c.content) << c.text << " cut at " << cut1 << ", " << cut2;
        EXPECT_EQ(p.reasoning(), c.reasoning);
        EXPECT_EQ(p.content(), c.content);
      }
    }
  }
}

}  // namespace reasoning_test
}  // namespace kvserve
