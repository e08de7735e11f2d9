// Speculative decoding's verify windows on the CUDA engine (issue 19): a window of R rows draws,
// row by row, what R serial one-row steps draw, bit for bit in every logprob (and the MTP head's
// guess after it), and leaves the state they leave, whether it is taken whole or rolled back; alone
// and two sequences to a step, greedy and sampled, at R = 2, 4, 8 and 16 (and two sequences
// serially in one step equal each alone), on the f32 plan, the bf16 plan with the weights as
// stored, the deployment's bf16 plan (q4 dense linears, the fp8 head), the EXL3 experts' fused MoE
// and a checkpoint with an MTP layer. That is what lets the scheduler accept a draft where it
// equals the keyed draw of its row: the kernels a window runs must give each row what they give
// it alone (docs/speculative-decoding.md). Through the scheduler, replies with drafts (copy and
// the MTP head's) and across a preemption equal the serial ones.
#include "runtime/engine/CudaEngine.h"
#include "runtime/engine/Scheduler.h"
#include "runtime/weights/SafeTensors.h"
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

/// The checkpoint a plan is compiled from: the tiny fixture, it quantized to EXL3 (glmc quantize),
/// or the synthetic tiny checkpoint with an MTP layer (glmc synth --preset tiny --seed 7).
enum class Model { Tiny, Exl3, Mtp };

struct VerifyPlan {
  const char *name;    // under GLM_TEST_PLANS, as scripts/gpu-bundle.sh names it
  const char *options; // --precision and the dense formats
  Model model;
};

/// `model`'s checkpoint: scripts/gpu-bundle.sh's under GLM_FIXTURES_DIR, else made now in a
/// directory returned in `made` (removed by the caller).
Expected<std::filesystem::path> checkpointOf(Model model, std::filesystem::path &made) {
  static const char *const kBundled[] = {"glm53-tiny", "glm53-tiny-exl3", "glm53-tiny-mtp"};
  if (model == Model::Tiny) {
    return tinyFixture();
  }
  if (std::getenv("GLM_TEST_PLANS") != nullptr) {
    return fixturesDir() / kBundled[static_cast<int>(model)];
  }
  made = std::filesystem::temp_directory_path() /
         (std::string("cuda_engine_verify_") + kBundled[static_cast<int>(model)] + "_" +
          std::to_string(::getpid()));
  const std::string command =
      glmcPath() +
      (model == Model::Exl3 ? " quantize " + tinyFixture().string() + " -o " + made.string() +
                                  " --bits 4 --codebook mcg"
                            : " synth --preset tiny --seed 7 -o " + made.string()) +
      " > /dev/null 2>&1";
  if (std::system(command.c_str()) != 0) {
    return internalError("failed: ", command);
  }
  return made;
}

// Windows of every R the test runs, alone (1xR) and two to a step (2xR), and the serial programs.
constexpr const char *kPrograms = " --decode 1x1,2x1,1x2,1x4,1x8,1x16,2x2,2x8 --prefill 64";

class CudaEngineVerify : public ::testing::TestWithParam<VerifyPlan> {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    const VerifyPlan &p = GetParam();
    Expected<std::filesystem::path> model = checkpointOf(p.model, removeModel_);
    ASSERT_TRUE(model.ok()) << model.status().toString();
    Expected<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::open(*model);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().toString();
    checkpoint_ = std::move(checkpoint).value();
    Expected<std::unique_ptr<runtime::PlanFile>> plan =
        compileTiny(p.name, "--target " + gpu()->info().arch + " " + p.options + kPrograms, *model);
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
        VerifyPlan{"gpu_f32_verify", "--precision f32 --dense bf16 --head bf16", Model::Tiny},
        VerifyPlan{"gpu_bf16_verify", "--precision bf16 --dense bf16 --head bf16", Model::Tiny},
        VerifyPlan{"gpu_bf16_q4_verify", "--precision bf16", Model::Tiny},
        VerifyPlan{"exl3_bf16_verify", "--precision bf16", Model::Exl3},
        VerifyPlan{"mtp_f32_verify", "--precision f32 --dense bf16 --head bf16", Model::Mtp},
        VerifyPlan{"mtp_bf16_verify", "--precision bf16", Model::Mtp}),
    [](const ::testing::TestParamInfo<VerifyPlan> &info) { return std::string(info.param.name); });

