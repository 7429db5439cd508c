// LruCache: values by string key, least recently used out first past a capacity (a count of
// entries and, optionally, a sum of the costs Insert was given, such as bytes; the newest
// entry always stays). Find marks a key used; Insert keeps the first value of a key (two
// threads that both missed and both built one agree on the first). V is a handle such as a
// shared_ptr: a default V means absent. Thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace kvserve {

template <typename V>
class LruCache {
 public:
  explicit LruCache(size_t capacity, size_t max_cost = SIZE_MAX)
      : capacity_(std::max<size_t>(capacity, 1)), max_cost_(max_cost) {}

  // The value of `key` (now the most recent), or V{} when absent.
  V Find(const std::string& key) {
    std::lock_guard lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return V{};
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->value;
  }
  // Adds `value` unless the key has one; returns the key's value.
  V Insert(const std::string& key, V value, size_t cost = 0) {
    std::lock_guard lock(mu_);
    const auto it = index_.find(key);
    if (it != index_.end()) return it->second->value;
    lru_.push_front({key, std::move(value), cost});
    index_.emplace(key, lru_.begin());
    cost_ += cost;
    while (lru_.size() > 1 && (lru_.size() > capacity_ || cost_ > max_cost_)) {
      cost_ -= lru_.back().cost;
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
    return lru_.front().value;
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return lru_.size();
  }
  size_t cost() const {
    std::lock_guard lock(mu_);
    return cost_;
  }

 private:
  struct Slot {
    std::string key;
    V value;
    size_t cost;
  };
  const size_t capacity_;
  const size_t max_cost_;
  mutable std::mutex mu_;
  std::list<Slot> lru_;  // most recent first
  std::unordered_map<std::string, typename std::list<Slot>::iterator> index_;
  size_t cost_ = 0;
};

}  // namespace kvserve
