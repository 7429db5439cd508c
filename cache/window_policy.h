// WindowPolicy: how a long-lived sequence (a chat session) is kept within a bounded cache.
//
// kFull keeps everything (the default for requests). kSlidingWindow keeps the first
// `sink_tokens` positions (attention sinks, rounded up to whole blocks) and the most recent
// tokens, so that at most `window_tokens` positions stay cached; whole blocks after the sinks
// are evicted and attention then sees sinks + recent tokens at positions re-indexed inside the
// cache (StreamingLLM). Plain value.
#pragma once

namespace kvserve {

struct WindowPolicy {
  enum class Kind { kFull, kSlidingWindow };
  Kind kind = Kind::kFull;
  int window_tokens = 0;  // kSlidingWindow: maximum cached positions (> sink blocks + 1 block)
  int sink_tokens = 4;    // kept at the start; rounded up to whole blocks

  static WindowPolicy Full() { return {}; }
  static WindowPolicy Sliding(int window, int sinks = 4) {
    return {Kind::kSlidingWindow, window, sinks};
  }
  bool sliding() const { return kind == Kind::kSlidingWindow; }
};

}  // namespace kvserve
