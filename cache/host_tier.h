// HostTier: the host-memory offload tier of the KV cache — `num_slots` slots of
// `block_bytes` bytes each (64-byte aligned, one allocation) and a FIFO free list of slot ids.
//
// KvCacheManager reserves slots when a sequence is swapped out and returns them when it comes
// back or is freed; the engine moves the bytes (Backend::ReadBlock/WriteBlock into data()).
// Invariant (VerifyIntegrity with the holders' slots): every slot is either free (once) or
// held by exactly one swapped sequence.
//
// Engine thread only; no locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"

namespace kvserve {

class HostTier {
 public:
  // num_slots == 0: the tier is off (no memory). REQUIRES: num_slots >= 0, block_bytes > 0.
  HostTier(int num_slots, size_t block_bytes);
  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  int num_slots() const { return num_slots_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_used() const { return num_slots_ - num_free(); }

  // Takes `n` slots (lowest free-list position first) or none.
  [[nodiscard]] std::optional<std::vector<int32_t>> Allocate(int n);
  // REQUIRES: slot is held.
  void Release(int32_t slot);

  // REQUIRES: 0 <= slot < num_slots().
  uint8_t* data(int32_t slot);
  // All slots' bytes ([num_slots][block_bytes]); empty when the tier is off.
  std::span<uint8_t> memory() { return {memory_, memory_ == nullptr ? 0 : block_bytes_ * num_slots_}; }

  // `held`: the slots all holders claim.
  [[nodiscard]] Status VerifyIntegrity(std::span<const int32_t> held) const;

 private:
  int num_slots_;
  size_t block_bytes_;
  uint8_t* memory_ = nullptr;  // [num_slots][block_bytes]
  std::deque<int32_t> free_;
  std::vector<char> is_free_;  // [num_slots]
};

}  // namespace kvserve
