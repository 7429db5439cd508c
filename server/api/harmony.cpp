// HarmonyParser (see reasoning.h): gpt-oss's channels.
#include <algorithm>

#include "server/api/reasoning.h"

namespace kvserve {
namespace {

constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
// A header longer than this (the text before <|message|>) is not harmony: the text is content.
constexpr size_t kMaxHeader = 512;

// The length of the longest suffix of `text` that is a proper prefix of an end marker.
size_t HeldEnd(std::string_view text) {
  size_t held = 0;
  for (std::string_view end : kEnds) held = std::max(held, PartialTagAtEnd(text, end));
  return held;
}

bool IsWordChar(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'; }

// The word of `header` after `key` ("" if none).
std::string WordAfter(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return "";
  size_t b = at + key.size(), e = b;
  while (e < header.size() && IsWordChar(header[e])) ++e;
  return std::string(header.substr(b, e - b));
}

// A literal of the call syntax without its slots (harmony has no ids or indexes).
std::string Plain(std::string s) {
  s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return c == ToolSyntax::kIdSlot || c == ToolSyntax::kIndexSlot; }),
          s.end());
  return s;
}

}  // namespace

HarmonyParser::HarmonyParser(const ToolSyntax* calls) : calls_(calls) {}

const std::vector<std::string>& HarmonyParser::Controls() {
  static const std::vector<std::string> kControls = {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>",
                                                     "<|end|>",   "<|call|>",    "<|return|>"};
  return kControls;
}

void HarmonyParser::StartBody(Delta* out) {
  const size_t at = held_.find(kMessage);
  const std::string header = held_.substr(0, at);
  held_.erase(0, at + kMessage.size());
  in_body_ = true;
  reasoning_body_ = WordAfter(header, kChannel) == "analysis";
  call_end_.clear();
  const std::string recipient = WordAfter(header, "to=");
  if (recipient.starts_with("functions.") && calls_ != nullptr && calls_->kind == ToolSyntax::Kind::kLiteral) {
    reasoning_body_ = false;
    Emit(out, Plain(calls_->begin + calls_->call_begin) + recipient.substr(10) + Plain(calls_->name_end), false);
    call_end_ = Plain(calls_->call_end + calls_->end);
  }
}

ReasoningParser::Delta HarmonyParser::Feed(std::string_view text) {
  Delta out;
  held_.append(text);
  for (;;) {
    if (!in_body_) {
      if (held_.find(kMessage) <= kMaxHeader) {
        StartBody(&out);
        continue;
      }
      if (held_.size() >= kMaxHeader + kMessage.size()) {  // no header this long: not harmony
        in_body_ = true;
        reasoning_body_ = false;
        continue;
      }
      return out;
    }
    size_t end = std::string::npos, marker = 0;
    for (std::string_view e : kEnds) {
      const size_t at = held_.find(e);
      if (at < end) {
        end = at;
        marker = e.size();
      }
    }
    if (end == std::string::npos) {
      const size_t keep = HeldEnd(held_);
      Emit(&out, std::string_view(held_).substr(0, held_.size() - keep), reasoning_body_);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    Emit(&out, std::string_view(held_).substr(0, end), reasoning_body_);
    Emit(&out, call_end_, false);
    // The next message's header follows (after <|start|>, its role).
    held_.erase(0, end + marker);
    in_body_ = false;
  }
}

ReasoningParser::Delta HarmonyParser::Finish() {
  Delta out;
  if (in_body_) {
    Emit(&out, held_, reasoning_body_);
    Emit(&out, call_end_, false);
  } else if (held_.find("<|") == std::string::npos) {
    Emit(&out, held_, false);  // plain text that never became a message
  }
  held_.clear();
  in_body_ = false;
  return out;
}

}  // namespace kvserve
