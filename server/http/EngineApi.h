// What the HTTP layer needs of an engine: submit a generation, read the load. The real one wraps
// the scheduler; tests use a fake, so every endpoint is tested in-process without a model run.
#pragma once

#include "runtime/engine/Scheduler.h"

#include <memory>

namespace glm::server {

class EngineApi {
public:
  virtual ~EngineApi() = default;
  /// Unavailable when the engine cannot take more work now (the waiting queue is full).
  virtual Status submit(runtime::SequenceRequest request,
                        std::shared_ptr<runtime::TokenSink> sink) = 0;
  virtual runtime::SchedulerStats stats() const = 0;
  /// An error (shown on /health) while the engine cannot run, e.g. a missing tensor-parallel rank.
  virtual Status health() const { return Status::success(); }
};

/// The engine the server runs: the CPU backend's scheduler.
class SchedulerEngine : public EngineApi {
public:
  explicit SchedulerEngine(std::unique_ptr<runtime::Scheduler> scheduler)
      : scheduler_(std::move(scheduler)) {}
  Status submit(runtime::SequenceRequest request,
                std::shared_ptr<runtime::TokenSink> sink) override {
    return scheduler_->submit(std::move(request), std::move(sink));
  }
  runtime::SchedulerStats stats() const override { return scheduler_->stats(); }
  Status health() const override { return scheduler_->health(); }

private:
  std::unique_ptr<runtime::Scheduler> scheduler_;
};

} // namespace glm::server
