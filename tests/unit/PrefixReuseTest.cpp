// Kept prompt states (prefix reuse) over the tiny fixture's f32 CPU plan: a sequence resumed from
// a kept state continues bit for bit as a cold prefill of the same tokens does, wherever the kept
// length ends (inside a page, on a page boundary, inside a KDA chunk), whether the sequence it was
// kept from went on or ended; through the scheduler, a second turn, a repeated prompt and a shared
// opening reply as they do cold, and kept states give their pages up before a running request.
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/LockstepEngine.h"
#include "runtime/engine/PrefixCache.h"
#include "runtime/engine/Scheduler.h"
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

using testing::promptOf;
using testing::TinyPlan;

bool sameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Greedy continuation of a sequence whose prefill gave `logits` (the last row's), `steps` tokens:
/// every decode step's logits, concatenated.
std::vector<float> decodeGreedy(Engine &engine, int slot, std::span<const float> last, int steps) {
  const int64_t vocab = engine.vocabSize();
  std::vector<float> all, row(last.end() - vocab, last.end());
  for (int s = 0; s < steps; ++s) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    const int slots[] = {slot};
    Expected<std::vector<float>> logits = engine.decode(slots, std::span<const int32_t>(&next, 1));
    EXPECT_TRUE(logits.ok()) << logits.status().toString();
    if (!logits.ok()) {
      return all;
    }
    row = *logits;
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

class KeptStates : public ::testing::Test {
protected:
  // Three sequences, every row's logits, 64-token prefill chunks: a prompt of 150 tokens spans
  // several pages and chunks.
  static void SetUpTestSuite() {
    plan_ = new TinyPlan("--tp 1 --max-seqs 3 --max-context 512 --prefill 64 --prefill-logits all");
  }
  static void TearDownTestSuite() {
    delete plan_;
    plan_ = nullptr;
  }
  static TinyPlan *plan_;
};
TinyPlan *KeptStates::plan_ = nullptr;

TEST_F(KeptStates, AResumedSequenceContinuesAsAColdPrefillBitForBit) {
  std::unique_ptr<CpuEngine> engine = plan_->engine();
  ASSERT_NE(engine, nullptr);
  const int64_t page = engine->plan().state_pool()->page_tokens();
  const std::vector<int32_t> prompt = promptOf(150, 3);
  // Cold: the whole prompt, then four greedy steps.
  const int cold = *engine->newSequence();
  Expected<std::vector<float>> coldRows = engine->prefill(cold, prompt);
  ASSERT_TRUE(coldRows.ok()) << coldRows.status().toString();
  const std::vector<float> coldDecode = decodeGreedy(*engine, cold, *coldRows, 4);
  engine->endSequence(cold);
  const int64_t vocab = engine->vocabSize();
  const int64_t allPages = engine->freePages();

  // Kept lengths inside a page, on a page boundary, inside a KDA chunk of HF's chunked form (64),
  // and one token short of the prompt.
  for (int64_t kept : {page + 3, 2 * page, int64_t{37}, int64_t{149}}) {
    SCOPED_TRACE("kept at " + std::to_string(kept));
    for (bool sourceGoesOn : {false, true}) {
      SCOPED_TRACE(sourceGoesOn ? "the source decodes on" : "the source ended");
      const int source = *engine->newSequence();
      ASSERT_TRUE(engine->prefill(source, std::span(prompt).first(kept)).ok());
      Expected<int> id = engine->keepState(source);
      ASSERT_TRUE(id.ok()) << id.status().toString();
      EXPECT_EQ(engine->keptLength(*id), kept);
      if (sourceGoesOn) {
        // Other tokens written past the kept length into the pages the kept state shares.
        const std::vector<int32_t> other = promptOf(40, 11);
        ASSERT_TRUE(engine->prefill(source, other).ok());
      } else {
        engine->endSequence(source);
      }
      const int resumed = *engine->newSequence();
      ASSERT_TRUE(engine->resumeState(*id, resumed).ok());
      EXPECT_EQ(engine->length(resumed), kept);
      Expected<std::vector<float>> rows =
          engine->prefill(resumed, std::span(prompt).subspan(static_cast<size_t>(kept)));
      ASSERT_TRUE(rows.ok()) << rows.status().toString();
      EXPECT_TRUE(sameBits(*rows, std::span(*coldRows).subspan(static_cast<size_t>(kept * vocab))));
      EXPECT_TRUE(sameBits(decodeGreedy(*engine, resumed, *rows, 4), coldDecode));
      engine->endSequence(resumed);
      if (sourceGoesOn) {
        engine->endSequence(source);
      }
      engine->dropState(*id);
      EXPECT_EQ(engine->freePages(), allPages) << "every shared page is free again";
    }
  }
}

TEST_F(KeptStates, AKeptStateOutlivesItsSequenceAndServesSeveral) {
  std::unique_ptr<CpuEngine> engine = plan_->engine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> prompt = promptOf(100, 5);
  const int source = *engine->newSequence();
  ASSERT_TRUE(engine->prefill(source, std::span(prompt).first(70)).ok());
  const int id = *engine->keepState(source);
  engine->endSequence(source);
  // Two sequences resume from it at once and write different tokens past it.
  const int a = *engine->newSequence(), b = *engine->newSequence();
  ASSERT_TRUE(engine->resumeState(id, a).ok());
  ASSERT_TRUE(engine->resumeState(id, b).ok());
  Expected<std::vector<float>> ra = engine->prefill(a, std::span(prompt).subspan(70));
  Expected<std::vector<float>> rb = engine->prefill(b, promptOf(30, 9));
  ASSERT_TRUE(ra.ok() && rb.ok());
  engine->endSequence(a);
  engine->endSequence(b);
  const int cold = *engine->newSequence();
  Expected<std::vector<float>> rc = engine->prefill(cold, prompt);
  ASSERT_TRUE(rc.ok());
  EXPECT_TRUE(sameBits(*ra, std::span(*rc).subspan(70 * static_cast<size_t>(engine->vocabSize()))));
}

TEST_F(KeptStates, ResumingIntoAUsedSequenceOrFromAnUnknownStateIsRefused) {
  std::unique_ptr<CpuEngine> engine = plan_->engine();
  ASSERT_NE(engine, nullptr);
  const int source = *engine->newSequence();
  ASSERT_TRUE(engine->prefill(source, promptOf(20, 1)).ok());
  const int id = *engine->keepState(source);
  Status used = engine->resumeState(id, source);
  EXPECT_EQ(used.code(), StatusCode::InvalidArgument);
  EXPECT_NE(used.message().find("not a new sequence"), std::string::npos) << used.message();
  const int fresh = *engine->newSequence();
  Status unknown = engine->resumeState(id + 5, fresh);
  EXPECT_NE(unknown.message().find("does not exist"), std::string::npos) << unknown.message();
  EXPECT_EQ(engine->length(fresh), 0);
}

TEST(PrefixCache, FindsTheLongestKeptPrefixWithinTheLimitAndEvictsTheLeastRecentlyUsed) {
  PrefixCache cache(3);
  const std::vector<int32_t> prompt = promptOf(50, 2);
  cache.insert(std::vector<int32_t>(prompt.begin(), prompt.begin() + 10), 7);
  cache.insert(std::vector<int32_t>(prompt.begin(), prompt.begin() + 30), 8);
  std::vector<int32_t> other(prompt.begin(), prompt.begin() + 40);
  other[35] += 1; // differs at 35: not a prefix of the prompt
  const uint64_t serial = cache.insert(other, 9);
  std::optional<PrefixCache::Hit> hit = cache.find(prompt, 49);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->kept, 8);
  EXPECT_EQ(hit->length, 30);
  hit = cache.find(prompt, 29); // at most 29 tokens: the 10-token one
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->kept, 7);
  EXPECT_TRUE(cache.full());
  EXPECT_EQ(cache.evict(), 9); // found least recently: 8 and 7 were just found
  EXPECT_EQ(cache.remove(serial), std::nullopt);
  EXPECT_FALSE(cache.find(promptOf(50, 4), 50));
}

