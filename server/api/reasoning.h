// ReasoningParser: a reply's thinking apart from its content.
//
// ThinkTagParser, for templates of the `<think>` families (DeepSeek R1 and its distills, Qwen3,
// QwQ, and any template that writes the tags): the text between the open and close tags is
// reasoning, the rest content. When the prompt already opened the tag (the generation prompt
// ends with "<think>"), the reply starts inside it. A reply that never closes it is all
// reasoning if it started inside, else (no open tag first) all content. Whitespace right after
// the close tag is dropped, as llama.cpp does.
//
// HarmonyParser, for gpt-oss's harmony format: the reply is messages, each a header up to
// <|message|> (`<|channel|>analysis`, `<|channel|>commentary to=functions.NAME <|constrain|>json`,
// or the recipient first: ` to=functions.NAME<|channel|>commentary json`), a body, and an end
// (<|end|>, <|call|>, <|return|>, or the next <|start|>). The `analysis` channel is reasoning;
// `final` and other messages are content; a message to `functions.NAME` is a tool call, passed
// on in the content as the template's own call syntax writes it (ToolCallParser reads it).
// The output must carry harmony's control tokens as text (GenerationRequest::shown_controls).
//
// Fed text deltas in order (streaming), they hold back what may be the start of a tag until
// the next delta decides. Not thread-safe; one per choice.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tool_syntax.h"

namespace kvserve {

class ReasoningParser {
 public:
  struct Delta {
    std::string reasoning;
    std::string content;
  };
  virtual ~ReasoningParser() = default;
  virtual Delta Feed(std::string_view text) = 0;
  // The text held back, once the reply is over.
  virtual Delta Finish() = 0;

  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }

 protected:
  void Emit(Delta* out, std::string_view text, bool reasoning);

 private:
  std::string reasoning_, content_;
};

struct ReasoningTags {
  std::string open = "<think>";
  std::string close = "</think>";
};

class ThinkTagParser : public ReasoningParser {
 public:
  // `starts_open`: the prompt ended inside the open tag.
  ThinkTagParser(ReasoningTags tags, bool starts_open);
  Delta Feed(std::string_view text) override;
  Delta Finish() override;

 private:
  enum class State { kStart, kReasoning, kAfter, kContent };

  ReasoningTags tags_;
  State state_;
  std::string held_;  // undecided text (a tag's possible beginning, or leading whitespace)
};

class HarmonyParser : public ReasoningParser {
 public:
  // `calls`: the syntax tool calls are passed on in (nullptr: a call's arguments are content).
  explicit HarmonyParser(const ToolSyntax* calls);
  Delta Feed(std::string_view text) override;
  Delta Finish() override;

  // The control tokens harmony's markup is made of.
  static const std::vector<std::string>& Controls();

 private:
  // The header read: where the body goes.
  void StartBody(Delta* out);

  const ToolSyntax* calls_;
  bool in_body_ = false;
  bool reasoning_body_ = false;
  std::string call_end_;  // a call's body: the text its end adds
  std::string held_;      // header text, or body text that may start an end marker
};

// The length of the longest suffix of `text` that is a proper prefix of `tag` (what to hold
// back until the next delta says whether the tag comes).
size_t PartialTagAtEnd(std::string_view text, std::string_view tag);

// Which parser a reply needs.
enum class ReasoningFormat { kNone, kThinkTags, kHarmony };
std::unique_ptr<ReasoningParser> MakeReasoningParser(ReasoningFormat format, bool starts_open, const ToolSyntax* calls);

}  // namespace kvserve
