#include "cache/host_tier.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace kvserve {

HostTier::HostTier(int num_slots, size_t block_bytes) : num_slots_(num_slots), block_bytes_(block_bytes) {
  CHECK_GE(num_slots, 0);
  CHECK_GT(block_bytes, 0u);
  if (num_slots == 0) return;
  const size_t bytes = (block_bytes * static_cast<size_t>(num_slots) + 63) / 64 * 64;
  memory_ = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  CHECK(memory_ != nullptr) << "cannot allocate " << bytes << " bytes for the host KV tier";
  std::memset(memory_, 0, bytes);
  is_free_.assign(num_slots, 1);
  for (int32_t s = 0; s < num_slots; ++s) free_.push_back(s);
}

HostTier::~HostTier() { std::free(memory_); }

std::optional<std::vector<int32_t>> HostTier::Allocate(int n) {
  CHECK_GE(n, 0);
  if (n > num_free()) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    out.push_back(free_.front());
    free_.pop_front();
    is_free_[out.back()] = 0;
  }
  return out;
}

void HostTier::Release(int32_t slot) {
  CHECK(slot >= 0 && slot < num_slots_) << "host slot " << slot << " out of range";
  CHECK(!is_free_[slot]) << "double release of host slot " << slot;
  is_free_[slot] = 1;
  free_.push_back(slot);
}

uint8_t* HostTier::data(int32_t slot) {
  CHECK(slot >= 0 && slot < num_slots_) << "host slot " << slot << " out of range";
  return memory_ + static_cast<size_t>(slot) * block_bytes_;
}

Status HostTier::VerifyIntegrity(std::span<const int32_t> held) const {
  std::vector<int> claims(num_slots_, 0);
  for (int32_t s : free_) {
    if (s < 0 || s >= num_slots_) return InternalError("host free list holds bad slot " + std::to_string(s));
    if (!is_free_[s]) return InternalError("host slot " + std::to_string(s) + " listed free but marked held");
    ++claims[s];
  }
  for (int32_t s : held) {
    if (s < 0 || s >= num_slots_) return InternalError("a sequence holds bad host slot " + std::to_string(s));
    if (is_free_[s]) return InternalError("host slot " + std::to_string(s) + " is held and free");
    ++claims[s];
  }
  for (int32_t s = 0; s < num_slots_; ++s) {
    if (claims[s] != 1) {
      return InternalError("host slot " + std::to_string(s) + " has " + std::to_string(claims[s]) +
                           " owners (free list + sequences)");
    }
  }
  return OkStatus();
}

}  // namespace kvserve
