// Tests for StopMatcher: exact emitted text per delta, held-back tails, which stop string
// matched, and that the outcome does not depend on how the text is split into deltas.
#include "engine/stop_matcher.h"

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvserve {
namespace stop_matcher_test {

struct StopRun {
  std::vector<std::string> emitted;  // per Feed
  std::string total;                 // all emitted text, Finish() included
  std::optional<size_t> stop_index;
};

StopRun FeedAll(std::vector<std::string> stops, const std::vector<std::string>& deltas) {
  StopMatcher matcher(std::move(stops));
  StopRun run;
  for (const std::string& delta : deltas) {
    StopMatcherOutput out = matcher.Feed(delta);
    run.emitted.push_back(out.text);
    run.total += out.text;
    if (out.stop_index) {
      EXPECT_FALSE(run.stop_index.has_value()) << "a stop is reported once";
      run.stop_index = out.stop_index;
    }
  }
  run.total += matcher.Finish();
  EXPECT_EQ(matcher.matched_index(), run.stop_index);
  return run;
}

std::vector<std::string> Bytes(const std::string& text) {
  std::vector<std::string> out;
  for (char c : text) out.emplace_back(1, c);
  return out;
}

TEST(StopMatcherTest, StopSpanningDeltasEmitsOnlyTextBeforeIt) {
  const StopRun run = FeedAll({"lo w"}, {"Hel", "lo wor", "ld"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"He", "l", ""}));
  EXPECT_EQ(run.total, "Hel");
  EXPECT_EQ(run.stop_index, 0u);
}

TEST(StopMatcherTest, HeldBackPrefixReleasedByFinish) {
  StopMatcher matcher({"world"});
  EXPECT_EQ(matcher.Feed("hello wor").text, "hello ");
  EXPECT_EQ(matcher.held(), "wor");
  EXPECT_EQ(matcher.Feed("k").text, "work");  // "work" can no longer become "world"
  EXPECT_EQ(matcher.Feed(" wo").text, " ");
  EXPECT_EQ(matcher.Finish(), "wo");
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.Finish(), "");
  EXPECT_EQ(matcher.Feed("more").text, "");  // after Finish: no-op
}

TEST(StopMatcherTest, NoStopStringsPassesThrough) {
  const StopRun run = FeedAll({}, {"a", "bc", ""});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_FALSE(run.stop_index.has_value());
}

TEST(StopMatcherTest, TextAfterTheStopInTheSameDeltaIsDropped) {
  const StopRun run = FeedAll({"\n\n"}, {"para\n\nnext", "more"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"para", ""}));
  EXPECT_EQ(run.total, "para");
}

TEST(StopMatcherTest, EarliestMatchWinsAmongSeveral) {
  const StopRun run = FeedAll({"world", "lo"}, {"hello world"});
  EXPECT_EQ(run.total, "hel");
  EXPECT_EQ(run.stop_index, 1u);

  // "bc" completes before "abcd" does, however the text is split.
  for (const auto& deltas : {std::vector<std::string>{"xabcd"}, Bytes("xabcd"),
                             std::vector<std::string>{"xa", "bcd"}}) {
    const StopRun r = FeedAll({"abcd", "bc"}, deltas);
    EXPECT_EQ(r.total, "xa");
    EXPECT_EQ(r.stop_index, 1u);
  }
  // Both complete on the same byte: the one that starts first wins.
  const StopRun same_end = FeedAll({"bc", "abc"}, {"xab", "c"});
  EXPECT_EQ(same_end.total, "x");
  EXPECT_EQ(same_end.stop_index, 1u);
}

TEST(StopMatcherTest, StopAtTheVeryStart) {
  const StopRun whole = FeedAll({"Hi"}, {"Hi there"});
  EXPECT_EQ(whole.emitted, (std::vector<std::string>{""}));
  EXPECT_EQ(whole.total, "");
  EXPECT_EQ(whole.stop_index, 0u);
  const StopRun split = FeedAll({"Hi"}, {"H", "i", " there"});
  EXPECT_EQ(split.emitted, (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ(split.stop_index, 0u);
}

TEST(StopMatcherTest, OverlappingPartialMatchRestarts) {
  // "aaab" with stop "aab": the first 'a' is released once "aaa" shows it cannot start it.
  const StopRun run = FeedAll({"aab"}, Bytes("aaab"));
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_EQ(run.total, "a");
  EXPECT_EQ(run.stop_index, 0u);
}

TEST(StopMatcherTest, UnicodeStopStrings) {
  // "世" is 3 bytes; it is held whole (it starts "世界") and never split.
  const StopRun run = FeedAll({"世界"}, {"你好世", "界!"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"你好", ""}));
  EXPECT_EQ(run.total, "你好");
  EXPECT_EQ(run.stop_index, 0u);

  const StopRun no_match = FeedAll({"世界"}, {"你好世", "人"});
  EXPECT_EQ(no_match.emitted, (std::vector<std::string>{"你好", "世人"}));

  const StopRun accent = FeedAll({"café!", "🙂"}, {"un caf", "é", " 🙂 x"});
  EXPECT_EQ(accent.emitted, (std::vector<std::string>{"un ", "", "café "}));
  EXPECT_EQ(accent.stop_index, 1u);
}

TEST(StopMatcherTest, SameOutcomeForEverySplit) {
  const std::string text = "The answer is 42.\nObservation: done";
  const std::vector<std::string> stops = {"Observation:", "\nObs", "42!"};
  const StopRun reference = FeedAll(stops, {text});
  EXPECT_EQ(reference.total, "The answer is 42.");
  EXPECT_EQ(reference.stop_index, 1u);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const StopRun r = FeedAll(stops, {text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(r.total, reference.total) << "cut " << cut;
    EXPECT_EQ(r.stop_index, reference.stop_index) << "cut " << cut;
  }
  const StopRun bytes = FeedAll(stops, Bytes(text));
  EXPECT_EQ(bytes.total, reference.total);
}

TEST(StopMatcherTest, FinishAfterStopReturnsNothing) {
  StopMatcher matcher({"END"});
  const StopMatcherOutput out = matcher.Feed("abcENDdef");
  EXPECT_EQ(out.text, "abc");
  EXPECT_EQ(out.stop_index, 0u);
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.Feed("more").text, "");
  EXPECT_FALSE(matcher.Feed("more").stop_index.has_value());
  EXPECT_EQ(matcher.Finish(), "");
}

}  // namespace stop_matcher_test
}  // namespace kvserve
