// TokenMask: a set of token ids, one bit each (which tokens a structure allows next).
// Plain value; thread-compatible.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

namespace kvserve {

class TokenMask {
 public:
  explicit TokenMask(int32_t vocab_size = 0) : words_((static_cast<size_t>(vocab_size) + 63) / 64, 0) {}
  void Set(int32_t id) { words_[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
  bool Test(int32_t id) const { return (words_[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
  int Count() const {
    int n = 0;
    for (uint64_t w : words_) n += std::popcount(w);
    return n;
  }
  // The lowest id in the set; -1 when empty.
  int32_t First() const {
    for (size_t i = 0; i < words_.size(); ++i) {
      if (words_[i] != 0) return static_cast<int32_t>(i * 64 + static_cast<size_t>(std::countr_zero(words_[i])));
    }
    return -1;
  }
  // Bit i of word i / 64 is token i.
  std::span<const uint64_t> words() const { return words_; }
  size_t memory_bytes() const { return words_.size() * sizeof(uint64_t); }
  bool operator==(const TokenMask& other) const = default;

 private:
  std::vector<uint64_t> words_;
};

}  // namespace kvserve
