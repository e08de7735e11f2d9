// The hand-off of a request's tokens from the engine's thread to its handler's thread.
#pragma once

#include "runtime/api/EngineApi.h"
#include "server/http/Metrics.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

namespace glm::server {

/// The engine's sink for one request of `choices` choices. The latencies are taken here, as the
/// engine produces tokens, not when a handler happens to wake up.
class TokenQueue : public runtime::TokenSink {
public:
  TokenQueue(ServerMetrics &metrics, int choices);

  bool onToken(int choice, const runtime::SampledToken &token) override;
  void onFinish(int choice, runtime::FinishReason reason, const Status &error) override;
  void onScheduled() override;
  void onPromptCached(int64_t tokens) override;
  bool cancelled() const override { return cancelled_.load(); }
  /// Asks the engine to stop the request (every choice of it) at its next step.
  void cancel() { cancelled_ = true; }

  struct Token {
    int choice = 0;
    runtime::SampledToken token;
  };
  struct End {
    int choice = 0;
    runtime::FinishReason reason = runtime::FinishReason::Stop;
    Status error;
  };
  /// What one take() found: the tokens that arrived and the choices that ended, each in the
  /// engine's order (a choice's end comes after its tokens), and whether every choice has ended.
  struct Taken {
    std::vector<Token> tokens;
    std::vector<End> ends;
    bool finished = false;
    /// The prompt tokens a kept state supplied (0 until the engine says so, which it does before
    /// any token of the request).
    int64_t cachedTokens = 0;
  };
  /// Waits up to `timeout` for tokens or an end; returns what arrived.
  Taken take(std::chrono::milliseconds timeout);

  /// The request's timing so far, as the engine produced it (the per-request log line): choice
  /// 0 stands for the request, as in the latency metrics.
  struct Timing {
    std::optional<double> timeToFirstToken; // seconds from submission; none before a token
    double decodeSeconds = 0;               // from choice 0's first token to its last
    int64_t decodeTokens = 0;               // choice 0's tokens after its first
    int64_t cachedTokens = 0;
  };
  Timing timing();

private:
  ServerMetrics &metrics_;
  const int choices_;
  const std::chrono::steady_clock::time_point submitted_;
  // vLLM's request phases: queued until scheduled, prefill until the first token, decode until
  // the last choice's end. An engine that never schedules (a fake) times no queue or prefill.
  // Written on the engine's thread only; choice 0's token times and count under mutex_ too,
  // where timing() reads them for the log line.
  std::optional<std::chrono::steady_clock::time_point> scheduled_, firstToken_;
  std::chrono::steady_clock::time_point last_;
  int64_t tokensSeen_ = 0;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<Token> tokens_;
  std::vector<End> ends_;
  int ended_ = 0;
  int64_t cachedTokens_ = 0;
  std::atomic<bool> cancelled_{false};
};

} // namespace glm::server
