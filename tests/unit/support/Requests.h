// Made-up requests for the tiny fixture and a run of them through a scheduler over any engine:
// what the speculative-decoding and prefix-reuse tests share on the CPU and the GPU.
#pragma once

#include "runtime/engine/Scheduler.h"
#include "tests/unit/support/Recorder.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace glm::runtime::testing {

/// `n` made-up token ids of the tiny vocabulary, different for each `salt`.
inline std::vector<int32_t> promptOf(size_t n, int32_t salt) {
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < n; ++i) {
    tokens.push_back(static_cast<int32_t>((salt + 37 * i + (i * i) % 11) % 900 + 20));
  }
  return tokens;
}

/// Two requests that cannot both keep their state in a pool of 256 tokens: 100-token prompts
/// and 132 tokens each, end tokens ignored (SchedulerTest's case). The first samples greedily,
/// the second with `second`.
inline std::vector<SequenceRequest> requestsOutgrowingAPoolOf256(const SamplingParams &second) {
  std::vector<SequenceRequest> requests(2);
  for (int32_t r = 0; r < 2; ++r) {
    for (int32_t t = 0; t < 100; ++t) {
      requests[r].prompt.push_back(30 + 7 * r + t % 50);
    }
    requests[r].maxTokens = 132;
    requests[r].ignoreEos = true;
  }
  requests[1].sampling = second;
  return requests;
}

struct Reply {
  std::vector<int32_t> tokens;
  FinishReason reason;
};

/// Runs `requests` at once through a scheduler over `engine` and returns their replies (and the
/// scheduler's stats after the last, when asked).
inline std::vector<Reply> serveAtOnce(std::unique_ptr<Engine> engine,
                                      std::vector<SequenceRequest> requests, DraftOptions drafts,
                                      SchedulerStats *stats = nullptr) {
  if (engine == nullptr) {
    ADD_FAILURE() << "no engine to serve the requests";
    return {};
  }
  Scheduler scheduler(std::move(engine), 8, 0, std::move(drafts));
  std::vector<std::shared_ptr<Recorder>> sinks;
  for (SequenceRequest &r : requests) {
    sinks.push_back(std::make_shared<Recorder>());
    EXPECT_TRUE(scheduler.submit(std::move(r), sinks.back()).ok());
  }
  std::vector<Reply> replies;
  for (auto &sink : sinks) {
    std::vector<int32_t> tokens = sink->wait();
    EXPECT_TRUE(sink->error().ok()) << sink->error().toString();
    replies.push_back({std::move(tokens), sink->reason()});
  }
  if (stats != nullptr) {
    *stats = scheduler.stats();
  }
  return replies;
}

/// Whether a reply of `tokens` tokens, served alone with the MTP head's guesses, drafted in every
/// round it could: every round after the prefill's token carries a guess but those whose known
/// tokens fill the window (a rolled-back window's tokens lead the next one, so after window - 1
/// rejections in a row) and the last (no room under max_tokens), so at most one round in a
/// window's rows goes without. A round yields 1 + its accepted drafts.
inline ::testing::AssertionResult draftedEveryRoundItCould(const SchedulerStats &stats,
                                                           size_t tokens, int64_t window) {
  const int64_t rounds = static_cast<int64_t>(tokens) - 1 - stats.specAcceptedTokens;
  if (stats.specDrafts * window >= (rounds - 1) * (window - 1)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << stats.specDrafts << " of " << rounds
                                       << " rounds drafted, with windows of " << window << " rows";
}

} // namespace glm::runtime::testing
