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

/// Records what the scheduler hands it, choice by choice; `gone` plays a client that has left.
class RecordingSink : public TokenSink {
public:
  explicit RecordingSink(bool gone, int choices = 1)
      : gone_(gone), received_(static_cast<size_t>(choices)),
        sampled_(static_cast<size_t>(choices)),
        reasons_(static_cast<size_t>(choices), FinishReason::Error) {}
  bool onToken(int choice, const SampledToken &token) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++tokens_;
    received_.at(static_cast<size_t>(choice)).push_back(token.id);
    sampled_.at(static_cast<size_t>(choice)).push_back(token);
    return !gone_;
  }
  void onFinish(int choice, FinishReason reason, const Status &) override {
    std::lock_guard<std::mutex> lock(mutex_);
    reasons_.at(static_cast<size_t>(choice)) = reason;
    ++finished_;
    done_.notify_all();
  }
  bool cancelled() const override { return gone_; }

  /// Waits for every choice's onFinish; returns choice 0's reason and how many tokens came in all.
  std::pair<FinishReason, int> wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return finished_ == reasons_.size(); });
    return {reasons_[0], tokens_};
  }
  std::vector<int32_t> received(int choice = 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_.at(static_cast<size_t>(choice));
  }
  std::vector<SampledToken> sampled(int choice = 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    return sampled_.at(static_cast<size_t>(choice));
  }
  FinishReason reason(int choice) {
    std::lock_guard<std::mutex> lock(mutex_);
    return reasons_.at(static_cast<size_t>(choice));
  }

private:
  const bool gone_;
  std::mutex mutex_;
  std::condition_variable done_;
  size_t finished_ = 0;
  int tokens_ = 0;
  std::vector<std::vector<int32_t>> received_;
  std::vector<std::vector<SampledToken>> sampled_;
  std::vector<FinishReason> reasons_;
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
  bool onToken(int choice, const SampledToken &token) override {
    ++count;
    return RecordingSink::onToken(choice, token);
  }
  std::atomic<int> count{0};
};