using testing::Recorder;

struct Reply {
  std::vector<int32_t> tokens;
  int64_t cached = 0;
};

Reply ask(Scheduler &scheduler, const SequenceRequest &request) {
  auto sink = std::make_shared<Recorder>();
  Status s = scheduler.submit(request, sink);
  EXPECT_TRUE(s.ok()) << s.toString();
  if (!s.ok()) {
    return {};
  }
  Reply r{sink->wait(), sink->cached()};
  EXPECT_EQ(sink->reason(), FinishReason::Length);
  return r;
}

SequenceRequest requestOf(std::vector<int32_t> prompt, bool sampled) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.maxTokens = 6;
  r.ignoreEos = true;
  if (sampled) {
    // Penalties read the token counts a kept state brings back: they must be the prompt's.
    r.sampling = {.temperature = 0.9f,
                  .topP = 0.9f,
                  .presencePenalty = 0.5f,
                  .frequencyPenalty = 0.3f,
                  .repetitionPenalty = 1.3f,
                  .seed = 1234};
  }
  return r;
}

class ReuseThroughTheScheduler : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    plan_ = new TinyPlan("--tp 1 --max-seqs 2 --max-context 512 --prefill 64");
  }
  static void TearDownTestSuite() {
    delete plan_;
    plan_ = nullptr;
  }
  static TinyPlan *plan_;
};
TinyPlan *ReuseThroughTheScheduler::plan_ = nullptr;