/// A CUDA engine over plan `name` (compileTiny's) of `model`, whose weights `checkpoint` holds;
/// null after a failure the test records.
std::unique_ptr<Engine> engineOf(const std::string &name, const std::string &options,
                                 const std::filesystem::path &model, const Checkpoint &checkpoint) {
  Expected<std::unique_ptr<runtime::PlanFile>> plan = compileTiny(name, options, model);
  EXPECT_TRUE(plan.ok()) << plan.status().toString();
  if (!plan.ok()) {
    return nullptr;
  }
  Expected<std::unique_ptr<cuda::CudaEngine>> e =
      cuda::CudaEngine::create(std::move(plan).value(), checkpoint);
  EXPECT_TRUE(e.ok()) << e.status().toString();
  return e.ok() ? std::move(e).value() : nullptr;
}

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
  auto engine = [&] {
    return engineOf("gpu_bf16_pool_verify",
                    "--target " + gpu()->info().arch +
                        " --precision bf16 --dense bf16 --head bf16 --max-context 256 "
                        "--pool-tokens 256 --decode 1x1,2x1,1x8,2x4 --prefill 64",
                    tinyFixture(), **checkpoint);
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

/// The goldens of tests/goldens: GLM_GOLDENS_DIR (a GPU machine's copy of the tree), else the
/// source tree's.
std::filesystem::path goldensDir() {
  const char *env = std::getenv("GLM_GOLDENS_DIR");
  return env != nullptr ? env : GLM_GOLDENS_DIR;
}

/// The synthetic tiny checkpoint with an MTP layer, opened (and, outside the bundle, made) for
/// each test and removed after it.
class CudaEngineMtp : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    Expected<std::filesystem::path> model = checkpointOf(Model::Mtp, made_);
    ASSERT_TRUE(model.ok()) << model.status().toString();
    model_ = *model;
    Expected<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::open(model_);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().toString();
    checkpoint_ = std::move(checkpoint).value();
  }
  void TearDown() override {
    if (!made_.empty()) {
      std::filesystem::remove_all(made_);
    }
  }
  /// Plan `name` of the checkpoint with glmc `options`, on the CUDA engine.
  std::unique_ptr<Engine> engine(const std::string &name, const std::string &options) const {
    return engineOf(name, "--target " + gpu()->info().arch + " " + options, model_, *checkpoint_);
  }

  std::filesystem::path made_, model_;
  std::unique_ptr<Checkpoint> checkpoint_;
};

