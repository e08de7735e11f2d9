// Continuous batching over the CPU backend: requests join and leave between decode steps, with a
// bounded waiting queue. One worker thread owns the engine.
#pragma once

#include "base/Status.h"
#include "runtime/engine/Engine.h"
#include "runtime/engine/Sampler.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace glm::runtime {

enum class FinishReason { Stop, Length, Cancelled, Error };

/// One generation: the prompt's token ids and how to continue it.
struct SequenceRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t maxTokens = 16;
  int64_t minTokens = 0; // end-of-sequence tokens are not sampled before this many
  bool ignoreEos = false;
  std::vector<int32_t> eosIds;
};

/// Where a request's tokens go. Called on the scheduler thread: implementations hand the work off
/// and return quickly. onToken returning false cancels the request (a client that went away).
class TokenSink {
public:
  virtual ~TokenSink() = default;
  virtual bool onToken(int32_t token) = 0;
  virtual void onFinish(FinishReason reason, const Status &error) = 0;
  /// True once the consumer is gone. Asked of waiting requests, so that one whose client left
  /// is dropped before it costs a prefill. May be called from any thread.
  virtual bool cancelled() const { return false; }
};

struct SchedulerStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t finished = 0;
  int64_t generatedTokens = 0;
  int64_t preemptions = 0; // sequences that gave their state back to be recomputed
};

class Scheduler {
public:
  /// Takes the engine; at most `maxWaiting` requests wait for a free sequence slot.
  Scheduler(std::unique_ptr<Engine> engine, int64_t maxWaiting);
  /// Stops the worker; requests still running finish with FinishReason::Cancelled.
  ~Scheduler();

  /// Queues a request. Unavailable when the waiting queue is full.
  Status submit(SequenceRequest request, std::shared_ptr<TokenSink> sink);
  SchedulerStats stats() const;
  /// The engine's health (Engine::health): an error while it cannot run, e.g. a missing
  /// tensor-parallel rank. Any thread may ask.
  Status health() const { return engine_->health(); }

private:
  struct Active;
  void loop();
  void step(std::vector<std::unique_ptr<Active>> &running);
  /// Samples the next token from a row of logits (masked in place), honouring min_tokens and
  /// ignore_eos. Reads only `a`: rows of one step may be picked on threads of their own.
  int32_t pick(const Active &a, std::span<float> row) const;
  /// The tokens of a decode step's rows, row k for the sequence running[decoding[k]].
  std::vector<int32_t> pickRows(const std::vector<std::unique_ptr<Active>> &running,
                                const std::vector<size_t> &decoding, std::vector<float> &logits,
                                size_t vocab) const;
  /// Delivers `token`; returns false once the request is over (and reports why).
  bool deliver(Active &a, int32_t token);

  std::unique_ptr<Engine> engine_;
  int64_t maxWaiting_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<SequenceRequest, std::shared_ptr<TokenSink>>> waiting_;
  std::atomic<bool> stopping_{false};
  SchedulerStats stats_;
  std::thread worker_;
};

} // namespace glm::runtime
