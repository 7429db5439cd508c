// MatchHistory: how much of a chat session's cached history a new turn's prompt repeats.
//
// Clients re-send the whole conversation each turn, with the assistant's replies as the text
// the server returned. Re-tokenizing that text rarely gives the token ids the model generated
// (BPE merges differ, a stop string or end-of-turn token was cut, the template trims or adds
// spaces around the content), so matching on token ids would recompute most of every reply.
// This matches on text instead: history and prompt are compared as byte streams (control
// tokens as symbols of their own), and the cache keeps the history's tokens as generated up to
// the last point where both streams are at a token boundary. Around generated replies (their
// leading and trailing whitespace, and right before or after them) whitespace that only one
// side has is skipped, as the templates' strip/trim and added spaces do; anywhere else the
// texts must be equal. Control tokens the model generated inside a reply have no text, so the
// client never saw them: they are kept, not matched. A reply's bytes are compared as the client received them: each
// maximal invalid UTF-8 subpart as U+FFFD, as StreamingDetokenizer sends it.
//
// The sequence then continues as history[0, keep) + prompt[resume, end): the same text the
// client sent, with the model's own tokens for what it generated. Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

// Token positions [begin, end).
struct TokenRange {
  int begin = 0;
  int end = 0;
};

struct HistoryReuse {
  int keep = 0;    // history tokens [0, keep) are reused as they are
  int resume = 0;  // the prompt's tokens from `resume` on come after them
};

// `generated`: the history's tokens that the model generated (sorted, disjoint ranges).
// Always keep <= history.size(), resume <= prompt.size(), and keep == resume when the token
// ids agree up to there (the exact common prefix is the least it returns).
[[nodiscard]] HistoryReuse MatchHistory(std::span<const int32_t> history, std::span<const TokenRange> generated,
                                        std::span<const int32_t> prompt, const Tokenizer& tokenizer);

}  // namespace kvserve
