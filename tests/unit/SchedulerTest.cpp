// The continuous-batching scheduler over the tiny fixture's CPU plan: what happens to requests
// whose consumer is gone, and to the ones after them.
#include "runtime/engine/Scheduler.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <unistd.h>

namespace glm::runtime {
namespace {

const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// Records what the scheduler hands it; `gone` plays a client that has left.
class RecordingSink : public TokenSink {
public:
  explicit RecordingSink(bool gone) : gone_(gone) {}
  bool onToken(int32_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++tokens_;
    return !gone_;
  }
  void onFinish(FinishReason reason, const Status &) override {
    std::lock_guard<std::mutex> lock(mutex_);
    reason_ = reason;
    finished_ = true;
    done_.notify_all();
  }
  bool cancelled() const override { return gone_; }

  /// Waits for onFinish; returns the reason and how many tokens came before it.
  std::pair<FinishReason, int> wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return finished_; });
    return {reason_, tokens_};
  }

private:
  const bool gone_;
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  FinishReason reason_ = FinishReason::Error;
  int tokens_ = 0;
};

TEST(Scheduler, ARequestWhoseClientLeftWhileWaitingIsNeverPrefilled) {
  const std::filesystem::path plan = std::filesystem::temp_directory_path() /
                                     ("scheduler_test_" + std::to_string(::getpid()) + ".glmp");
  const std::string command = std::string(GLM_GLMC_PATH) + " compile " + kTiny.string() + " -o " +
                              plan.string() +
                              " --target cpu --precision f32 --tp 1 --max-seqs 1 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  Expected<std::unique_ptr<CpuEngine>> engine =
      CpuEngine::create(std::move(PlanFile::open(plan)).value(), *checkpoint);
  std::filesystem::remove(plan);
  ASSERT_TRUE(engine.ok()) << engine.status().toString();
  Scheduler scheduler(std::move(engine).value(), 4);

  SequenceRequest request;
  request.prompt = {11, 12, 13, 14};
  request.maxTokens = 3;
  request.ignoreEos = true;
  // Had it been prefilled, its first token would have been offered to the sink.
  auto left = std::make_shared<RecordingSink>(true);
  ASSERT_TRUE(scheduler.submit(request, left).ok());
  EXPECT_EQ(left->wait(), std::make_pair(FinishReason::Cancelled, 0));

  // The slot it never took serves the next request in full.
  auto stays = std::make_shared<RecordingSink>(false);
  ASSERT_TRUE(scheduler.submit(request, stays).ok());
  EXPECT_EQ(stays->wait(), std::make_pair(FinishReason::Length, 3));
  EXPECT_EQ(scheduler.stats().waiting, 0);
}

} // namespace
} // namespace glm::runtime