/// The MTP head on the GPU against transformers (tests/goldens/glm53-tiny-mtp): the f32 plan's
/// guess after every drawn token is the golden head's argmax at that row, over a prompt prefilled
/// whole and in chunks of 16 (the serving path: each chunk's head on its last row alone, the next
/// chunk's first token embedded after it) and greedy decode steps. The golden rows' smallest gap
/// between the two largest logits is 2.6e-3, far above an f32 plan's error.
TEST_F(CudaEngineMtp, GuessesTheArgmaxOfTransformersHeadAtEveryRow) {
  Expected<std::unique_ptr<SafeTensorsFile>> golden =
      SafeTensorsFile::open(goldensDir() / "glm53-tiny-mtp" / "golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().toString();
  auto ints = [&](const char *name) {
    const TensorView *t = (*golden)->find(name);
    const auto *p = reinterpret_cast<const int32_t *>(t->data);
    return std::vector<int32_t>(p, p + t->shape[0]);
  };
  const std::vector<int32_t> prompt = ints("input_ids"), greedy = ints("greedy_tokens");
  const TensorView *head = (*golden)->find("mtp_logits");
  ASSERT_NE(head, nullptr);
  const int64_t vocab = head->shape[1];
  auto guess = [&](size_t row) {
    return argmax(reinterpret_cast<const float *>(head->data) + row * vocab, vocab);
  };
  for (const auto &[name, chunk] : {std::pair{"mtp_f32_golden", 64}, {"mtp_f32_golden_c16", 16}}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Engine> engine =
        this->engine(name, "--precision f32 --dense bf16 --head bf16 --decode 1x1 --prefill " +
                               std::to_string(chunk));
    ASSERT_NE(engine, nullptr);
    SamplingParams params;
    params.temperature = 0.0f;
    const runtime::RowSampling row{&params, static_cast<int64_t>(prompt.size())};
    const int slot = *engine->newSequence();
    Expected<runtime::SampledToken> token = engine->prefillSample(slot, prompt, row);
    ASSERT_TRUE(token.ok()) << token.status().toString();
    for (size_t j = 0; j < greedy.size(); ++j) {
      const size_t at = prompt.size() - 1 + j; // the row that drew greedy[j]
      EXPECT_EQ(token->id, greedy[j]) << "row " << at;
      EXPECT_EQ(token->draft, guess(at)) << "the head's guess at row " << at;
      if (j + 1 == greedy.size()) {
        break;
      }
      const int slots[] = {slot};
      Expected<std::vector<runtime::SampledToken>> next =
          engine->decodeSample(slots, std::span<const int32_t>(&greedy[j], 1),
                               std::span<const runtime::RowSampling>(&row, 1));
      ASSERT_TRUE(next.ok()) << next.status().toString();
      token = (*next)[0];
    }
  }
}

/// The MTP head's guesses as drafts on the GPU (its plan's default drafter: copy drafts, else the
/// head's guess): rarely right on random weights, so most windows are rolled back, and every
/// reply must still be the serial one, greedy and sampled, alone and two to a step.
TEST_F(CudaEngineMtp, DraftsChangeNoReply) {
  std::vector<runtime::SequenceRequest> requests(2);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].prompt = promptOf(30 + 23 * i, static_cast<int32_t>(i));
    requests[i].maxTokens = 40;
    requests[i].ignoreEos = true;
    requests[i].sampling = {.temperature = i == 0 ? 0.0f : 0.8f, .topP = 0.95f, .seed = 3 + i};
  }
  auto serve = [&](std::vector<runtime::SequenceRequest> batch, bool draft,
                   runtime::SchedulerStats *stats) {
    for (runtime::SequenceRequest &r : batch) {
      r.draft = draft;
    }
    return runtime::testing::serveAtOnce(
        engine("mtp_bf16_verify", std::string("--precision bf16") + kPrograms), std::move(batch),
        {}, stats);
  };
  std::unique_ptr<Engine> widest =
      engine("mtp_bf16_verify", std::string("--precision bf16") + kPrograms);
  ASSERT_NE(widest, nullptr);
  const int64_t window = widest->maxWindow(1);
  widest.reset();
  runtime::SchedulerStats stats;
  const std::vector<runtime::testing::Reply> serial = serve(requests, false, &stats);
  ASSERT_EQ(serial.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(serial[i].tokens.size(), 40u);
    const std::vector<runtime::testing::Reply> alone = serve({requests[i]}, true, &stats);
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(alone[0].tokens, serial[i].tokens) << "request " << i << " alone";
    EXPECT_TRUE(runtime::testing::draftedEveryRoundItCould(stats, serial[i].tokens.size(), window))
        << "request " << i;
  }
  const std::vector<runtime::testing::Reply> together = serve(requests, true, &stats);
  ASSERT_EQ(together.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(together[i].tokens, serial[i].tokens) << "request " << i << " together";
  }
}

} // namespace
} // namespace glm::testing
