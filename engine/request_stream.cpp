#include "engine/request_stream.h"

namespace kvserve {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

bool RequestStream::Next(std::vector<StreamDelta>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return !pending_.empty() || done_; };
  if (timeout == std::chrono::milliseconds::max()) {
    cv_.wait(lock, ready);
  } else {
    cv_.wait_for(lock, timeout, ready);
  }
  const bool had = !pending_.empty();
  for (StreamDelta& d : pending_) out->push_back(std::move(d));
  pending_.clear();
  return had || !done_;
}

bool RequestStream::TryDrain(std::vector<StreamDelta>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.empty()) return false;
  for (StreamDelta& d : pending_) out->push_back(std::move(d));
  pending_.clear();
  return true;
}

void RequestStream::SetListener(std::function<void()> listener) {
  std::unique_lock<std::mutex> lock(mu_);
  listener_ = std::move(listener);
  if (!pending_.empty() || done_) Notify(lock);
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status RequestStream::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

RequestUsage RequestStream::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return usage_;
}

void RequestStream::Push(StreamDelta delta) {
  std::unique_lock<std::mutex> lock(mu_);
  if (done_) return;
  pending_.push_back(std::move(delta));
  Notify(lock);
}

void RequestStream::Finish(Status status, const RequestUsage& usage) {
  std::unique_lock<std::mutex> lock(mu_);
  if (done_) return;
  done_ = true;
  status_ = std::move(status);
  usage_ = usage;
  Notify(lock);
}

void RequestStream::Notify(std::unique_lock<std::mutex>& lock) {
  std::function<void()> listener = listener_;
  lock.unlock();
  cv_.notify_all();
  if (listener) listener();
}

}  // namespace kvserve
