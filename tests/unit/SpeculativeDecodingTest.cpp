// Speculative decoding over the tiny fixture's f32 CPU plan: copy drafts find what follows an
// earlier occurrence; a verify window draws what serial steps draw and a rolled-back window
// leaves the state a serial step leaves, bit for bit; and through the scheduler, replies with
// drafts (an oracle's, right and wrong by turns) equal the serial reference token for token,
// greedy and sampled, alone and batched, at every window size, with max_tokens and an
// end-of-sequence token or a consumer that stops (a stop string) landing inside an accepted
// window, across a preemption, and across the ranks of a tensor-parallel group.
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/Drafter.h"
#include "runtime/engine/LockstepEngine.h"
#include "runtime/engine/Scheduler.h"
#include "tests/unit/support/ForwardingEngine.h"
#include "tests/unit/support/Recorder.h"
#include "tests/unit/support/TinyPlan.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <unistd.h>

namespace glm::runtime {
namespace {

TEST(CopyDrafter, DraftsWhatFollowedTheLatestEarlierOccurrence) {
  CopyDrafter drafter;
  // "1 2 3" occurs at 0 (then 4 5) and at 5 (then 9): the latest one counts.
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 1, 2, 3, 9, 7, 1, 2, 3};
  EXPECT_EQ(drafter.draft(tokens, -1, 4), (std::vector<int32_t>{9, 7, 1, 2}));
  EXPECT_EQ(drafter.draft(tokens, -1, 1), (std::vector<int32_t>{9}));
  EXPECT_TRUE(drafter.draft(tokens, -1, 0).empty());
  // Grown by tokens never seen in that order: no match.
  tokens.push_back(8);
  EXPECT_TRUE(drafter.draft(tokens, -1, 4).empty());
  // Grown into a repeat of "9 7 1": what followed it before, up to the end of the tokens.
  for (int32_t t : {9, 7, 1}) {
    tokens.push_back(t);
  }
  EXPECT_EQ(drafter.draft(tokens, -1, 8), (std::vector<int32_t>{2, 3, 8, 9, 7, 1}));
  // Another sequence's tokens (shorter): indexed again, not read out of bounds.
  EXPECT_EQ(drafter.draft(std::vector<int32_t>{5, 6, 7, 5, 6, 7}, -1, 3),
            (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TRUE(drafter.draft(std::vector<int32_t>{5, 6}, -1, 3).empty());
}

TEST(CopyOrHeadDrafter, CopiesWhereTheReplyRepeatsElseTakesTheHeadsGuess) {
  CopyOrHeadDrafter drafter;
  const std::vector<int32_t> repeating = {1, 2, 3, 4, 5, 1, 2, 3};
  EXPECT_EQ(drafter.draft(repeating, 42, 4), (std::vector<int32_t>{4, 5, 1, 2}));
  const std::vector<int32_t> fresh = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(drafter.draft(fresh, 42, 4), (std::vector<int32_t>{42}));
  EXPECT_TRUE(drafter.draft(fresh, -1, 4).empty()); // no head
  EXPECT_TRUE(drafter.draft(fresh, 42, 0).empty()); // no room
}

/// The tiny fixture's f32 CPU plan with `decode` programs.
testing::TinyPlan planWith(const std::string &decode) {
  return testing::TinyPlan("--tp 1 --max-seqs 2 --max-context 512 --prefill 64 --decode " + decode);
}

using testing::promptOf;
using testing::TinyPlan;

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

SamplingParams sampled(uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.topP = 0.95f;
  p.seed = seed;
  return p;
}

TEST(VerifyWindows, DrawWhatSerialStepsDrawAndARolledBackWindowLeavesTheSerialState) {
  const TinyPlan plan = planWith("1x1,1x8");
  std::unique_ptr<CpuEngine> engine = plan.engine();
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->maxWindow(1), 8);
  EXPECT_EQ(engine->maxWindow(2), 1);
  const std::vector<int32_t> prompt = promptOf(70, 5);
  const SamplingParams params = sampled(11);
  const RowSampling row{&params, static_cast<int64_t>(prompt.size())};

  // Serial: the prompt, then 8 steps; the logits after each.
  const int serial = *engine->newSequence();
  Expected<SampledToken> first = engine->prefillSample(serial, prompt, row);
  ASSERT_TRUE(first.ok()) << first.status().toString();
  std::vector<int32_t> reply = {first->id};
  std::vector<std::vector<float>> serialLogits;
  for (int s = 0; s < 8; ++s) {
    const int slots[] = {serial};
    std::vector<float> logits;
    Expected<std::vector<SampledToken>> next =
        engine->decodeSample(slots, std::span<const int32_t>(&reply.back(), 1),
                             std::span<const RowSampling>(&row, 1), &logits);
    ASSERT_TRUE(next.ok()) << next.status().toString();
    reply.push_back((*next)[0].id);
    serialLogits.push_back(std::move(logits));
  }
  engine->endSequence(serial);

  // The same with a window: known = the first token, drafts = the serial reply with draft 3
  // wrong. Drafts 1 and 2 are accepted; the third token drawn is serial's; the window is rolled
  // back.
  const int slot = *engine->newSequence();
  ASSERT_TRUE(engine->prefillSample(slot, prompt, row).ok());
  std::vector<int32_t> drafts(reply.begin() + 1, reply.begin() + 6);
  drafts[2] = (drafts[2] + 1) % static_cast<int32_t>(engine->vocabSize());
  const VerifyWindow window{slot, std::span<const int32_t>(reply).first(1), drafts, row};
  Expected<std::vector<VerifiedWindow>> verified =
      engine->verifySample(std::span<const VerifyWindow>(&window, 1));
  ASSERT_TRUE(verified.ok()) << verified.status().toString();
  ASSERT_EQ((*verified)[0].tokens.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*verified)[0].tokens[i].id, reply[i + 1]) << "token " << i;
  }
  EXPECT_FALSE((*verified)[0].fed);
  EXPECT_EQ(engine->length(slot), static_cast<int64_t>(prompt.size()));

