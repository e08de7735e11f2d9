// Tensor-parallel plans on the CPU backend with loopback ranks: TP 2 and TP 4 give the TP 1
// logits (relative error <= 1e-5) and the same greedy tokens.
#include "runtime/comm/LoopbackComm.h"
#include "runtime/engine/CpuEngine.h"

#include "tests/unit/support/Compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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
                              path.string() + " --target cpu --precision f32 --tp " +
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
