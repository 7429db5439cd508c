// ChatWriter: builds a RenderedChat (chat_template.h) piece by piece: markup is the template's
// own text, content is a message's text (its ranges are recorded). Internal to the chat
// template's files.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "engine/tokenizer/chat_template.h"

namespace kvserve {

class ChatWriter {
 public:
  ChatWriter& Markup(std::string_view text) {
    out_.text.append(text);
    return *this;
  }
  ChatWriter& Content(std::string_view text) {
    if (text.empty()) return *this;
    const size_t begin = out_.text.size();
    out_.text.append(text);
    if (!out_.content.empty() && out_.content.back().end == begin) {
      out_.content.back().end = out_.text.size();
    } else {
      out_.content.push_back({begin, out_.text.size()});
    }
    return *this;
  }
  // Appends `part` with Python's str.strip() applied to its whole text (markup and content).
  ChatWriter& Stripped(const ChatWriter& part) {
    const std::string& t = part.out_.text;
    const std::string_view kept = StripPythonWhitespace(t);
    const size_t b = static_cast<size_t>(kept.data() - t.data());
    const size_t e = b + kept.size();
    size_t pos = b;
    for (const TextRange& r : part.out_.content) {
      const size_t rb = std::max(r.begin, b), re = std::min(r.end, e);
      if (rb >= re) continue;
      Markup(std::string_view(t).substr(pos, rb - pos));
      Content(std::string_view(t).substr(rb, re - rb));
      pos = re;
    }
    if (pos < e) Markup(std::string_view(t).substr(pos, e - pos));
    return *this;
  }
  bool empty() const { return out_.text.empty(); }
  RenderedChat Take() { return std::move(out_); }

 private:
  RenderedChat out_;
};

}  // namespace kvserve