  // Fed again (the known and accepted tokens, then right drafts), the window is taken whole, and
  // the next serial step's logits equal the serial sequence's bit for bit.
  const std::vector<int32_t> known(reply.begin(), reply.begin() + 3);
  const std::vector<int32_t> right(reply.begin() + 3, reply.begin() + 6);
  const VerifyWindow again{slot, known, right, row};
  verified = engine->verifySample(std::span<const VerifyWindow>(&again, 1));
  ASSERT_TRUE(verified.ok()) << verified.status().toString();
  EXPECT_TRUE((*verified)[0].fed);
  ASSERT_EQ((*verified)[0].tokens.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*verified)[0].tokens[i].id, reply[i + 3]) << "token " << i;
  }
  EXPECT_EQ(engine->length(slot), static_cast<int64_t>(prompt.size() + 6));
  const int slots[] = {slot};
  std::vector<float> logits;
  Expected<std::vector<SampledToken>> next =
      engine->decodeSample(slots, std::span<const int32_t>(&reply[6], 1),
                           std::span<const RowSampling>(&row, 1), &logits);
  ASSERT_TRUE(next.ok()) << next.status().toString();
  EXPECT_EQ((*next)[0].id, reply[7]);
  ASSERT_EQ(logits.size(), serialLogits[6].size());
  EXPECT_EQ(std::memcmp(logits.data(), serialLogits[6].data(), logits.size() * sizeof(float)), 0);

  // A window wider than the plan verifies is refused, naming the widest.
  const std::vector<int32_t> nine(9, reply[0]);
  const VerifyWindow wide{slot, std::span<const int32_t>(nine).first(1),
                          std::span<const int32_t>(nine).subspan(1), row};
  Expected<std::vector<VerifiedWindow>> refused =
      engine->verifySample(std::span<const VerifyWindow>(&wide, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("largest window for that many is 8"), std::string::npos)
      << refused.status().toString();
}

