// Speculative decoding's verify windows on the CUDA engine (issue 19): a window of R rows draws,
// row by row, what R serial one-row steps draw, bit for bit in every logprob, and leaves the state
// they leave, whether it is taken whole or rolled back; alone and two sequences to a step, greedy
// and sampled, at R = 2, 4, 8 and 16 (and two sequences serially in one step equal each alone), on
// the f32 plan, the bf16 plan with the weights as stored, the deployment's bf16 plan (q4 dense
// linears, the fp8 head) and the EXL3 experts' fused MoE. That is what lets the scheduler accept a
// draft where it equals the keyed draw of its row: the kernels a window runs must give each row
// what they give it alone (docs/speculative-decoding.md). Through the scheduler, replies with
// drafts and across a preemption equal the serial ones.
#include "runtime/engine/CudaEngine.h"
#include "runtime/engine/Scheduler.h"
#include "tests/gpu/support/GpuTest.h"
#include "tests/gpu/support/TinyModel.h"
#include "tests/unit/support/Requests.h"

#include <cstdlib>
#include <unistd.h>

namespace glm::testing {
namespace {

using runtime::Engine;
using runtime::SamplingParams;
using runtime::testing::promptOf;

struct VerifyPlan {
  const char *name;    // under GLM_TEST_PLANS, as scripts/gpu-bundle.sh names it
  const char *options; // --precision and the dense formats
  bool exl3;           // compiled from the fixture quantized to EXL3
};

// Windows of every R the test runs, alone (1xR) and two to a step (2xR), and the serial programs.
constexpr const char *kPrograms = " --decode 1x1,2x1,1x2,1x4,1x8,1x16,2x2,2x8 --prefill 64";

class CudaEngineVerify : public ::testing::TestWithParam<VerifyPlan> {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    const VerifyPlan &p = GetParam();
    std::filesystem::path model = tinyFixture();
    if (p.exl3) {
      model = fixturesDir() / "glm53-tiny-exl3"; // scripts/gpu-bundle.sh makes it
      if (std::getenv("GLM_TEST_PLANS") == nullptr) {
        model = std::filesystem::temp_directory_path() /
                ("cuda_engine_verify_exl3_" + std::to_string(::getpid()));
        const std::string quantize = glmcPath() + " quantize " + tinyFixture().string() + " -o " +
                                     model.string() + " --bits 4 --codebook mcg > /dev/null";
        ASSERT_EQ(std::system(quantize.c_str()), 0) << quantize;
        removeModel_ = model;
      }
    }
    Expected<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::open(model);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().toString();
    checkpoint_ = std::move(checkpoint).value();
    Expected<std::unique_ptr<runtime::PlanFile>> plan =
        compileTiny(p.name, "--target " + gpu()->info().arch + " " + p.options + kPrograms, model);
    ASSERT_TRUE(plan.ok()) << plan.status().toString();
    Expected<std::unique_ptr<cuda::CudaEngine>> engine =
        cuda::CudaEngine::create(std::move(plan).value(), *checkpoint_);
    ASSERT_TRUE(engine.ok()) << engine.status().toString();
    engine_ = std::move(engine).value();
  }
  void TearDown() override {
    engine_.reset();
    if (!removeModel_.empty()) {
      std::filesystem::remove_all(removeModel_);
    }
  }

  static SamplingParams sampled(uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.topP = 0.95f;
    p.seed = seed;
    p.logprobs = 5; // the bits compared: the drawn token's logprob and the 5 most likely
    return p;
  }

