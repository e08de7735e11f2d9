// Tensor-parallel plans on the CPU backend with loopback ranks: TP 2 and TP 4 give the TP 1
// logits (relative error <= 1e-5) and the same greedy tokens, also driven through an in-process
// LockstepEngine, which a failing rank ends instead of hanging.
#include "runtime/comm/LoopbackComm.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/LockstepEngine.h"

#include "tests/unit/support/Compare.h"
#include "tests/unit/support/ForwardingEngine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace glm::runtime {
namespace {

const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

using glm::testing::relativeL2;

std::vector<uint8_t> compile(int tp) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tp_test_" + std::to_string(::getpid()) + "_" + std::to_string(tp) + ".glmp");
  const std::string command = std::string(GLM_GLMC_PATH) + " compile " + kTiny.string() + " -o " +
                              path.string() +
                              " --target cpu --precision f32 --prefill-logits all --tp " +
                              std::to_string(tp) + " 2>/dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  Expected<std::unique_ptr<PlanFile>> plan = PlanFile::open(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(plan.ok()) << plan.status().toString();
  return {(*plan)->bytes().begin(), (*plan)->bytes().end()};
}

/// Prefills `prompt` and decodes `steps` greedy tokens on every rank of a TP `tp` plan; returns
/// rank 0's logits of every prefill and decode row, and the tokens.
struct RankRun {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
};

RankRun runPlan(int tp, const Checkpoint &checkpoint, const std::vector<int32_t> &prompt,
                int steps) {
  const std::vector<uint8_t> bytes = compile(tp);
  LoopbackGroup group(tp);
  std::vector<RankRun> runs(static_cast<size_t>(tp));
  std::vector<Status> errors(static_cast<size_t>(tp));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Comm> comm = group.comm(rank);
      auto fail = [&](const Status &s) { errors[static_cast<size_t>(rank)] = s; };
      Expected<std::unique_ptr<PlanFile>> plan = PlanFile::fromBytes(bytes, "tp plan");
      if (!plan.ok()) {
        return fail(plan.status());
      }
      Expected<std::unique_ptr<CpuEngine>> engine =
          CpuEngine::create(std::move(plan).value(), checkpoint, {.comm = comm.get()});
      if (!engine.ok()) {
        return fail(engine.status());
      }
      CpuEngine &e = **engine;
      RankRun &run = runs[static_cast<size_t>(rank)];
      const int slot = *e.newSequence();
      Expected<std::vector<float>> logits = e.prefill(slot, prompt);
      if (!logits.ok()) {
        return fail(logits.status());
      }
      run.logits = *logits;
      const int64_t vocab = e.vocabSize();
      for (int i = 0; i < steps; ++i) {
        const float *last = run.logits.data() + run.logits.size() - vocab;
        const int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
        run.tokens.push_back(next);
        const int slots[] = {slot};
        Expected<std::vector<float>> row = e.decode(slots, std::span(&next, 1));
        if (!row.ok()) {
          return fail(row.status());
        }
        run.logits.insert(run.logits.end(), row->begin(), row->end());
      }
    });
  }
  for (std::thread &t : threads) {
    t.join();
  }
  for (const Status &s : errors) {
    EXPECT_TRUE(s.ok()) << s.toString();
  }
  // Every rank computes the same replicated logits.
  for (int rank = 1; rank < tp; ++rank) {
    EXPECT_EQ(runs[static_cast<size_t>(rank)].tokens, runs[0].tokens) << "rank " << rank;
  }
  return runs[0];
}

TEST(TensorParallelCpu, TwoAndFourRanksGiveTheOneRankLogits) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  std::unique_ptr<SafeTensorsFile> golden =
      std::move(SafeTensorsFile::open(kTiny / "golden.safetensors")).value();
  const TensorView &ids = *golden->find("long.input_ids");
  std::vector<int32_t> prompt(static_cast<size_t>(ids.numel()));
  std::memcpy(prompt.data(), ids.data, prompt.size() * 4);

  const RankRun one = runPlan(1, *checkpoint, prompt, 6);
  ASSERT_FALSE(one.logits.empty());
  const int64_t vocab = 1024;
  for (int tp : {2, 4}) {
    const RankRun many = runPlan(tp, *checkpoint, prompt, 6);
    ASSERT_EQ(many.logits.size(), one.logits.size()) << "tp " << tp;
    double worst = 0;
    for (size_t row = 0; row < one.logits.size() / vocab; ++row) {
      worst = std::max(worst, relativeL2(many.logits.data() + row * vocab,
                                         one.logits.data() + row * vocab, vocab));
    }
    EXPECT_LE(worst, 1e-5) << "tp " << tp;
    EXPECT_EQ(many.tokens, one.tokens) << "tp " << tp;
  }
}

/// Rank `rank`'s engine of an in-process group; a test may replace it (with a failing one).
using WrapRank = std::function<std::unique_ptr<Engine>(int rank, std::unique_ptr<Engine> engine)>;