using testing::Recorder;

/// Knows each prompt's serial reply and drafts it, every fifth token of it wrong.
class OracleDrafter final : public Drafter {
public:
  explicit OracleDrafter(std::vector<std::vector<int32_t>> replies)
      : replies_(std::move(replies)) {}
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int32_t, int64_t max) override {
    std::vector<int32_t> drafts;
    for (const std::vector<int32_t> &full : replies_) {
      if (tokens.size() > full.size() || !std::equal(tokens.begin(), tokens.end(), full.begin())) {
        continue;
      }
      for (size_t at = tokens.size(); at < full.size() && static_cast<int64_t>(drafts.size()) < max;
           ++at) {
        drafts.push_back(at % 5 == 3 ? full[at] + 1 : full[at]);
      }
      break;
    }
    return drafts;
  }

private:
  std::vector<std::vector<int32_t>> replies_; // prompt then reply
};

using testing::Reply;
using testing::serveAtOnce;

/// Runs `requests` at once through a scheduler over a CPU engine of `plan`.
std::vector<Reply> serve(const TinyPlan &plan, std::vector<SequenceRequest> requests,
                         DraftOptions drafts, SchedulerStats *stats = nullptr) {
  return serveAtOnce(plan.engine(), std::move(requests), std::move(drafts), stats);
}

SequenceRequest requestOf(std::vector<int32_t> prompt, SamplingParams sampling, int64_t maxTokens,
                          bool draft) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.sampling = sampling;
  r.maxTokens = maxTokens;
  r.draft = draft;
  return r;
}

TEST(SpeculativeScheduler, RepliesWithDraftsEqualTheSerialReferenceAtEveryWindow) {
  const std::vector<int32_t> a = promptOf(40, 1), b = promptOf(75, 9);
  for (const char *decode :
       {"1x1,2x1,1x2,2x2", "1x1,2x1,1x4,2x4", "1x1,2x1,1x8", "1x1,2x1,1x16,2x8"}) {
    SCOPED_TRACE(std::string("--decode ") + decode);
    const TinyPlan plan = planWith(decode);
    for (const SamplingParams &params : {greedy(), sampled(7)}) {
      SCOPED_TRACE(params.temperature > 0 ? "sampled" : "greedy");
      auto requests = [&](bool draft) {
        return std::vector<SequenceRequest>{requestOf(a, params, 24, draft),
                                            requestOf(b, params, 17, draft)};
      };
      // Alone each (one sequence a step: the widest windows), then both at once.
      std::vector<Reply> serial;
      for (SequenceRequest &r : requests(false)) {
        serial.push_back(serve(plan, {std::move(r)}, {}).front());
      }
      std::vector<std::vector<int32_t>> full;
      for (size_t i = 0; i < serial.size(); ++i) {
        full.push_back(i == 0 ? a : b);
        full.back().insert(full.back().end(), serial[i].tokens.begin(), serial[i].tokens.end());
      }
      const DrafterFactory oracle = [full] { return std::make_unique<OracleDrafter>(full); };
      SchedulerStats stats;
      std::vector<Reply> alone;
      for (SequenceRequest &r : requests(true)) {
        alone.push_back(serve(plan, {std::move(r)}, {oracle}, &stats).front());
      }
      EXPECT_GT(stats.specAcceptedTokens, 0);
      EXPECT_LT(stats.specAcceptedTokens, stats.specDraftTokens); // the wrong ones were drafted
      std::vector<Reply> batched = serve(plan, requests(true), {oracle});
      for (size_t i = 0; i < serial.size(); ++i) {
        EXPECT_EQ(serial[i].tokens.size(), i == 0 ? 24u : 17u);
        EXPECT_EQ(alone[i].tokens, serial[i].tokens) << "request " << i << " alone";
        EXPECT_EQ(batched[i].tokens, serial[i].tokens) << "request " << i << " batched";
        EXPECT_EQ(alone[i].reason, FinishReason::Length);
      }
    }
  }
}

