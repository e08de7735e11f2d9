// The hand-off of a request's tokens from the engine's thread to its handler's thread.
#include "server/http/TokenQueue.h"

namespace glm::server {

TokenQueue::TokenQueue(ServerMetrics &metrics, int choices)
    : metrics_(metrics), choices_(choices), submitted_(std::chrono::steady_clock::now()),
      last_(submitted_) {}

bool TokenQueue::onToken(int choice, const runtime::SampledToken &token) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Choice 0 stands for the request in the latencies: the choices share the prefill and advance
  // in the same steps, so its first token is the request's and its gaps are the steps'; every
  // choice's tokens would add n - 1 near-zero gaps a step.
  if (choice == 0) {
    const auto now = std::chrono::steady_clock::now();
    const double gap = std::chrono::duration<double>(now - last_).count();
    (tokensSeen_++ == 0 ? metrics_.timeToFirstToken : metrics_.interTokenLatency).observe(gap);
    last_ = now;
    if (!firstToken_) {
      firstToken_ = now;
      if (scheduled_) {
        metrics_.prefillTime.observe(std::chrono::duration<double>(now - *scheduled_).count());
      }
    }
  }
  tokens_.push_back({choice, token});
  ready_.notify_all();
  return !cancelled_;
}

void TokenQueue::onFinish(int choice, runtime::FinishReason reason, const Status &error) {
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ends_.push_back({choice, reason, error});
    last = ++ended_ == choices_;
    ready_.notify_all();
  }
  // The request's latency runs to its last choice's end.
  if (last) {
    const auto now = std::chrono::steady_clock::now();
    metrics_.endToEnd.observe(std::chrono::duration<double>(now - submitted_).count());
    if (firstToken_) {
      metrics_.decodeTime.observe(std::chrono::duration<double>(now - *firstToken_).count());
    }
  }
}

void TokenQueue::onScheduled() {
  if (!scheduled_) {
    scheduled_ = std::chrono::steady_clock::now();
    metrics_.queueTime.observe(std::chrono::duration<double>(*scheduled_ - submitted_).count());
  }
}

void TokenQueue::onPromptCached(int64_t tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  cachedTokens_ = tokens;
}

TokenQueue::Timing TokenQueue::timing() {
  std::lock_guard<std::mutex> lock(mutex_);
  Timing t;
  t.cachedTokens = cachedTokens_;
  if (firstToken_) {
    t.timeToFirstToken = std::chrono::duration<double>(*firstToken_ - submitted_).count();
    t.decodeSeconds = std::chrono::duration<double>(last_ - *firstToken_).count();
    t.decodeTokens = tokensSeen_ - 1;
  }
  return t;
}

TokenQueue::Taken TokenQueue::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout,
                  [&] { return !tokens_.empty() || !ends_.empty() || ended_ >= choices_; });
  Taken out;
  out.cachedTokens = cachedTokens_;
  out.tokens.swap(tokens_);
  out.ends.swap(ends_);
  out.finished = ended_ >= choices_;
  return out;
}

} // namespace glm::server
