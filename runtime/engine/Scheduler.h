// Continuous batching over the CPU backend: requests join and leave between decode steps, with a
// bounded waiting queue. One worker thread owns the engine.
#pragma once

#include "base/Status.h"
#include "runtime/api/EngineApi.h"
#include "runtime/engine/Drafter.h"
#include "runtime/engine/Engine.h"
#include "runtime/engine/PrefixCache.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

namespace glm::runtime {

/// How the scheduler drafts for speculative decoding. Drafts run only where the plan has verify
/// programs, and never more than its widest window for the step's sequences holds.
struct DraftOptions {
  /// Makes each sequence's drafter (empty: copy drafts, else the MTP head's guess where the plan
  /// has the head; a factory returning null: none).
  DrafterFactory drafters;
  /// The most drafts one window carries.
  int64_t maxTokens = INT64_MAX;
};

/// Implements the engine interface the server calls (runtime/api), over any Engine.
class Scheduler final : public EngineApi {
public:
  /// Takes the engine; at most `maxWaiting` requests wait for a free sequence slot. With
  /// `keptStates` > 0, up to that many prompt states are kept for reuse (see the .cpp's header).
  Scheduler(std::unique_ptr<Engine> engine, int64_t maxWaiting, size_t keptStates = 0,
            DraftOptions drafts = {});
  /// Stops the worker; requests still running finish with FinishReason::Cancelled.
  ~Scheduler();

  /// Queues a request. Unavailable when the waiting queue is full; InvalidArgument when it can
  /// never run on this engine (n above its sequence slots, sampling the plan cannot apply).
  Status submit(SequenceRequest request, std::shared_ptr<TokenSink> sink) override;
  SchedulerStats stats() const override;
  /// The engine's health (Engine::health): an error while it cannot run, e.g. a missing
  /// tensor-parallel rank. Any thread may ask.
  Status health() const override { return engine_->health(); }

private:
  struct Request;
  struct Active;
  void loop();
  void step(std::vector<std::unique_ptr<Active>> &running);
  /// Opens the choices of an n > 1 request that wait for choice 0's prompt: each a fork of it.
  void fork(std::vector<std::unique_ptr<Active>> &running, Active &source);
  /// Delivers `token`; returns false once the choice is over (and reports why).
  bool deliver(Active &a, const SampledToken &token);
  /// A sequence just given a slot, with nothing in it, resumes from the longest kept state that
  /// begins its tokens, if any.
  void resume(Active &a);
  /// Keeps `a`'s state at its length unless one of the same tokens is kept; returns the cache
  /// entry's serial.
  std::optional<uint64_t> keep(const Active &a);
  /// Drops the least recently used kept state; false when none is kept.
  bool evictKept();
  /// One sequence's part of a verify step: running[index], and its drafts (maybe none). With
  /// `feed` > 0 it is a catch-up window: the first `feed` tokens the state lacks and no drafts,
  /// and nothing is delivered (the token drawn after them is known already).
  struct Round {
    size_t index;
    std::vector<int32_t> drafts;
    int64_t feed = 0;
  };
  /// The verify step of `rounds` (each window: the tokens the state lacks, then the drafts);
  /// delivers what each yields and ends a sequence through `finish` (index, keep its state).
  void verify(std::vector<std::unique_ptr<Active>> &running, const std::vector<Round> &rounds,
              const std::function<void(size_t, bool)> &finish);

  std::unique_ptr<Engine> engine_;
  int64_t maxWaiting_;
  PrefixCache cache_; // the worker's only
  DrafterFactory drafters_;
  int64_t maxDrafts_;
  int64_t widestWindow_; // the plan's widest verify window (1: none)
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<SequenceRequest, std::shared_ptr<TokenSink>>> waiting_;
  std::atomic<bool> stopping_{false};
  SchedulerStats stats_;
  int64_t totalPages_ = 0; // the pool's pages, all free when the scheduler starts
  std::thread worker_;
};

} // namespace glm::runtime