  static SamplingParams greedy() {
    SamplingParams p = sampled(0);
    p.temperature = 0.0f;
    return p;
  }

  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Engine> engine_;
  std::filesystem::path removeModel_;
};

TEST_P(CudaEngineVerify, AWindowAloneDrawsWhatSerialStepsDraw) {
  ASSERT_EQ(engine_->maxWindow(1), 16);
  for (const int64_t rows : {2, 4, 8, 16}) {
    for (const SamplingParams &sampling : {greedy(), sampled(7)}) {
      const Status s = windowsEqualSerial(*engine_, {promptOf(70, 3)}, rows, sampling, 4);
      EXPECT_TRUE(s.ok()) << "R = " << rows << (sampling.temperature > 0 ? ", sampled: " : ": ")
                          << s.toString();
    }
  }
}

// R = 1 is serial decoding two sequences to a step: what a batch draws without drafts.
TEST_P(CudaEngineVerify, TwoWindowsInOneStepDrawWhatEachDrawsSerially) {
  ASSERT_EQ(engine_->maxWindow(2), 8);
  for (const int64_t rows : {1, 2, 8}) {
    const Status s =
        windowsEqualSerial(*engine_, {promptOf(70, 3), promptOf(45, 11)}, rows, sampled(5), 4);
    EXPECT_TRUE(s.ok()) << "2 windows of R = " << rows << ": " << s.toString();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, CudaEngineVerify,
    ::testing::Values(
        VerifyPlan{"gpu_f32_verify", "--precision f32 --dense bf16 --head bf16", false},
        VerifyPlan{"gpu_bf16_verify", "--precision bf16 --dense bf16 --head bf16", false},
        VerifyPlan{"gpu_bf16_q4_verify", "--precision bf16", false},
        VerifyPlan{"exl3_bf16_verify", "--precision bf16", true}),
    [](const ::testing::TestParamInfo<VerifyPlan> &info) { return std::string(info.param.name); });

/// Issue 19's exactness through the scheduler on the GPU, where a prefilled row and a decoded row
/// get different bits: with a pool of 256 tokens (SchedulerTest's case), two requests that grow to
/// 232 tokens each make the newer one give its pages back mid-reply. Its prompt is prefilled again
/// and its reply fed back through decode windows (Scheduler.cpp, step 3), so that it ends as it
/// would alone; with copy drafts and without, greedy and sampled.
TEST(CudaEngineVerifyScheduler, PreemptedRepliesWithAndWithoutDraftsEqualTheirsAlone) {
  std::string why;
  ASSERT_NE(gpu(&why), nullptr) << why;
  Expected<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::open(tinyFixture());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().toString();
  auto engine = [&]() -> std::unique_ptr<Engine> {
    Expected<std::unique_ptr<runtime::PlanFile>> plan = compileTiny(
        "gpu_bf16_pool_verify", "--target " + gpu()->info().arch +
                                    " --precision bf16 --dense bf16 --head bf16 "
                                    "--max-context 256 --pool-tokens 256 --decode 1x1,2x1,1x8,2x4 "
                                    "--prefill 64");
    EXPECT_TRUE(plan.ok()) << plan.status().toString();
    if (!plan.ok()) {
      return nullptr;
    }
    Expected<std::unique_ptr<cuda::CudaEngine>> e =
        cuda::CudaEngine::create(std::move(plan).value(), **checkpoint);
    EXPECT_TRUE(e.ok()) << e.status().toString();
    return e.ok() ? std::move(e).value() : nullptr;
  };
  const std::vector<runtime::SequenceRequest> requests =
      runtime::testing::requestsOutgrowingAPoolOf256(
          {.temperature = 0.8f, .topP = 0.95f, .seed = 77});
  runtime::SchedulerStats stats;
  std::vector<std::vector<int32_t>> alone;
  for (runtime::SequenceRequest r : requests) {
    r.draft = false;
    const std::vector<runtime::testing::Reply> reply =
        runtime::testing::serveAtOnce(engine(), {r}, {}, &stats);
    ASSERT_EQ(reply.size(), 1u);
    ASSERT_EQ(reply[0].tokens.size(), 132u);
    alone.push_back(reply[0].tokens);
  }
  for (const bool draft : {false, true}) {
    std::vector<runtime::SequenceRequest> batch = requests;
    for (runtime::SequenceRequest &r : batch) {
      r.draft = draft;
    }
    const std::vector<runtime::testing::Reply> together =
        runtime::testing::serveAtOnce(engine(), batch, {}, &stats);
    EXPECT_GE(stats.preemptions, 1) << (draft ? "drafts" : "no drafts");
    ASSERT_EQ(together.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(together[i].tokens, alone[i])
          << "request " << i << (draft ? ", drafts" : ", no drafts");
    }
  }
}

} // namespace
} // namespace glm::testing
