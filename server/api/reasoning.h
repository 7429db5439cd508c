// ReasoningParser: a reply's thinking apart from its content, for templates of the `<think>`
// families (DeepSeek R1 and its distills, Qwen3, QwQ, and any template that writes the tags):
// the text between the open and close tags is reasoning, the rest content. When the prompt
// already opened the tag (the generation prompt ends with "<think>"), the reply starts inside
// it. A reply that never closes it is all reasoning if it started inside, else (no open tag
// first) all content. Whitespace right after the close tag is dropped, as llama.cpp does.
//
// Fed text deltas in order (streaming), it holds back what may be the start of a tag until
// the next delta decides. Not thread-safe; one per choice.
#pragma once

#include <string>
#include <string_view>

namespace kvserve {

struct ReasoningTags {
  std::string open = "<think>";
  std::string close = "</think>";
};

class ReasoningParser {
 public:
  // `starts_open`: the prompt ended inside the open tag.
  ReasoningParser(ReasoningTags tags, bool starts_open);

  struct Delta {
    std::string reasoning;
    std::string content;
  };
  Delta Feed(std::string_view text);
  // The text held back, once the reply is over.
  Delta Finish();

  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }

 private:
  enum class State { kStart, kReasoning, kAfter, kContent };
  void Emit(Delta* out, std::string_view text, bool reasoning);

  ReasoningTags tags_;
  State state_;
  std::string held_;  // undecided text (a tag's possible beginning, or leading whitespace)
  std::string reasoning_, content_;
};

}  // namespace kvserve
