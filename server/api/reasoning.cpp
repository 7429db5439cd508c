// ReasoningParser and ThinkTagParser (see reasoning.h).
#include "server/api/reasoning.h"

#include <algorithm>

namespace kvserve {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

size_t PartialTagAtEnd(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

void ReasoningParser::Emit(Delta* out, std::string_view text, bool reasoning) {
  if (text.empty()) return;
  (reasoning ? out->reasoning : out->content).append(text);
  (reasoning ? reasoning_ : content_).append(text);
}

std::unique_ptr<ReasoningParser> MakeReasoningParser(ReasoningFormat format, bool starts_open, const ToolSyntax* calls) {
  switch (format) {
    case ReasoningFormat::kThinkTags: return std::make_unique<ThinkTagParser>(ReasoningTags{}, starts_open);
    case ReasoningFormat::kHarmony: return std::make_unique<HarmonyParser>(calls);
    case ReasoningFormat::kNone: break;
  }
  return nullptr;
}

ThinkTagParser::ThinkTagParser(ReasoningTags tags, bool starts_open)
    : tags_(std::move(tags)), state_(starts_open ? State::kReasoning : State::kStart) {}

ReasoningParser::Delta ThinkTagParser::Feed(std::string_view text) {
  Delta out;
  held_.append(text);
  while (!held_.empty()) {
    std::string_view h = held_;
    switch (state_) {
      case State::kStart: {
        // Leading whitespace, then the open tag or content.
        size_t i = 0;
        while (i < h.size() && IsBlank(h[i])) ++i;
        const std::string_view rest = h.substr(i);
        if (rest.size() >= tags_.open.size()) {
          if (rest.substr(0, tags_.open.size()) == tags_.open) {
            held_.erase(0, i + tags_.open.size());
            state_ = State::kReasoning;
          } else {
            state_ = State::kContent;
          }
          continue;
        }
        if (!rest.empty() && std::string_view(tags_.open).substr(0, rest.size()) != rest) {
          state_ = State::kContent;
          continue;
        }
        return out;  // undecided
      }
      case State::kReasoning: {
        const size_t close = h.find(tags_.close);
        if (close != std::string_view::npos) {
          Emit(&out, h.substr(0, close), true);
          held_.erase(0, close + tags_.close.size());
          state_ = State::kAfter;
          continue;
        }
        const size_t keep = PartialTagAtEnd(h, tags_.close);
        Emit(&out, h.substr(0, h.size() - keep), true);
        held_.erase(0, h.size() - keep);
        return out;
      }
      case State::kAfter: {
        size_t i = 0;
        while (i < h.size() && IsBlank(h[i])) ++i;
        held_.erase(0, i);
        if (held_.empty()) return out;
        state_ = State::kContent;
        continue;
      }
      case State::kContent:
        Emit(&out, h, false);
        held_.clear();
        return out;
    }
  }
  return out;
}

ReasoningParser::Delta ThinkTagParser::Finish() {
  Delta out;
  if (state_ == State::kReasoning) {
    Emit(&out, held_, true);
  } else if (state_ != State::kAfter) {
    Emit(&out, held_, false);
  }
  held_.clear();
  return out;
}

}  // namespace kvserve
