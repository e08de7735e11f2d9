// A TokenSink that records one choice's reply: its tokens, how it finished, and the prompt tokens
// a kept state gave it; wait() blocks until it finished.
#pragma once

#include "runtime/api/EngineApi.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace glm::runtime::testing {

class Recorder : public TokenSink {
public:
  bool onToken(int, const SampledToken &token) override {
    std::lock_guard<std::mutex> lock(mutex_);
    tokens_.push_back(token.id);
    return true;
  }
  void onFinish(int, FinishReason reason, const Status &error) override {
    std::lock_guard<std::mutex> lock(mutex_);
    reason_ = reason;
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }
  void onPromptCached(int64_t tokens) override { cached_ = tokens; }
  /// The reply's tokens, once it finished.
  std::vector<int32_t> wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    return tokens_;
  }
  int64_t cached() const { return cached_; }
  FinishReason reason() const { return reason_; }
  Status error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::vector<int32_t> tokens_;
  FinishReason reason_ = FinishReason::Error;
  Status error_;
  std::atomic<int64_t> cached_{0};
};

} // namespace glm::runtime::testing
