// The hand-off of a request's tokens from the engine's thread to its handler's thread.
#pragma once

#include "runtime/api/EngineApi.h"
#include "server/http/Metrics.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

namespace glm::server {

/// The engine's sink for one request. The latencies are taken here, as the engine produces
/// tokens, not when a handler happens to wake up.
class TokenQueue : public runtime::TokenSink {
public:
  explicit TokenQueue(ServerMetrics &metrics);

  bool onToken(int32_t token) override;
  void onFinish(runtime::FinishReason reason, const Status &error) override;
  bool cancelled() const override { return cancelled_.load(); }
  /// Asks the engine to stop the request at its next step.
  void cancel() { cancelled_ = true; }

  /// What one take() found: the tokens that arrived and, once the engine is done, how it ended.
  struct Taken {
    std::vector<int32_t> tokens;
    bool finished = false;
    runtime::FinishReason reason = runtime::FinishReason::Stop;
    Status error;
  };
  /// Waits up to `timeout` for tokens or the end; returns what arrived.
  Taken take(std::chrono::milliseconds timeout);

private:
  ServerMetrics &metrics_;
  std::chrono::steady_clock::time_point submitted_, last_;
  int64_t tokensSeen_ = 0;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<int32_t> tokens_;
  bool finished_ = false;
  std::atomic<bool> cancelled_{false};
  runtime::FinishReason reason_ = runtime::FinishReason::Stop;
  Status error_;
};

} // namespace glm::server
