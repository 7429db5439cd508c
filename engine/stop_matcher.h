// StopMatcher: finds stop strings in a stream of text deltas and decides what may be emitted.
//
// Feed it the text deltas a streaming detokenizer produces. It returns the text that is safe to
// send now and holds back the longest tail that could still grow into a stop string, so a stop
// string spanning several deltas is never partly emitted. When a stop string completes, the
// emitted text ends right before it; the stop string and everything after it are dropped, and
// the match is reported once. Finish() releases the held-back tail at the end of generation.
//
// "Earliest" match: the stop string that completes first in the byte stream wins; among those
// completing at the same byte, the one starting first (the longest). This is what feeding one
// byte at a time would report, so the outcome does not depend on how the text is split into
// deltas. Matching is on bytes: with valid UTF-8 stop strings and deltas made of whole UTF-8
// characters, the emitted/held boundary always falls between characters.
//
// min_tokens: like vLLM, stop strings do not apply before min_tokens tokens were generated;
// the caller emits those deltas directly and feeds the matcher from then on.
//
// Invariants: emitted text + held() == everything fed, up to the stop string (if matched);
// held() is shorter than the longest stop string. Cost per Feed: O(held + delta) per stop
// string for the search, O(sum of stop lengths^2) worst case for the hold-back check.
//
// Thread-safety: none; one per sequence, engine thread only.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

struct StopMatcherOutput {
  std::string text;                  // safe to emit now; may be empty
  std::optional<size_t> stop_index;  // set once, when a stop string completes: its index
};

class StopMatcher {
 public:
  // REQUIRES: every stop string non-empty (SamplingParams::Validate guarantees it).
  explicit StopMatcher(std::vector<std::string> stop_strings);

  // Appends `delta` to the stream. After a stop string matched, or after Finish(), it is a
  // no-op returning nothing.
  [[nodiscard]] StopMatcherOutput Feed(std::string_view delta);

  // End of generation without a stop string: returns the held-back tail (empty if a stop
  // string matched, or on a second call).
  [[nodiscard]] std::string Finish();

  [[nodiscard]] bool stopped() const { return matched_.has_value(); }
  // Index into stop_strings() of the stop string that matched, if any.
  [[nodiscard]] std::optional<size_t> matched_index() const { return matched_; }
  [[nodiscard]] const std::vector<std::string>& stop_strings() const { return stop_strings_; }
  // Text fed but not yet emitted (a possible start of a stop string).
  [[nodiscard]] std::string_view held() const { return held_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of some stop string.
  [[nodiscard]] size_t HoldBackLength() const;

  std::vector<std::string> stop_strings_;
  size_t max_stop_length_ = 0;
  std::string held_;
  std::optional<size_t> matched_;
  bool finished_ = false;
};

}  // namespace kvserve