TEST(SpeculativeScheduler, MaxTokensAnEndTokenOrAStopInsideAWindowEndTheReplyAsSerially) {
  const TinyPlan plan = planWith("1x1,1x16");
  const std::vector<int32_t> prompt = promptOf(30, 4);
  const std::vector<Reply> serial = serve(plan, {requestOf(prompt, sampled(3), 40, false)}, {});
  ASSERT_EQ(serial[0].tokens.size(), 40u);
  std::vector<int32_t> full = prompt;
  full.insert(full.end(), serial[0].tokens.begin(), serial[0].tokens.end());
  // Drafts always right: a window of 16 would run past max_tokens 5 and past the end token.
  class Right final : public Drafter {
  public:
    explicit Right(std::vector<int32_t> full) : full_(std::move(full)) {}
    std::vector<int32_t> draft(std::span<const int32_t> tokens, int32_t, int64_t max) override {
      const size_t from = std::min(tokens.size(), full_.size());
      const size_t count = std::min(static_cast<size_t>(max), full_.size() - from);
      return {full_.begin() + static_cast<std::ptrdiff_t>(from),
              full_.begin() + static_cast<std::ptrdiff_t>(from + count)};
    }

  private:
    std::vector<int32_t> full_;
  };
  const DrafterFactory right = [full] { return std::make_unique<Right>(full); };
  SchedulerStats stats;
  std::vector<Reply> five = serve(plan, {requestOf(prompt, sampled(3), 5, true)}, {right}, &stats);
  EXPECT_EQ(five[0].tokens,
            std::vector<int32_t>(serial[0].tokens.begin(), serial[0].tokens.begin() + 5));
  EXPECT_EQ(five[0].reason, FinishReason::Length);
  // The prefill draws the first token; one window of the 4 left: its known token and 3 drafts,
  // never one past max_tokens.
  EXPECT_EQ(stats.specDrafts, 1);
  EXPECT_EQ(stats.specDraftTokens, 3);
  EXPECT_EQ(stats.specAcceptedTokens, 3);
  EXPECT_EQ(stats.specAcceptedPerPosition, (std::vector<int64_t>{1, 1, 1}));

  // Right drafts and room to spare: windows of 3 drafts, then 7, then 15 (the limit doubles with
  // every window taken whole), then the 10 that max_tokens 40 leaves after the first token and
  // three windows' 28.
  std::vector<Reply> longer =
      serve(plan, {requestOf(prompt, sampled(3), 40, true)}, {right}, &stats);
  EXPECT_EQ(longer[0].tokens, serial[0].tokens);
  EXPECT_EQ(stats.specDrafts, 4);
  EXPECT_EQ(stats.specDraftTokens, 3 + 7 + 15 + 10);
  EXPECT_EQ(stats.specAcceptedTokens, stats.specDraftTokens);

  // At most 2 drafts a window: more rounds, the same reply.
  std::vector<Reply> capped =
      serve(plan, {requestOf(prompt, sampled(3), 20, true)}, {right, 2}, &stats);
  EXPECT_EQ(capped[0].tokens,
            std::vector<int32_t>(serial[0].tokens.begin(), serial[0].tokens.begin() + 20));
  EXPECT_GT(stats.specDrafts, 0);
  EXPECT_EQ(stats.specDraftTokens, 2 * stats.specDrafts);
  EXPECT_EQ(stats.specAcceptedTokens, stats.specDraftTokens);

  // A consumer that stops after 6 tokens (the server does, at a stop string), inside the second
  // window: it has the serial tokens up to there and is sent none after.
  class StopAfter final : public Recorder {
  public:
    bool onToken(int choice, const SampledToken &token) override {
      Recorder::onToken(choice, token);
      return ++count_ < 6;
    }

  private:
    int count_ = 0;
  };
  {
    Scheduler scheduler(plan.engine(), 8, 0, {right});
    auto stopping = std::make_shared<StopAfter>();
    ASSERT_TRUE(scheduler.submit(requestOf(prompt, sampled(3), 20, true), stopping).ok());
    EXPECT_EQ(stopping->wait(),
              std::vector<int32_t>(serial[0].tokens.begin(), serial[0].tokens.begin() + 6));
    EXPECT_EQ(stopping->reason(), FinishReason::Cancelled);
    EXPECT_GE(scheduler.stats().specDrafts, 2);
  }

  // The serial reply's 9th token as the end token: the reply stops before it, drafts or not.
  SequenceRequest stopping = requestOf(prompt, sampled(3), 20, true);
  const int32_t end = serial[0].tokens[8];
  stopping.eosIds = {end};
  const size_t stop = static_cast<size_t>(
      std::find(serial[0].tokens.begin(), serial[0].tokens.end(), end) - serial[0].tokens.begin());
  std::vector<Reply> ended = serve(plan, {std::move(stopping)}, {right});
  EXPECT_EQ(ended[0].tokens,
            std::vector<int32_t>(serial[0].tokens.begin(), serial[0].tokens.begin() + stop));
  EXPECT_EQ(ended[0].reason, FinishReason::Stop);
}

