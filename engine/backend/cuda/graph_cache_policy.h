// GraphCachePolicy: which decode buckets of the CUDA backend keep a captured CUDA graph. A
// bucket (num_seqs bucket, max_blocks bucket) runs eagerly the first time it is seen (cuBLAS
// loads its kernels lazily, which must not happen during a capture), is captured the second
// time and replayed after that. At most `capacity` graphs are kept: capturing one more evicts
// the least recently used, so buckets that appear late (long contexts) are not stuck running
// eagerly once the cache is full. A bucket whose capture failed runs eagerly for good.
// Plain C++ (no CUDA types) so that it is tested without a device. One thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

namespace kvserve {

class GraphCachePolicy {
 public:
  using Key = std::pair<int, int>;  // (num_seqs bucket, max_blocks bucket)
  enum class Action { kEager, kCapture, kReplay };
  struct Decision {
    Action action = Action::kEager;
    std::optional<Key> evict;  // kCapture when full: destroy this bucket's graph first
  };

  explicit GraphCachePolicy(int capacity) : capacity_(capacity) {}

  // What to do with the next step of bucket `key`. After kCapture the bucket counts as
  // cached (call CaptureFailed if the capture did not work).
  Decision Next(const Key& key) {
    Bucket& b = buckets_[key];
    b.last_use = ++clock_;
    if (b.cached) return {Action::kReplay, std::nullopt};
    if (b.failed || b.seen++ == 0 || capacity_ <= 0) return {Action::kEager, std::nullopt};
    Decision d{Action::kCapture, std::nullopt};
    if (num_cached_ >= capacity_) {
      Bucket* lru = nullptr;
      for (auto& [k, other] : buckets_) {
        if (other.cached && (lru == nullptr || other.last_use < lru->last_use)) {
          lru = &other;
          d.evict = k;
        }
      }
      lru->cached = false;
      lru->seen = 0;  // seen twice again before it is captured again
      --num_cached_;
    }
    b.cached = true;
    ++num_cached_;
    return d;
  }

  void CaptureFailed(const Key& key) {
    Bucket& b = buckets_[key];
    if (b.cached) --num_cached_;
    b.cached = false;
    b.failed = true;
  }

  [[nodiscard]] int num_cached() const { return num_cached_; }

 private:
  struct Bucket {
    int seen = 0;
    bool cached = false;
    bool failed = false;
    uint64_t last_use = 0;
  };
  int capacity_;
  int num_cached_ = 0;
  uint64_t clock_ = 0;
  std::map<Key, Bucket> buckets_;
};

}  // namespace kvserve
