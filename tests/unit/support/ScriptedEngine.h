// A fake engine for in-process server tests: every request is answered with the token ids of a
// scripted text, on a thread of its own, and the last request is kept for inspection.
#pragma once

#include "runtime/api/EngineApi.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace glm::testing {

class ScriptedEngine : public runtime::EngineApi {
public:
  std::vector<int32_t> script; // the reply of choice 0 (every request is n = 1 here)
  Status failure;              // when set, the reply ends with it after its first token
  std::atomic<int> requests{0};
  double kvCacheUsage = 0.0; // what stats() reports

  Status submit(runtime::SequenceRequest request,
                std::shared_ptr<runtime::TokenSink> sink) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_ = request;
    }
    ++requests;
    std::thread([sink, tokens = script, max = request.maxTokens, failure = failure] {
      sink->onScheduled();
      for (size_t step = 0;; ++step) {
        if (!failure.ok() && step == 1) {
          sink->onFinish(0, runtime::FinishReason::Error, failure);
          return;
        }
        if (step == tokens.size() || static_cast<int64_t>(step) == max) {
          sink->onFinish(0,
                         step == tokens.size() ? runtime::FinishReason::Stop
                                               : runtime::FinishReason::Length,
                         Status::success());
          return;
        }
        if (!sink->onToken(0, runtime::SampledToken{.id = tokens[step]})) {
          sink->onFinish(0, runtime::FinishReason::Cancelled, Status::success());
          return;
        }
      }
    }).detach();
    return Status::success();
  }

  runtime::SchedulerStats stats() const override {
    runtime::SchedulerStats stats;
    stats.kvCacheUsage = kvCacheUsage;
    return stats;
  }

  runtime::SequenceRequest last() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
  }

private:
  mutable std::mutex mutex_;
  runtime::SequenceRequest last_;
};

} // namespace glm::testing