/// A CPU engine whose prefills must stay within each sequence's prompt: a reply's tokens go in
/// through decode steps only (a prefill would give them other bits on a GPU). Counts those that
/// did not.
class PromptOnlyPrefills final : public testing::ForwardingEngine {
public:
  using ForwardingEngine::ForwardingEngine;
  Expected<SampledToken> prefillSample(int slot, std::span<const int32_t> tokens,
                                       const RowSampling &sampling, std::vector<float> *logits,
                                       LogitRows rows) override {
    if (length(slot) + static_cast<int64_t>(tokens.size()) > sampling.promptTokens) {
      ++replyPrefills;
    }
    return ForwardingEngine::prefillSample(slot, tokens, sampling, logits, rows);
  }
  std::atomic<int> replyPrefills{0};
};

TEST(SpeculativeScheduler, APreemptedSequenceCatchesUpInWindowsAndEndsAsSerially) {
  // A pool of 256 tokens and two sequences that grow to 232 tokens each, with drafts: the newer
  // gives its pages back mid-reply, its prompt is prefilled again and its reply fed back in
  // catch-up windows of 8 (2 x 4 while both decode), never by a prefill, and both replies equal
  // their serial references.
  const TinyPlan plan(
      "--tp 1 --max-seqs 2 --max-context 256 --prefill 64 --decode 1x1,2x1,1x8,2x4");
  const std::vector<SequenceRequest> requests = testing::requestsOutgrowingAPoolOf256(sampled(77));
  std::vector<Reply> serial;
  std::vector<std::vector<int32_t>> full;
  for (const SequenceRequest &r : requests) {
    SequenceRequest alone = r;
    alone.draft = false;
    serial.push_back(serve(plan, {std::move(alone)}, {}).front());
    full.push_back(r.prompt);
    full.back().insert(full.back().end(), serial.back().tokens.begin(), serial.back().tokens.end());
  }
  auto watched = std::make_unique<PromptOnlyPrefills>(plan.engine());
  PromptOnlyPrefills *watch = watched.get();
  Scheduler scheduler(std::move(watched), 8, 0,
                      {[full] { return std::make_unique<OracleDrafter>(full); }});
  std::vector<std::shared_ptr<Recorder>> sinks;
  for (const SequenceRequest &r : requests) {
    sinks.push_back(std::make_shared<Recorder>());
    ASSERT_TRUE(scheduler.submit(r, sinks.back()).ok());
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(serial[i].tokens.size(), 132u);
    EXPECT_EQ(sinks[i]->wait(), serial[i].tokens) << "request " << i;
  }
  EXPECT_GE(scheduler.stats().preemptions, 1);
  EXPECT_GT(scheduler.stats().specAcceptedTokens, 0);
  EXPECT_EQ(watch->replyPrefills, 0);
}

