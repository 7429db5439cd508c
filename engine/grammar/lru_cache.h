// LruCache: values by string key, least recently used out first past a capacity. Find marks a
// key used; Insert keeps the first value of a key (two threads that both missed and both
// built one agree on the first). V is a handle such as a shared_ptr: a default V means absent.
// Thread-safe.
#pragma once

#include <algorithm>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace kvserve {

template <typename V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

  // The value of `key` (now the most recent), or V{} when absent.
  V Find(const std::string& key) {
    std::lock_guard lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return V{};
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  // Adds `value` unless the key has one; returns the key's value.
  V Insert(const std::string& key, V value) {
    std::lock_guard lock(mu_);
    const auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    lru_.emplace_front(key, std::move(value));
    index_.emplace(key, lru_.begin());
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return lru_.front().second;
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return lru_.size();
  }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, V>> lru_;  // most recent first
  std::unordered_map<std::string, typename std::list<std::pair<std::string, V>>::iterator> index_;
};

}  // namespace kvserve