TEST_F(ReuseThroughTheScheduler, TurnsRepeatsAndSharedOpeningsReplyAsTheyDoCold) {
  Scheduler cold(plan_->engine(), 8, 0);
  Scheduler warm(plan_->engine(), 8, 16);
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled with penalties" : "greedy");
    const std::vector<int32_t> first = promptOf(150, sampled ? 21 : 20);
    Reply one = ask(warm, requestOf(first, sampled));
    EXPECT_EQ(one.cached, 0);
    EXPECT_EQ(one.tokens, ask(cold, requestOf(first, sampled)).tokens);

    // The next turn holds the first prompt and the reply (but its last token, which never
    // entered the engine), then more: it resumes from the end of the reply.
    std::vector<int32_t> second = first;
    second.insert(second.end(), one.tokens.begin(), one.tokens.end() - 1);
    const std::vector<int32_t> more = promptOf(17, 40);
    second.insert(second.end(), more.begin(), more.end());
    Reply two = ask(warm, requestOf(second, sampled));
    EXPECT_EQ(two.cached, static_cast<int64_t>(first.size() + one.tokens.size() - 1));
    EXPECT_EQ(two.tokens, ask(cold, requestOf(second, sampled)).tokens);

    // The first prompt again: its state at its end cannot give the first token (a row must be
    // prefilled), so it resumes at its last chunk boundary, 128.
    Reply again = ask(warm, requestOf(first, sampled));
    EXPECT_EQ(again.cached, 128);
    EXPECT_EQ(again.tokens, one.tokens);

    // Another conversation with the same opening of 140 tokens resumes at its boundary 128.
    std::vector<int32_t> shared(first.begin(), first.begin() + 140);
    const std::vector<int32_t> tail = promptOf(30, 77);
    shared.insert(shared.end(), tail.begin(), tail.end());
    Reply three = ask(warm, requestOf(shared, sampled));
    EXPECT_EQ(three.cached, 128);
    EXPECT_EQ(three.tokens, ask(cold, requestOf(shared, sampled)).tokens);
  }
  const SchedulerStats stats = warm.stats();
  EXPECT_GT(stats.prefixHitTokens, 0);
  EXPECT_GT(stats.prefixQueryTokens, stats.prefixHitTokens);
  EXPECT_LE(stats.keptStates, 16);
  EXPECT_EQ(stats.preemptions, 0);
}

TEST(PrefixReuse, KeptStatesGiveTheirPagesUpBeforeARunningRequest) {
  // A pool of 256 tokens. Kept states of earlier requests hold most of it; two new requests that
  // grow to 200 tokens each need it back. They must get it from the kept states, not from each
  // other: no preemption, and replies equal to a cold server's.
  TinyPlan plan("--tp 1 --max-seqs 2 --max-context 256 --prefill 64 --decode 1x1,2x1");
  Scheduler cold(plan.engine(), 8, 0);
  Scheduler warm(plan.engine(), 8, 8);
  for (int32_t salt : {1, 2, 3}) {
    ask(warm, requestOf(promptOf(150, salt), false));
  }
  EXPECT_GE(warm.stats().keptStates, 3);
  std::vector<std::shared_ptr<Recorder>> sinks;
  std::vector<SequenceRequest> burst;
  for (int32_t salt : {50, 60}) {
    burst.push_back(requestOf(promptOf(40, salt), salt == 60));
    burst.back().maxTokens = 60;
  }
  for (const SequenceRequest &r : burst) {
    sinks.push_back(std::make_shared<Recorder>());
    ASSERT_TRUE(warm.submit(r, sinks.back()).ok());
  }
  for (size_t i = 0; i < burst.size(); ++i) {
    EXPECT_EQ(sinks[i]->wait(), ask(cold, burst[i]).tokens) << "request " << i;
  }
  EXPECT_EQ(warm.stats().preemptions, 0);
}

TEST(PrefixReuse, TensorParallelRanksKeepAndResumeTogether) {
  // TP 2, both ranks in this process: the kept state and its resumption go to both.
  TinyPlan plan("--tp 2 --max-seqs 2 --max-context 512 --prefill 64");
  const Checkpoint &checkpoint = plan.checkpoint();
  auto make = [&](LoopbackComm &comm) -> Expected<std::unique_ptr<Engine>> {
    CpuEngineOptions options;
    options.comm = &comm;
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<PlanFile> file, PlanFile::open(plan.path()));
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<CpuEngine> engine,
                         CpuEngine::create(std::move(file), checkpoint, options));
    return std::unique_ptr<Engine>(std::move(engine));
  };
  auto coldEngine = LockstepEngine::createInProcess(2, make);
  auto warmEngine = LockstepEngine::createInProcess(2, make);
  ASSERT_TRUE(coldEngine.ok() && warmEngine.ok());
  Scheduler cold(std::move(coldEngine).value(), 8, 0);
  Scheduler warm(std::move(warmEngine).value(), 8, 8);
  const std::vector<int32_t> first = promptOf(100, 8);
  Reply one = ask(warm, requestOf(first, true));
  std::vector<int32_t> second = first;
  second.insert(second.end(), one.tokens.begin(), one.tokens.end() - 1);
  second.push_back(33);
  Reply two = ask(warm, requestOf(second, true));
  EXPECT_EQ(two.cached, static_cast<int64_t>(second.size() - 1));
  EXPECT_EQ(two.tokens, ask(cold, requestOf(second, true)).tokens);
}

} // namespace
} // namespace glm::runtime