TEST(SpeculativeScheduler, TensorParallelRanksVerifyAndRollBackTogether) {
  // TP 2, both ranks in this process (LockstepEngine): every verify step and every rollback runs
  // on both ranks, and the replies equal the group's serial ones.
  const TinyPlan plan(
      "--tp 2 --max-seqs 2 --max-context 512 --prefill 64 --decode 1x1,2x1,1x8,2x4");
  auto group = [&]() -> std::unique_ptr<Engine> {
    auto make = [&](LoopbackComm &comm) -> Expected<std::unique_ptr<Engine>> {
      CpuEngineOptions options;
      options.comm = &comm;
      GLM_ASSIGN_OR_RETURN(std::unique_ptr<PlanFile> file, PlanFile::open(plan.path()));
      GLM_ASSIGN_OR_RETURN(std::unique_ptr<CpuEngine> engine,
                           CpuEngine::create(std::move(file), plan.checkpoint(), options));
      return std::unique_ptr<Engine>(std::move(engine));
    };
    Expected<std::unique_ptr<LockstepEngine>> engine = LockstepEngine::createInProcess(2, make);
    EXPECT_TRUE(engine.ok()) << engine.status().toString();
    return engine.ok() ? std::move(engine).value() : nullptr;
  };
  const std::vector<int32_t> a = promptOf(40, 2), b = promptOf(60, 6);
  auto requests = [&](bool draft) {
    return std::vector<SequenceRequest>{requestOf(a, sampled(9), 20, draft),
                                        requestOf(b, greedy(), 20, draft)};
  };
  const std::vector<Reply> serial = serveAtOnce(group(), requests(false), {});
  std::vector<std::vector<int32_t>> full = {a, b};
  for (size_t i = 0; i < 2; ++i) {
    full[i].insert(full[i].end(), serial[i].tokens.begin(), serial[i].tokens.end());
  }
  EXPECT_EQ(Engine::maxWindowOf(PlanFile::open(plan.path()).value()->root(), 1), 8);
  SchedulerStats stats;
  const std::vector<Reply> drafted = serveAtOnce(
      group(), requests(true), {[full] { return std::make_unique<OracleDrafter>(full); }}, &stats);
  EXPECT_GT(stats.specAcceptedTokens, 0);
  EXPECT_LT(stats.specAcceptedTokens, stats.specDraftTokens); // some rolled back
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(serial[i].tokens.size(), 20u);
    EXPECT_EQ(drafted[i].tokens, serial[i].tokens) << "request " << i;
  }
}

TEST(SpeculativeScheduler, PenalizedRequestsAndPlansWithoutVerifyProgramsDecodeSerially) {
  const std::vector<int32_t> prompt = promptOf(30, 8);
  SamplingParams penalized = sampled(5);
  penalized.repetitionPenalty = 1.3f;
  const DrafterFactory copy = [] { return std::make_unique<CopyDrafter>(); };
  // A prompt that repeats: copy drafts would have something to say.
  std::vector<int32_t> repeating = prompt;
  repeating.insert(repeating.end(), prompt.begin(), prompt.end());
  for (const char *decode : {"1x1,1x8", "1x1"}) {
    SCOPED_TRACE(std::string("--decode ") + decode);
    const TinyPlan plan = planWith(decode);
    for (const SamplingParams &params : {penalized, sampled(5)}) {
      const std::vector<Reply> serial =
          serve(plan, {requestOf(repeating, params, 12, false)}, {copy});
      SchedulerStats stats;
      const std::vector<Reply> drafted =
          serve(plan, {requestOf(repeating, params, 12, true)}, {copy}, &stats);
      EXPECT_EQ(drafted[0].tokens, serial[0].tokens);
      if (params.repetitionPenalty != 1.0f || std::string(decode) == "1x1") {
        EXPECT_EQ(stats.specDrafts, 0);
      }
    }
  }
}

} // namespace
} // namespace glm::runtime
