// The hand-off of a request's tokens from the engine's thread to its handler's thread.
#include "server/http/TokenQueue.h"

namespace glm::server {

TokenQueue::TokenQueue(ServerMetrics &metrics)
    : metrics_(metrics), submitted_(std::chrono::steady_clock::now()), last_(submitted_) {}

bool TokenQueue::onToken(int32_t token) {
  const auto now = std::chrono::steady_clock::now();
  const double gap = std::chrono::duration<double>(now - last_).count();
  (tokensSeen_++ == 0 ? metrics_.timeToFirstToken : metrics_.interTokenLatency).observe(gap);
  last_ = now;
  std::lock_guard<std::mutex> lock(mutex_);
  tokens_.push_back(token);
  ready_.notify_all();
  return !cancelled_;
}

void TokenQueue::onFinish(runtime::FinishReason reason, const Status &error) {
  metrics_.endToEnd.observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted_).count());
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  reason_ = reason;
  error_ = error;
  ready_.notify_all();
}

TokenQueue::Taken TokenQueue::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !tokens_.empty() || finished_; });
  Taken out;
  out.tokens.assign(tokens_.begin(), tokens_.end());
  tokens_.clear();
  out.finished = finished_;
  out.reason = reason_;
  out.error = error_;
  return out;
}

} // namespace glm::server
