#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace kvserve {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  for (const std::string& stop : stop_strings_) {
    CHECK(!stop.empty()) << "empty stop string";
    max_stop_length_ = std::max(max_stop_length_, stop.size());
  }
}

StopMatcherOutput StopMatcher::Feed(std::string_view delta) {
  StopMatcherOutput out;
  if (matched_.has_value() || finished_) return out;
  if (stop_strings_.empty()) {
    out.text.assign(delta);
    return out;
  }

  const size_t old_size = held_.size();
  held_.append(delta);

  // held_ had no complete stop string before this delta, so a match must end inside it.
  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  size_t best_index = 0;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const std::string& stop = stop_strings_[i];
    const size_t from = old_size >= stop.size() ? old_size - stop.size() + 1 : 0;
    const size_t start = held_.find(stop, from);
    if (start == std::string::npos) continue;
    const size_t end = start + stop.size();
    if (end < best_end || (end == best_end && start < best_start)) {
      best_start = start;
      best_end = end;
      best_index = i;
    }
  }
  if (best_start != std::string::npos) {
    out.text = held_.substr(0, best_start);
    out.stop_index = best_index;
    matched_ = best_index;
    held_.clear();
    return out;
  }

  const size_t emit = held_.size() - HoldBackLength();
  out.text = held_.substr(0, emit);
  held_.erase(0, emit);
  DCHECK(held_.size() < max_stop_length_);
  return out;
}

std::string StopMatcher::Finish() {
  if (finished_) return {};
  finished_ = true;
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

size_t StopMatcher::HoldBackLength() const {
  size_t best = 0;
  for (const std::string& stop : stop_strings_) {
    // Proper prefixes only: a complete stop string would have matched.
    for (size_t len = std::min(stop.size() - 1, held_.size()); len > best; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace kvserve
