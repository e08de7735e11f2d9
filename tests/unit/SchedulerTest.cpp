// The continuous-batching scheduler over the tiny fixture's CPU plan: what happens to requests
// whose consumer is gone, and to the ones after them; chunked prefill, preemption, and sampled
// replies that do not depend on what they were batched with.
#include "runtime/engine/Scheduler.h"
#include "runtime/engine/CpuEngine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

namespace glm::runtime {
namespace {

const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// Records what the scheduler hands it; `gone` plays a client that has left.
class RecordingSink : public TokenSink {
public:
  explicit RecordingSink(bool gone) : gone_(gone) {}
  bool onToken(int32_t token) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++tokens_;
    received_.push_back(token);
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
  std::vector<int32_t> received() {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_;
  }

private:
  const bool gone_;
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  FinishReason reason_ = FinishReason::Error;
  int tokens_ = 0;
  std::vector<int32_t> received_;
};

/// The tiny fixture's f32 CPU plan compiled with `options`, bound to the fixture's weights.
class Engine {
public:
  explicit Engine(const std::string &options) {
    const std::filesystem::path plan = std::filesystem::temp_directory_path() /
                                       ("scheduler_test_" + std::to_string(::getpid()) + ".glmp");
    const std::string command = std::string(GLM_GLMC_PATH) + " compile " + kTiny.string() + " -o " +
                                plan.string() + " --target cpu --precision f32 --tp 1 " + options +
                                " 2>/dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    checkpoint_ = std::move(Checkpoint::open(kTiny)).value();
    Expected<std::unique_ptr<CpuEngine>> engine =
        CpuEngine::create(std::move(PlanFile::open(plan)).value(), *checkpoint_);
    std::filesystem::remove(plan);
    EXPECT_TRUE(engine.ok()) << engine.status().toString();
    engine_ = std::move(engine).value();
  }
  std::unique_ptr<CpuEngine> take() { return std::move(engine_); }

private:
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<CpuEngine> engine_;
};

TEST(Scheduler, ARequestWhoseClientLeftWhileWaitingIsNeverPrefilled) {
  Engine engine("--max-seqs 1");
  Scheduler scheduler(engine.take(), 4);

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

/// Counts a running request's tokens and notes how many it had when another one began.
class StreamingSink : public RecordingSink {
public:
  StreamingSink() : RecordingSink(false) {}
  bool onToken(int32_t token) override {
    ++count;
    return RecordingSink::onToken(token);
  }
  std::atomic<int> count{0};
};

class FirstTokenSink : public RecordingSink {
public:
  explicit FirstTokenSink(const StreamingSink &other) : RecordingSink(false), other_(other) {}
  bool onToken(int32_t token) override {
    if (otherAtFirstToken < 0) {
      otherAtFirstToken = other_.count.load();
    }
    return RecordingSink::onToken(token);
  }
  int otherAtFirstToken = -1;

private:
  const StreamingSink &other_;
};

TEST(Scheduler, ALongPromptIsPrefilledInChunksBetweenDecodeSteps) {
  // Prefill programs of 16 tokens: a 48-token prompt takes three steps, and the stream already
  // running gets a token in each of the first two. Prefilled whole, the new prompt would delay
  // that stream by a step at most, so it would get at most one token (from a step already under
  // way when the request came) before the new request's first.
  Engine engine("--max-seqs 2 --prefill 16 --decode 1x1,2x1");
  Scheduler scheduler(engine.take(), 4);
  SequenceRequest streaming;
  streaming.prompt = {11, 12, 13};
  streaming.maxTokens = 400;
  streaming.ignoreEos = true;
  auto stream = std::make_shared<StreamingSink>();
  ASSERT_TRUE(scheduler.submit(streaming, stream).ok());
  while (stream->count.load() == 0) {
    std::this_thread::yield();
  }
  const int before = stream->count.load();

  SequenceRequest longPrompt;
  for (int32_t t = 0; t < 48; ++t) {
    longPrompt.prompt.push_back(20 + t);
  }
  longPrompt.maxTokens = 1;
  longPrompt.ignoreEos = true;
  auto late = std::make_shared<FirstTokenSink>(*stream);
  ASSERT_TRUE(scheduler.submit(longPrompt, late).ok());
  EXPECT_EQ(late->wait(), std::make_pair(FinishReason::Length, 1));
  EXPECT_GE(late->otherAtFirstToken - before, 2);
}

/// Runs each of `requests` alone, then all at once, and expects every reply of the second run to
/// equal its first, each running to its maxTokens; returns the replies run together (none if a
/// request was refused, whose wait would never end).
std::vector<std::vector<int32_t>>
expectEachEqualsItselfAlone(Scheduler &scheduler, const std::vector<SequenceRequest> &requests) {
  std::vector<std::vector<int32_t>> alone, replies;
  for (const SequenceRequest &request : requests) {
    auto sink = std::make_shared<RecordingSink>(false);
    if (Status s = scheduler.submit(request, sink); !s.ok()) {
      ADD_FAILURE() << "alone: " << s.toString();
      return {};
    }
    EXPECT_EQ(sink->wait(),
              std::make_pair(FinishReason::Length, static_cast<int>(request.maxTokens)));
    alone.push_back(sink->received());
  }
  std::vector<std::shared_ptr<RecordingSink>> together;
  for (const SequenceRequest &request : requests) {
    together.push_back(std::make_shared<RecordingSink>(false));
    if (Status s = scheduler.submit(request, together.back()); !s.ok()) {
      ADD_FAILURE() << "together: " << s.toString();
      return {};
    }
  }
  for (size_t r = 0; r < requests.size(); ++r) {
    EXPECT_EQ(together[r]->wait(),
              std::make_pair(FinishReason::Length, static_cast<int>(requests[r].maxTokens)))
        << "request " << r;
    replies.push_back(together[r]->received());
    EXPECT_EQ(replies.back(), alone[r]) << "request " << r;
  }
  return replies;
}

TEST(Scheduler, SequencesThatOutgrowThePoolArePreemptedAndRecomputed) {
  // A pool of 256 tokens and two sequences that grow to 232 tokens each: they cannot both hold
  // their state, so the newer gives its pages back and is prefilled again later. Each reply must
  // equal the one it gets alone, and neither may fail.
  Engine engine("--max-seqs 2 --max-context 256 --prefill 64 --decode 1x1,2x1");
  Scheduler scheduler(engine.take(), 4);
  std::vector<SequenceRequest> requests(2);
  for (size_t r = 0; r < requests.size(); ++r) {
    for (int32_t t = 0; t < 100; ++t) {
      requests[r].prompt.push_back(static_cast<int32_t>(30 + 7 * r + t % 50));
    }
    requests[r].maxTokens = 132;
    requests[r].ignoreEos = true;
  }
  expectEachEqualsItselfAlone(scheduler, requests);
  EXPECT_GE(scheduler.stats().preemptions, 1);
}

TEST(Scheduler, SampledRepliesInABatchEqualEachAlone) {
  // Four sampled requests decode together, their rows picked on threads of their own (two or more
  // sampled rows a step): each draw is keyed by its request's seed and position, so every reply
  // equals the one it gets alone. One masks its end-of-sequence token in place until min_tokens.
  Engine engine("--max-seqs 4 --prefill 64 --decode 1x1,4x1");
  Scheduler scheduler(engine.take(), 8);
  std::vector<SequenceRequest> requests(4);
  for (size_t r = 0; r < requests.size(); ++r) {
    requests[r].prompt = {static_cast<int32_t>(40 + r), 7, static_cast<int32_t>(90 + 3 * r)};
    requests[r].sampling = SamplingParams{1.0f, 0.9f, 0, 0.0f, 1000 + r};
    requests[r].maxTokens = 24;
    requests[r].ignoreEos = true;
  }
  requests[3].ignoreEos = false;
  requests[3].minTokens = 24;
  requests[3].eosIds = {5, 6};
  const std::vector<std::vector<int32_t>> together =
      expectEachEqualsItselfAlone(scheduler, requests);
  ASSERT_EQ(together.size(), requests.size());
  for (int32_t token : together[3]) {
    EXPECT_TRUE(token != 5 && token != 6) << "an end-of-sequence token before min_tokens";
  }
}

} // namespace
} // namespace glm::runtime