/// A TP `tp` plan's ranks as threads behind an in-process LockstepEngine over CPU engines.
std::unique_ptr<LockstepEngine> inProcess(int tp, const Checkpoint &checkpoint,
                                          LockstepOptions options = {}, WrapRank wrap = {}) {
  const std::vector<uint8_t> bytes = compile(tp);
  auto make = [&](LoopbackComm &comm) -> Expected<std::unique_ptr<Engine>> {
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<PlanFile> plan, PlanFile::fromBytes(bytes, "tp plan"));
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<CpuEngine> engine,
                         CpuEngine::create(std::move(plan), checkpoint, {.comm = &comm}));
    std::unique_ptr<Engine> rank = std::move(engine);
    return wrap ? wrap(comm.rank(), std::move(rank)) : std::move(rank);
  };
  Expected<std::unique_ptr<LockstepEngine>> engine =
      LockstepEngine::createInProcess(tp, make, std::move(options));
  EXPECT_TRUE(engine.ok()) << engine.status().toString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

TEST(TensorParallelCpu, InProcessLockstepRanksGiveTheOneRankLogits) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  std::unique_ptr<SafeTensorsFile> golden =
      std::move(SafeTensorsFile::open(kTiny / "golden.safetensors")).value();
  const TensorView &ids = *golden->find("short.input_ids");
  std::vector<int32_t> prompt(static_cast<size_t>(ids.numel()));
  std::memcpy(prompt.data(), ids.data, prompt.size() * 4);
  const RankRun one = runPlan(1, *checkpoint, prompt, 3);

  // Only rank 0's engine is called: the other ranks replay its calls on their threads.
  std::unique_ptr<LockstepEngine> engine = inProcess(2, *checkpoint);
  ASSERT_NE(engine, nullptr);
  EXPECT_TRUE(engine->health().ok());
  const int64_t vocab = engine->vocabSize();
  Expected<int> slot = engine->newSequence();
  ASSERT_TRUE(slot.ok()) << slot.status().toString();
  Expected<std::vector<float>> logits = engine->prefill(*slot, prompt);
  ASSERT_TRUE(logits.ok()) << logits.status().toString();
  std::vector<int32_t> tokens;
  for (int i = 0; i < 3; ++i) {
    const float *last = logits->data() + logits->size() - vocab;
    tokens.push_back(static_cast<int32_t>(std::max_element(last, last + vocab) - last));
    const int slots[] = {*slot};
    Expected<std::vector<float>> row = engine->decode(slots, std::span(&tokens.back(), 1));
    ASSERT_TRUE(row.ok()) << row.status().toString();
    logits->insert(logits->end(), row->begin(), row->end());
  }
  engine->endSequence(*slot);
  ASSERT_EQ(logits->size(), one.logits.size());
  for (size_t row = 0; row < one.logits.size() / vocab; ++row) {
    EXPECT_LE(relativeL2(logits->data() + row * vocab, one.logits.data() + row * vocab, vocab),
              1e-5)
        << "row " << row;
  }
  EXPECT_EQ(tokens, one.tokens);
}

/// Rank 1's engine in the failure test: fails every prefill at once, before any collective, as a
/// rank whose device failed would.
class FailingPrefill : public testing::ForwardingEngine {
public:
  using ForwardingEngine::ForwardingEngine;
  Expected<std::vector<float>> prefill(int, std::span<const int32_t>, LogitRows) override {
    return internalError("injected failure");
  }
};

TEST(TensorParallelCpu, ARankFailingMidCallEndsTheInProcessGroupInsteadOfHanging) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  std::mutex mutex;
  std::vector<std::string> logged;
  LockstepOptions options;
  options.log = [&](const std::string &message) {
    std::lock_guard<std::mutex> lock(mutex);
    logged.push_back(message);
  };
  std::unique_ptr<LockstepEngine> engine =
      inProcess(2, *checkpoint, options, [](int rank, std::unique_ptr<Engine> e) {
        return rank == 1 ? std::make_unique<FailingPrefill>(std::move(e)) : std::move(e);
      });
  ASSERT_NE(engine, nullptr);
  Expected<int> slot = engine->newSequence();
  ASSERT_TRUE(slot.ok()) << slot.status().toString();
  // Rank 0 waits for rank 1 in its first all-reduce, while rank 1 reports its failure: the ranks
  // meet out of step, and the call fails on both instead of waiting for good.
  const int32_t tokens[] = {1, 2, 3};
  Expected<std::vector<float>> logits = engine->prefill(*slot, tokens);
  ASSERT_FALSE(logits.ok());
  EXPECT_EQ(logits.status().code(), StatusCode::Unavailable) << logits.status().toString();
  EXPECT_NE(logits.status().message().find("out of step"), std::string::npos)
      << logits.status().message();
  // The group stays ended: health says why, and later calls fail at once.
  const Status health = engine->health();
  EXPECT_EQ(health.code(), StatusCode::Unavailable);
  EXPECT_NE(health.message().find("the tensor-parallel group of 2 ranks in this process ended"),
            std::string::npos)
      << health.message();
  EXPECT_EQ(engine->newSequence().status().code(), StatusCode::Unavailable);
  engine.reset(); // joins rank 1's thread
  bool reported = false;
  for (const std::string &m : logged) {
    reported |= m.find("prefill failed on rank 1: injected failure") != std::string::npos;
  }
  EXPECT_TRUE(reported) << "rank 1's failure was not logged";
}

TEST(TensorParallelCpu, APlanNeedsACommunicatorOfItsSize) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const std::vector<uint8_t> bytes = compile(2);
  Expected<std::unique_ptr<CpuEngine>> engine =
      CpuEngine::create(std::move(PlanFile::fromBytes(bytes, "tp2")).value(), *checkpoint);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("a TP 2 plan needs a communicator of that many ranks"),
            std::string::npos);
}

} // namespace
} // namespace glm::runtime
