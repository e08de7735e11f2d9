// The fake engine of the in-process server tests: every request is answered with the token ids of
// a scripted text, on a thread of its own, and the last request is kept for inspection. What a
// real engine reports besides the tokens (a kept prompt state's cached tokens, the load and the
// pool) is set by the test.
#pragma once

#include "runtime/api/EngineApi.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace glm::testing {

/// The token the fake engine reports for `id` under SamplingParams::logprobs = k: logprob -0.5
/// and k alternatives, the token itself first (it is the most likely), then other small ids.
inline runtime::SampledToken fakeSample(int32_t id, int32_t k) {
  runtime::SampledToken token{.id = id};
  if (k < 0) {
    return token;
  }
  token.logprob = -0.5f;
  for (int32_t other = 1; static_cast<int32_t>(token.top.size()) < k; ++other) {
    if (token.top.empty()) {
      token.top.push_back({id, -0.5f});
    } else if (other != id) {
      token.top.push_back({other, -0.5f - static_cast<float>(token.top.size())});
    }
  }
  return token;
}

/// Choice i replies with scripts[i] (script when there is none), the choices' tokens interleaved
/// step by step, up to the request's max_tokens.
class FakeEngine : public runtime::EngineApi {
public:
  std::vector<int32_t> script;
  std::vector<std::vector<int32_t>> scripts; // per choice
  bool full = false; // submit answers Unavailable (the waiting queue is full)
  Status refusal;    // submit's answer when set
  Status failure;    // when set, every choice ends with it after its first token
  int delayMs = 0;   // between tokens
  /// When positive, the engine reports (onPromptCached) that this many prompt tokens resumed
  /// from a kept state.
  int64_t cachedTokens = 0;
  /// What stats() reports (running is the requests generating now, counted here).
  runtime::SchedulerStats reported;

private:
  // The counters outlive the engine: a request's thread may still count after its last
  // onFinish, when the test may already have let the engine go.
  struct Counters {
    std::atomic<int> requests{0}, running{0}, cancelled{0}, emitted{0};
  };
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();

public:
  std::atomic<int> &requests = counters_->requests;   // requests submitted
  std::atomic<int> &running = counters_->running;     // requests generating now
  std::atomic<int> &cancelled = counters_->cancelled; // requests whose sink asked to stop
  std::atomic<int> &emitted =
      counters_->emitted; // tokens handed to sinks, counted before the handing

  Status submit(runtime::SequenceRequest request,
                std::shared_ptr<runtime::TokenSink> sink) override {
    if (full) {
      return Status(StatusCode::Unavailable, "the waiting queue is full (0 requests)");
    }
    if (!refusal.ok()) {
      return refusal;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_ = request;
    }
    ++requests;
    ++running;
    std::vector<std::vector<int32_t>> choices;
    for (int i = 0; i < request.n; ++i) {
      choices.push_back(static_cast<size_t>(i) < scripts.size() ? scripts[static_cast<size_t>(i)]
                                                                : script);
    }
    std::thread([counters = counters_, sink, choices, max = request.maxTokens,
                 k = request.sampling.logprobs, delay = delayMs, failure = failure,
                 cached = cachedTokens] {
      sink->onScheduled();
      if (cached > 0) {
        sink->onPromptCached(cached);
      }
      const int n = static_cast<int>(choices.size());
      std::vector<bool> ended(static_cast<size_t>(n), false);
      bool cancel = false;
      for (size_t step = 0; !cancel && std::find(ended.begin(), ended.end(), false) != ended.end();
           ++step) {
        for (int c = 0; c < n && !cancel; ++c) {
          const std::vector<int32_t> &tokens = choices[static_cast<size_t>(c)];
          if (ended[static_cast<size_t>(c)]) {
            continue;
          }
          if (!failure.ok() && step == 1) {
            ended[static_cast<size_t>(c)] = true;
            sink->onFinish(c, runtime::FinishReason::Error, failure);
            continue;
          }
          if (step == tokens.size() || static_cast<int64_t>(step) == max) {
            ended[static_cast<size_t>(c)] = true;
            sink->onFinish(c,
                           step == tokens.size() ? runtime::FinishReason::Stop
                                                 : runtime::FinishReason::Length,
                           Status::success());
            continue;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(delay));
          ++counters->emitted;
          if (!sink->onToken(c, fakeSample(tokens[step], k))) {
            ++counters->cancelled;
            cancel = true;
          }
        }
      }
      --counters->running;
      // A cancelled request ends every choice it has left.
      for (int c = 0; c < n; ++c) {
        if (!ended[static_cast<size_t>(c)]) {
          sink->onFinish(c, runtime::FinishReason::Cancelled, Status::success());
        }
      }
    }).detach();
    return Status::success();
  }

  runtime::SchedulerStats stats() const override {
    runtime::SchedulerStats stats = reported;
    stats.running = running.load();
    return stats;
  }

  /// The last request submitted.
  runtime::SequenceRequest last() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
  }

private:
  mutable std::mutex mutex_;
  runtime::SequenceRequest last_;
};

} // namespace glm::testing
