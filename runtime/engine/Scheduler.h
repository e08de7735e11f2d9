// Continuous batching over the CPU backend: requests join and leave between decode steps, with a
// bounded waiting queue. One worker thread owns the engine.
#pragma once

#include "base/Status.h"
#include "runtime/api/EngineApi.h"
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

/// Implements the engine interface the server calls (runtime/api), over any Engine.
class Scheduler final : public EngineApi {
public:
  /// Takes the engine; at most `maxWaiting` requests wait for a free sequence slot.
  Scheduler(std::unique_ptr<Engine> engine, int64_t maxWaiting);
  /// Stops the worker; requests still running finish with FinishReason::Cancelled.
  ~Scheduler();

  /// Queues a request. Unavailable when the waiting queue is full.
  Status submit(SequenceRequest request, std::shared_ptr<TokenSink> sink) override;
  SchedulerStats stats() const override;
  /// The engine's health (Engine::health): an error while it cannot run, e.g. a missing
  /// tensor-parallel rank. Any thread may ask.
  Status health() const override { return engine_->health(); }

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