class FirstTokenSink : public RecordingSink {
public:
  explicit FirstTokenSink(const StreamingSink &other) : RecordingSink(false), other_(other) {}
  bool onToken(int choice, const SampledToken &token) override {
    if (otherAtFirstToken < 0) {
      otherAtFirstToken = other_.count.load();
    }
    return RecordingSink::onToken(choice, token);
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
  // One greedy, one sampled with penalties and a bias: a recomputed sequence's token counts are
  // rebuilt from its tokens, so its draws and penalties are the same as without the preemption.
  requests[1].sampling = {.temperature = 0.8f,
                          .topP = 0.95f,
                          .presencePenalty = 0.4f,
                          .frequencyPenalty = 0.2f,
                          .repetitionPenalty = 1.2f,
                          .seed = 77,
                          .logitBias = {{5, 3.0f}, {40, -2.0f}}};
  expectEachEqualsItselfAlone(scheduler, requests);
  EXPECT_GE(scheduler.stats().preemptions, 1);
}

TEST(Scheduler, SampledRepliesInABatchEqualEachAlone) {
  // Eight sampled requests decode together, with every sampling parameter among them: each draw
  // is keyed by its request's seed and position, and penalties count each sequence's own tokens,
  // so every reply equals the one it gets alone. One bans its end-of-sequence tokens until
  // min_tokens.
  Engine engine("--max-seqs 8 --prefill 64 --decode 1x1,8x1");
  Scheduler scheduler(engine.take(), 8);
  std::vector<SequenceRequest> requests(8);
  for (size_t r = 0; r < requests.size(); ++r) {
    requests[r].prompt = {static_cast<int32_t>(40 + r), 7, static_cast<int32_t>(90 + 3 * r)};
    requests[r].sampling = {.temperature = 1.0f, .topP = 0.9f, .seed = 1000 + r};
    requests[r].maxTokens = 24;
    requests[r].ignoreEos = true;
  }
  requests[1].sampling.topK = 5;
  requests[2].sampling.minP = 0.1f;
  requests[4].sampling.presencePenalty = 1.5f;
  requests[4].sampling.frequencyPenalty = 0.5f;
  requests[5].sampling.repetitionPenalty = 1.3f;
  requests[6].sampling.logitBias = {{3, 2.0f}, {9, -100.0f}};
  requests[7].sampling.temperature = 0.0f;
  requests[7].sampling.logprobs = 4;
  requests[3].ignoreEos = false;
  requests[3].minTokens = 24;
  requests[3].eosIds = {5, 6};
  const std::vector<std::vector<int32_t>> together =
      expectEachEqualsItselfAlone(scheduler, requests);
  ASSERT_EQ(together.size(), requests.size());
  for (int32_t token : together[3]) {
    EXPECT_TRUE(token != 5 && token != 6) << "an end-of-sequence token before min_tokens";
  }
  for (int32_t token : together[6]) {
    EXPECT_NE(token, 9) << "a token biased by -100";
  }
}

TEST(Scheduler, LogprobsComeWithTheTokenSortedAndAtMostZero) {
  Engine engine("--max-seqs 2");
  Scheduler scheduler(engine.take(), 2);
  SequenceRequest request;
  request.prompt = {21, 22, 23};
  request.maxTokens = 6;
  request.ignoreEos = true;
  request.sampling = {.temperature = 0.7f, .seed = 5, .logprobs = 5};
  auto sink = std::make_shared<RecordingSink>(false);
  ASSERT_TRUE(scheduler.submit(request, sink).ok());
  EXPECT_EQ(sink->wait(), std::make_pair(FinishReason::Length, 6));
  for (const SampledToken &t : sink->sampled()) {
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_LE(t.logprob, 0.0f);
    for (size_t j = 0; j < t.top.size(); ++j) {
      EXPECT_LE(t.top[j].logprob, 0.0f);
      if (j > 0) {
        EXPECT_GE(t.top[j - 1].logprob, t.top[j].logprob);
      }
      if (t.top[j].id == t.id) {
        EXPECT_EQ(t.top[j].logprob, t.logprob);
      }
    }
    EXPECT_LE(t.logprob, t.top[0].logprob);
  }
}

TEST(Scheduler, NChoicesForkOnePromptAndEachEqualsTheReplyWithItsOwnKey) {
  // n = 3 with seed 40: the prompt is prefilled once and forked; choice i draws with seed 40 + i
  // and equals the n = 1 reply with that seed. The three differ.
  Engine engine("--max-seqs 4 --prefill 16 --decode 1x1,4x1");
  Scheduler scheduler(engine.take(), 4);
  SequenceRequest request;
  for (int32_t t = 0; t < 21; ++t) {
    request.prompt.push_back(30 + t); // more than one prefill chunk before the fork
  }
  request.maxTokens = 12;
  request.ignoreEos = true;
  request.sampling = {.temperature = 1.0f, .seed = 40, .logprobs = 2};
  request.n = 3;
  auto choices = std::make_shared<RecordingSink>(false, 3);
  ASSERT_TRUE(scheduler.submit(request, choices).ok());
  EXPECT_EQ(choices->wait(), std::make_pair(FinishReason::Length, 36));
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(choices->reason(c), FinishReason::Length) << "choice " << c;
    SequenceRequest alone = request;
    alone.n = 1;
    alone.sampling.seed = 40 + static_cast<uint64_t>(c);
    auto sink = std::make_shared<RecordingSink>(false);
    ASSERT_TRUE(scheduler.submit(alone, sink).ok());
    EXPECT_EQ(sink->wait(), std::make_pair(FinishReason::Length, 12));
    EXPECT_EQ(choices->received(c), sink->received()) << "choice " << c;
    ASSERT_EQ(choices->sampled(c).size(), sink->sampled().size());
    for (size_t k = 0; k < sink->sampled().size(); ++k) {
      // A choice's first token comes from the decode program, the lone reply's from the prefill
      // program's last row: the same token, logits that may differ in their last bits.
      EXPECT_NEAR(choices->sampled(c)[k].logprob, sink->sampled()[k].logprob, 1e-5)
          << "choice " << c << " token " << k;
    }
  }
  EXPECT_NE(choices->received(0), choices->received(1));
  EXPECT_NE(choices->received(1), choices->received(2));
  // More choices than the engine has sequences can never run.
  request.n = 5;
  const Status refused = scheduler.submit(request, std::make_shared<RecordingSink>(false, 5));
  EXPECT_EQ(refused.code(), StatusCode::InvalidArgument);
  EXPECT_NE(refused.message().find("n is 5"), std::string::npos) << refused.message();
}

TEST(Scheduler, SamplingThePlanCannotApplyIsRefusedAtSubmit) {
  Engine engine("--max-seqs 1");
  Scheduler scheduler(engine.take(), 2);
  SequenceRequest request;
  request.prompt = {1, 2};
  request.sampling.logitBias = {{1 << 30, 1.0f}};
  const Status s = scheduler.submit(request, std::make_shared<RecordingSink>(false));
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("logit_bias"), std::string::npos) << s.message();
  // min_tokens bans the end tokens through the same bias entries: with all 300 taken, the ban
  // cannot fit, and the request is refused rather than run without it.
  request.sampling.logitBias.clear();
  for (int32_t id = 0; id < kMaxLogitBias; ++id) {
    request.sampling.logitBias.emplace_back(100 + id, 1.0f);
  }
  request.minTokens = 4;
  request.eosIds = {5};
  const Status full = scheduler.submit(request, std::make_shared<RecordingSink>(false));
  EXPECT_EQ(full.code(), StatusCode::InvalidArgument);
  EXPECT_NE(full.message().find("min_tokens"), std::string::npos) << full.message();
  request.eosIds = {100}; // already biased: the ban replaces its entry, which fits
  auto sink = std::make_shared<RecordingSink>(false);
  request.maxTokens = 2;
  ASSERT_TRUE(scheduler.submit(request, sink).ok());
  EXPECT_EQ(sink->wait().first, FinishReason::Length);
}

} // namespace
} // namespace glm::runtime
