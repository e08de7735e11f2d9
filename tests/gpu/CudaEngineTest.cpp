// The CUDA backend running compiled plans of the tiny fixture: an f32 plan against the CPU backend
// on the same checkpoint (prefill logits whole and chunked, decode logits, greedy tokens, several
// sequences per step), graph replay against eager launches bit for bit, and a bf16 plan's top-1
// tokens against the f32 plan's. The tiny fixture quantized to EXL3 runs as its dequantized twin.
//
// Why against the CPU backend and not HF's golden directly: HF's run broke exact top-k ties in the
// indexer (ReLU zeros, about 1% of rows) by the element moves of torch's CPU partial_sort, which
// the CPU backend replays (TopkTieRule::TorchCpu) to match the golden to 5e-6. The GPU implements
// the serving rule, ties to the lower pool, and from the first tie on selects other tokens than
// HF did; the CPU backend with that same rule is the reference it must equal.
#include "runtime/engine/CudaEngine.h"
#include "runtime/engine/CpuEngine.h"
#include "tests/gpu/support/GpuTest.h"
#include "tests/gpu/support/TinyModel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <unistd.h>

namespace glm::testing {
namespace {

using runtime::CpuEngine;
using runtime::Engine;
using runtime::PlanFile;

class CudaEngineTiny : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string why;
    if (gpu(&why) == nullptr) {
      setUpError_ = why;
      return;
    }
    const std::string arch = gpu()->info().arch;
    checkpoint_ = std::move(Checkpoint::open(tinyFixture())).value().release();
    auto open = [&](const std::string &name, const std::string &options, auto make) -> Engine * {
      Expected<std::unique_ptr<PlanFile>> plan = compileTiny(name, options);
      if (!plan.ok()) {
        setUpError_ += plan.status().toString() + "\n";
        return nullptr;
      }
      auto engine = make(std::move(plan).value());
      if (!engine.ok()) {
        setUpError_ += engine.status().toString() + "\n";
        return nullptr;
      }
      return std::move(engine).value().release();
    };
    // Every prefill row's logits, compared against the CPU backend's row by row; the serving
    // plans below compute only each chunk's last.
    const std::string programs = " --decode 1x1,2x1 --prefill 1152 --prefill-logits all";
    cpu_ = open("cpu_f32", "--target cpu --precision f32" + programs,
                [&](auto plan) { return CpuEngine::create(std::move(plan), *checkpoint_); });
    f32_ = open("gpu_f32", "--target " + arch + " --precision f32" + programs,
                [&](auto plan) { return cuda::CudaEngine::create(std::move(plan), *checkpoint_); });
    eager_ = open("gpu_f32", "--target " + arch + " --precision f32" + programs, [&](auto plan) {
      return cuda::CudaEngine::create(std::move(plan), *checkpoint_, {.graphs = false});
    });
    // A small prefill program: prompts run in chunks of 64 rows with a padded last chunk.
    chunked_ = open(
        "gpu_f32_prefill64",
        "--target " + arch + " --precision f32 --decode 1x1,2x1 --prefill 64 --prefill-logits all",
        [&](auto plan) { return cuda::CudaEngine::create(std::move(plan), *checkpoint_); });
    // What `glmc serve` runs: the head on each prefill chunk's last row alone.
    servingF32_ = open(
        "gpu_f32_serving", "--target " + arch + " --precision f32 --decode 1x1,2x1 --prefill 64",
        [&](auto plan) { return cuda::CudaEngine::create(std::move(plan), *checkpoint_); });
    servingBf16_ =
        open("gpu_bf16_serving",
             "--target " + arch +
                 " --precision bf16 --dense bf16 --head bf16 --decode 1x1,2x1 --prefill 64",
             [&](auto plan) { return cuda::CudaEngine::create(std::move(plan), *checkpoint_); });
    // The bf16 plans hold the weights as stored (a GPU plan's default quantizes them; the
    // quantized plans have a suite of their own below).
    bf16_ = open(
        "gpu_bf16", "--target " + arch + " --precision bf16 --dense bf16 --head bf16" + programs,
        [&](auto plan) { return cuda::CudaEngine::create(std::move(plan), *checkpoint_); });
    // The same plan with each mhc_post, each sub-block's input norm, each KDA output norm and each
    // MoE sum its own step (plan-fuse-mhc, plan-fuse-mhc-norm, plan-fuse-kda-norm and
    // plan-fuse-linear-add off), to check the fusions by.
    bf16Unfused_ =
        open("gpu_bf16_unfused",
             "--target " + arch +
                 " --precision bf16 --dense bf16 --head bf16 --fuse-mhc off "
                 "--fuse-mhc-norm off --fuse-kda-norm off --fuse-linear-add off" +
                 programs,
             [&](auto plan) { return cuda::CudaEngine::create(std::move(plan), *checkpoint_); });
    golden_ =
        std::move(SafeTensorsFile::open(tinyFixture() / "golden.safetensors")).value().release();
  }
  static void TearDownTestSuite() {
    for (Engine *e :
         {cpu_, f32_, eager_, chunked_, bf16_, servingF32_, servingBf16_, bf16Unfused_}) {
      delete e;
    }
    delete golden_;
    delete checkpoint_;
  }
  void SetUp() override { ASSERT_TRUE(setUpError_.empty()) << setUpError_; }

  static std::vector<int32_t> ints(const std::string &name) {
    const TensorView &t = *golden_->find(name);
    std::vector<int32_t> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.data, v.size() * 4);
    return v;
  }

  /// Prefill logits of `ids` (in `chunks` calls) then `steps` greedy decode steps' logits.
  static Expected<std::vector<float>> generate(Engine &engine, const std::vector<int32_t> &ids,
                                               size_t steps, std::vector<size_t> chunkEnds = {}) {
    GLM_ASSIGN_OR_RETURN(GreedyRun run, greedyRun(engine, ids, steps, std::move(chunkEnds)));
    return std::move(run.logits);
  }

  /// The f32 GPU plan against the CPU backend on a golden case, row by row.
  void checkCase(const std::string &name, std::vector<size_t> chunkEnds = {}) {
    const std::vector<int32_t> ids = ints(name + ".input_ids");
    const size_t steps = ints(name + ".greedy_tokens").size();
    Expected<std::vector<float>> want = generate(*cpu_, ids, steps, chunkEnds);
    Expected<std::vector<float>> got = generate(*f32_, ids, steps, chunkEnds);
    ASSERT_TRUE(want.ok()) << want.status().toString();
    ASSERT_TRUE(got.ok()) << got.status().toString();
    ASSERT_EQ(got->size(), want->size());
    const int64_t vocab = cpu_->vocabSize();
    double worst = 0;
    for (size_t r = 0; r < want->size() / vocab; ++r) {
      const double e = rowError(got->data() + r * vocab, want->data() + r * vocab, vocab);
      if (e > kTolerance && worst <= kTolerance) {
        ADD_FAILURE() << name << ": first row over tolerance: " << r << " (" << e << ")";
      }
      worst = std::max(worst, e);
      EXPECT_EQ(argmax(got->data() + r * vocab, vocab), argmax(want->data() + r * vocab, vocab))
          << name << " row " << r;
    }
    EXPECT_LE(worst, kTolerance) << name;
    RecordProperty(name + "_worst_row_error", std::to_string(worst));
  }

  // The CPU backend sits within 5e-6 of HF in fp32; an f32 GPU plan (f32 sums in another order)
  // is held to the same bound the CPU backend is held to against the golden.
  static constexpr double kTolerance = 1e-4;
  static inline std::string setUpError_;
  static inline Checkpoint *checkpoint_ = nullptr;
  static inline Engine *cpu_ = nullptr, *f32_ = nullptr, *eager_ = nullptr, *chunked_ = nullptr,
                       *bf16_ = nullptr, *servingF32_ = nullptr, *servingBf16_ = nullptr,
                       *bf16Unfused_ = nullptr;
  static inline SafeTensorsFile *golden_ = nullptr;
  std::vector<float> lastRow_;
};

TEST_F(CudaEngineTiny, ShortMatchesTheCpuBackend) { checkCase("short"); }
TEST_F(CudaEngineTiny, LongMatchesTheCpuBackend) { checkCase("long"); }
TEST_F(CudaEngineTiny, ChunkedPrefillMatchesTheCpuBackend) { checkCase("chunked", {64, 100, 150}); }
TEST_F(CudaEngineTiny, ExtraLongMatchesTheCpuBackend) { checkCase("xlong"); }

TEST_F(CudaEngineTiny, GraphReplayEqualsEagerLaunchesBitForBit) {
  const std::vector<int32_t> ids = ints("long.input_ids");
  Expected<std::vector<float>> graph = generate(*f32_, ids, 8);
  Expected<std::vector<float>> eager = generate(*eager_, ids, 8);
  ASSERT_TRUE(graph.ok()) << graph.status().toString();
  ASSERT_TRUE(eager.ok()) << eager.status().toString();
  ASSERT_EQ(graph->size(), eager->size());
  EXPECT_EQ(std::memcmp(graph->data(), eager->data(), graph->size() * sizeof(float)), 0);
}

TEST_F(CudaEngineTiny, SmallPrefillProgramWithPaddedChunksMatchesOneChunk) {
  // 150 tokens through a 64-row program: chunks of 64, 64 and 22 (42 padding rows).
  const std::vector<int32_t> ids = ints("chunked.input_ids");
  Expected<std::vector<float>> whole = generate(*f32_, ids, 4);
  Expected<std::vector<float>> chunked = generate(*chunked_, ids, 4);
  ASSERT_TRUE(whole.ok()) << whole.status().toString();
  ASSERT_TRUE(chunked.ok()) << chunked.status().toString();
  ASSERT_EQ(whole->size(), chunked->size());
  const int64_t vocab = f32_->vocabSize();
  for (size_t r = 0; r < whole->size() / vocab; ++r) {
    ASSERT_LE(rowError(chunked->data() + r * vocab, whole->data() + r * vocab, vocab), 1e-5)
        << "row " << r;
  }
}

TEST_F(CudaEngineTiny, AResumedKeptStateContinuesAsAColdPrefillBitForBit) {
  // The kept-state path of issue 21 on the device: slots copied to and from the kept copy (token
  // counts through the host), the partly filled last page copied. A prompt resumed at a kept
  // length runs the same 64-row program with its rows at other offsets, which must not change a
  // bit: inside a chunk, on a chunk boundary and one short of the prompt.
  const std::vector<int32_t> ids = ints("chunked.input_ids");
  const std::vector<int64_t> kept = {37, 64, static_cast<int64_t>(ids.size()) - 1};
  const Status f32 = resumedEqualsCold(*chunked_, ids, runtime::LogitRows::All, kept);
  EXPECT_TRUE(f32.ok()) << "f32 all rows: " << f32.message();
  const Status bf16 = resumedEqualsCold(*servingBf16_, ids, runtime::LogitRows::Last, kept);
  EXPECT_TRUE(bf16.ok()) << "bf16 serving: " << bf16.message();
}

TEST_F(CudaEngineTiny, PrefillOfTheLastRowOnlyReturnsExactlyThatRow) {
  // 150 tokens through 64-row chunks: only the last chunk's last row comes back.
  const std::vector<int32_t> ids = ints("chunked.input_ids");
  const int64_t vocab = chunked_->vocabSize();
  for (runtime::LogitRows rows : {runtime::LogitRows::All, runtime::LogitRows::Last}) {
    Expected<int> slot = chunked_->newSequence();
    ASSERT_TRUE(slot.ok()) << slot.status().toString();
    Expected<std::vector<float>> logits = chunked_->prefill(*slot, ids, rows);
    ASSERT_TRUE(logits.ok()) << logits.status().toString();
    EXPECT_EQ(chunked_->length(*slot), static_cast<int64_t>(ids.size()));
    chunked_->endSequence(*slot);
    if (rows == runtime::LogitRows::All) {
      ASSERT_EQ(logits->size(), ids.size() * vocab);
      lastRow_.assign(logits->end() - vocab, logits->end());
    } else {
      ASSERT_EQ(logits->size(), static_cast<size_t>(vocab));
      EXPECT_EQ(std::memcmp(logits->data(), lastRow_.data(), vocab * sizeof(float)), 0);
    }
  }
}

TEST_F(CudaEngineTiny, RunsFromAThreadOtherThanTheOneThatCreatedIt) {
  // The server's scheduler drives the engine from its own thread; CUDA contexts are current per
  // thread, so every engine entry point makes its context current first.
  const std::vector<int32_t> ids = ints("short.input_ids");
  Expected<std::vector<float>> here = generate(*f32_, ids, 2);
  ASSERT_TRUE(here.ok()) << here.status().toString();
  Expected<std::vector<float>> there = Status(StatusCode::Internal, "not run");
  std::thread([&] { there = generate(*f32_, ids, 2); }).join();
  ASSERT_TRUE(there.ok()) << there.status().toString();
  ASSERT_EQ(here->size(), there->size());
  EXPECT_EQ(std::memcmp(here->data(), there->data(), here->size() * sizeof(float)), 0);
}

TEST_F(CudaEngineTiny, TwoSequencesInOneDecodeStepMatchEachAlone) {
  const std::vector<int32_t> a = ints("short.input_ids"), b = ints("long.input_ids");
  const int64_t vocab = f32_->vocabSize();
  Expected<std::vector<float>> aloneA = generate(*f32_, a, 1), aloneB = generate(*f32_, b, 1);
  ASSERT_TRUE(aloneA.ok() && aloneB.ok());
  int slots[2] = {*f32_->newSequence(), *f32_->newSequence()};
  Expected<std::vector<float>> pa = f32_->prefill(slots[0], a), pb = f32_->prefill(slots[1], b);
  ASSERT_TRUE(pa.ok() && pb.ok());
  const int32_t next[2] = {argmax(pa->data() + (a.size() - 1) * vocab, vocab),
                           argmax(pb->data() + (b.size() - 1) * vocab, vocab)};
  Expected<std::vector<float>> rows = f32_->decode(slots, next);
  ASSERT_TRUE(rows.ok()) << rows.status().toString();
  EXPECT_LE(rowError(rows->data(), aloneA->data() + a.size() * vocab, vocab), 1e-5);
  EXPECT_LE(rowError(rows->data() + vocab, aloneB->data() + b.size() * vocab, vocab), 1e-5);
  f32_->endSequence(slots[0]);
  f32_->endSequence(slots[1]);
}

// How often bf16 can agree with f32 on this fixture is a property of the fixture: its random
// weights amplify rounding (HF's own bf16 logits are 12% from its f32 ones, golden.json). HF's bf16
// run agrees with HF's f32 run on the top-1 token of 1149 of the 1440 prefill positions of these
// cases (79.8%; on an H200, 2026-11-29, scripts/hf-bf16-agreement.py), with per-case median row
// errors of 0.028, 0.061, 0.061 and 0.081. A faithful bf16 plan lands there too; a wrong kernel
// lands far below. The bound allows two points of noise below HF's rate (which positions flip
// depends on where each implementation rounds).
constexpr double kHfBf16Agreement = 1149.0 / 1440.0;
constexpr double kHfBf16WorstMedianError = 0.081;

TEST_F(CudaEngineTiny, Bf16PlanAgreesWithTheF32PlanAsOftenAsHfsOwnBf16) {
  size_t agree = 0, total = 0;
  for (const char *name : {"short", "long", "chunked", "xlong"}) {
    const std::vector<int32_t> ids = ints(std::string(name) + ".input_ids");
    Expected<std::vector<float>> f32 = generate(*f32_, ids, 0);
    Expected<std::vector<float>> bf16 = generate(*bf16_, ids, 0);
    ASSERT_TRUE(f32.ok()) << f32.status().toString();
    ASSERT_TRUE(bf16.ok()) << bf16.status().toString();
    const int64_t vocab = f32_->vocabSize();
    std::vector<double> errors;
    size_t caseAgree = 0;
    for (size_t r = 0; r < ids.size(); ++r) {
      const bool same =
          argmax(f32->data() + r * vocab, vocab) == argmax(bf16->data() + r * vocab, vocab);
      caseAgree += same;
      errors.push_back(rowError(bf16->data() + r * vocab, f32->data() + r * vocab, vocab));
    }
    agree += caseAgree;
    total += ids.size();
    std::sort(errors.begin(), errors.end());
    const double median = errors[errors.size() / 2];
    std::printf("%s: top-1 agreement %zu of %zu, logits error median %.3g, p90 %.3g, max %.3g\n",
                name, caseAgree, ids.size(), median, errors[errors.size() * 9 / 10], errors.back());
    // bf16 rounding spreads error over every row; a wrong kernel puts rows far off.
    EXPECT_LE(median, 1.25 * kHfBf16WorstMedianError) << name;
  }
  const double rate = static_cast<double>(agree) / static_cast<double>(total);
  RecordProperty("bf16_top1_agreement", std::to_string(rate));
  EXPECT_GE(rate, kHfBf16Agreement - 0.02) << agree << " of " << total << " prefill positions";
}

TEST_F(CudaEngineTiny, FusedStepsGiveTheUnfusedPlansBits) {
  // mhcPostPreDecodeKernel computes each stream chunk with mhc_post's own arithmetic and mixes the
  // rounded values, the *NormDecodeKernels normalise x with rmsNormKernel's reduction, a fused
  // prefill step runs the separate kernels, and the shared down projection adds the routed experts'
  // sum to its rounded output as the add kernel does: a bf16 plan's logits, prefill and greedy
  // decode (which then feeds back the same tokens), are the unfused plan's to the bit.
  for (const char *name : {"short", "chunked"}) {
    const std::vector<int32_t> ids = ints(std::string(name) + ".input_ids");
    Expected<std::vector<float>> fused = generate(*bf16_, ids, 6);
    Expected<std::vector<float>> unfused = generate(*bf16Unfused_, ids, 6);
    ASSERT_TRUE(fused.ok()) << fused.status().toString();
    ASSERT_TRUE(unfused.ok()) << unfused.status().toString();
    ASSERT_EQ(fused->size(), unfused->size());
    EXPECT_EQ(std::memcmp(fused->data(), unfused->data(), fused->size() * sizeof(float)), 0)
        << name;
  }
}

TEST_F(CudaEngineTiny, SampledTokensEqualTheCpuBackendsForTheSameKeys) {
  // The engines sample on their own side (the plan's count_tokens and sample steps): for the same
  // keys the f32 plans pick the same tokens, every parameter applied, and report the same logprobs.
  // Two sequences decode together, one forked from the other's prompt, as n = 2 runs.
  const std::vector<int32_t> ids = ints("short.input_ids");
  std::vector<runtime::SamplingParams> mixes(4);
  mixes[0] = {.temperature = 1.0f, .topP = 0.9f, .seed = 11, .logprobs = 5};
  mixes[1] = {.temperature = 0.7f,
              .topK = 40,
              .presencePenalty = 0.8f,
              .frequencyPenalty = 0.4f,
              .repetitionPenalty = 1.2f,
              .seed = 12,
              .logitBias = {{7, 4.0f}, {100, -100.0f}},
              .logprobs = 3};
  mixes[2] = {.temperature = 0.0f, .repetitionPenalty = 1.5f, .logprobs = 20};
  mixes[3] = {.temperature = 1.2f, .minP = 0.05f, .seed = 14};
  mixes[3].allowedTokens.assign(static_cast<size_t>((cpu_->vocabSize() + 31) / 32), 0x5555AAAAu);
  auto run =
      [&](Engine &e, const runtime::SamplingParams &p,
          const runtime::SamplingParams &forked) -> Expected<std::vector<runtime::SampledToken>> {
    GLM_ASSIGN_OR_RETURN(int a, e.newSequence());
    const runtime::RowSampling rows[] = {{&p, static_cast<int64_t>(ids.size())},
                                         {&forked, static_cast<int64_t>(ids.size())}};
    GLM_ASSIGN_OR_RETURN(runtime::SampledToken first, e.prefillSample(a, ids, rows[0]));
    GLM_ASSIGN_OR_RETURN(int b, e.forkSequence(a));
    std::vector<runtime::SampledToken> out = {first};
    int32_t next[] = {first.id, first.id};
    for (int step = 0; step < 12; ++step) {
      const int slots[] = {a, b};
      GLM_ASSIGN_OR_RETURN(std::vector<runtime::SampledToken> t, e.decodeSample(slots, next, rows));
      next[0] = t[0].id;
      next[1] = t[1].id;
      out.insert(out.end(), t.begin(), t.end());
    }
    e.endSequence(a);
    e.endSequence(b);
    return out;
  };
  for (size_t m = 0; m < mixes.size(); ++m) {
    const runtime::SamplingParams &forked = mixes[(m + 1) % mixes.size()];
    Expected<std::vector<runtime::SampledToken>> cpu = run(*cpu_, mixes[m], forked);
    Expected<std::vector<runtime::SampledToken>> gpu = run(*f32_, mixes[m], forked);
    ASSERT_TRUE(cpu.ok()) << cpu.status().toString();
    ASSERT_TRUE(gpu.ok()) << gpu.status().toString();
    ASSERT_EQ(cpu->size(), gpu->size());
    for (size_t k = 0; k < cpu->size(); ++k) {
      const runtime::SampledToken &c = (*cpu)[k], &g = (*gpu)[k];
      EXPECT_EQ(g.id, c.id) << "mix " << m << " token " << k;
      // The f32 plans' logits differ between the backends by their kernels' sums (held to
      // kTolerance relative above); a logprob moves by as much, the token not.
      EXPECT_NEAR(g.logprob, c.logprob, kTolerance) << "mix " << m << " token " << k;
      ASSERT_EQ(g.top.size(), c.top.size()) << "mix " << m << " token " << k;
      for (size_t j = 0; j < c.top.size(); ++j) {
        EXPECT_EQ(g.top[j].id, c.top[j].id) << "mix " << m << " token " << k << " top " << j;
      }
    }
  }
}

TEST_F(CudaEngineTiny, ServingPlansComputeTheLastRowAloneWithTheSameLogits) {
  // 150 tokens through 64-row chunks (the last padded): the serving plan's one row of logits is
  // the every-row plan's last, up to the head's kernel for one row summing in another order; the
  // state it leaves is the same bits, so the next decode step is too. In bf16 the one row still
  // picks the f32 plan's token, as close as bf16 rows are to f32 ones above.
  const std::vector<int32_t> ids = ints("chunked.input_ids");
  const int64_t vocab = chunked_->vocabSize();
  auto prefillThenDecode =
      [&](Engine &e,
          runtime::LogitRows rows) -> Expected<std::pair<std::vector<float>, std::vector<float>>> {
    GLM_ASSIGN_OR_RETURN(int slot, e.newSequence());
    GLM_ASSIGN_OR_RETURN(std::vector<float> prefill, e.prefill(slot, ids, rows));
    const int32_t next = argmax(prefill.data() + prefill.size() - vocab, vocab);
    const int slots[] = {slot};
    GLM_ASSIGN_OR_RETURN(std::vector<float> decode, e.decode(slots, std::span(&next, 1)));
    e.endSequence(slot);
    return std::pair{std::move(prefill), std::move(decode)};
  };
  auto every = prefillThenDecode(*chunked_, runtime::LogitRows::All);
  auto last = prefillThenDecode(*servingF32_, runtime::LogitRows::Last);
  auto lastBf16 = prefillThenDecode(*servingBf16_, runtime::LogitRows::Last);
  ASSERT_TRUE(every.ok()) << every.status().toString();
  ASSERT_TRUE(last.ok()) << last.status().toString();
  ASSERT_TRUE(lastBf16.ok()) << lastBf16.status().toString();
  ASSERT_EQ(last->first.size(), static_cast<size_t>(vocab));
  const float *everyLast = every->first.data() + every->first.size() - vocab;
  EXPECT_LE(rowError(last->first.data(), everyLast, vocab), 1e-5);
  EXPECT_EQ(argmax(last->first.data(), vocab), argmax(everyLast, vocab));
  EXPECT_EQ(std::memcmp(last->second.data(), every->second.data(), vocab * sizeof(float)), 0);
  EXPECT_EQ(argmax(lastBf16->first.data(), vocab), argmax(everyLast, vocab));
  EXPECT_LE(rowError(lastBf16->first.data(), everyLast, vocab), 1.25 * kHfBf16WorstMedianError);
  // A serving plan never computed the other rows: asking for them is refused, not answered.
  Expected<int> slot = servingF32_->newSequence();
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(servingF32_->prefill(*slot, ids, runtime::LogitRows::All).status().code(),
            StatusCode::InvalidArgument);
  servingF32_->endSequence(*slot);
}

/// The tiny fixture with every linear layer quantized to EXL3 (K = 4, MCG: experts and attention
/// alike) and its dequantized twin: an EXL3 plan reconstructs the weights it reads bit for bit as
/// `glmc dequantize` does, so both give the same logits. The checkpoints are made by
/// scripts/gpu-bundle.sh under GLM_FIXTURES_DIR (with GLM_TEST_PLANS), or here with glmc.
class CudaEngineExl3 : public CudaEngineTiny {
protected:
  static void SetUpTestSuite() {
    CudaEngineTiny::SetUpTestSuite();
    if (!setUpError_.empty()) {
      return;
    }
    std::filesystem::path quantized = fixturesDir() / "glm53-tiny-exl3",
                          dense = fixturesDir() / "glm53-tiny-exl3-dense";
    if (std::getenv("GLM_TEST_PLANS") == nullptr) {
      const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                        ("cuda_engine_exl3_" + std::to_string(::getpid()));
      quantized = dir / "exl3";
      dense = dir / "dense";
      const std::string quantize = glmcPath() + " quantize " + tinyFixture().string() + " -o " +
                                   quantized.string() + " --bits 4 --codebook mcg";
      const std::string dequantize =
          glmcPath() + " dequantize " + quantized.string() + " -o " + dense.string();
      if (std::system(quantize.c_str()) != 0 || std::system(dequantize.c_str()) != 0) {
        setUpError_ = "could not make the EXL3 checkpoints with " + glmcPath();
        return;
      }
    }
    for (auto [checkpoint, path] :
         {std::pair{&exl3Checkpoint_, quantized}, {&denseCheckpoint_, dense}}) {
      Expected<std::unique_ptr<Checkpoint>> c = Checkpoint::open(path);
      if (!c.ok()) {
        setUpError_ += c.status().toString() + "\n";
        return;
      }
      *checkpoint = std::move(c).value().release();
    }
    const std::string arch = gpu()->info().arch;
    auto open = [&](const std::string &name, const std::string &precision,
                    const std::filesystem::path &model, Checkpoint *checkpoint) -> Engine * {
      Expected<std::unique_ptr<PlanFile>> plan =
          compileTiny(name,
                      "--target " + arch + " --precision " + precision +
                          " --dense bf16 --head bf16 --decode 1x1,2x1 --prefill 1152 "
                          "--prefill-logits all",
                      model);
      if (!plan.ok()) {
        setUpError_ += plan.status().toString() + "\n";
        return nullptr;
      }
      Expected<std::unique_ptr<cuda::CudaEngine>> engine =
          cuda::CudaEngine::create(std::move(plan).value(), *checkpoint);
      if (!engine.ok()) {
        setUpError_ += engine.status().toString() + "\n";
        return nullptr;
      }
      return std::move(engine).value().release();
    };
    exl3F32_ = open("exl3_f32", "f32", quantized, exl3Checkpoint_);
    denseF32_ = open("exl3_dense_f32", "f32", dense, denseCheckpoint_);
    exl3Bf16_ = open("exl3_bf16", "bf16", quantized, exl3Checkpoint_);
    denseBf16_ = open("exl3_dense_bf16", "bf16", dense, denseCheckpoint_);
  }
  static void TearDownTestSuite() {
    for (Engine *e : {exl3F32_, denseF32_, exl3Bf16_, denseBf16_}) {
      delete e;
    }
    delete exl3Checkpoint_;
    delete denseCheckpoint_;
    CudaEngineTiny::TearDownTestSuite();
  }

  static inline Checkpoint *exl3Checkpoint_ = nullptr, *denseCheckpoint_ = nullptr;
  static inline Engine *exl3F32_ = nullptr, *denseF32_ = nullptr, *exl3Bf16_ = nullptr,
                       *denseBf16_ = nullptr;
};

TEST_F(CudaEngineExl3, F32PlanGivesTheLogitsOfTheDequantizedCheckpoint) {
  // Prefill (decode programs for few rows, the grouped ones for many) and greedy decode steps.
  for (const char *name : {"short", "long"}) {
    const std::vector<int32_t> ids = ints(std::string(name) + ".input_ids");
    Expected<std::vector<float>> exl3 = generate(*exl3F32_, ids, 6);
    Expected<std::vector<float>> dense = generate(*denseF32_, ids, 6);
    ASSERT_TRUE(exl3.ok()) << exl3.status().toString();
    ASSERT_TRUE(dense.ok()) << dense.status().toString();
    ASSERT_EQ(exl3->size(), dense->size());
    const int64_t vocab = denseF32_->vocabSize();
    double worst = 0;
    for (size_t r = 0; r < dense->size() / vocab; ++r) {
      worst = std::max(worst, rowError(exl3->data() + r * vocab, dense->data() + r * vocab, vocab));
      EXPECT_EQ(argmax(exl3->data() + r * vocab, vocab), argmax(dense->data() + r * vocab, vocab))
          << name << " row " << r;
    }
    EXPECT_LE(worst, 1e-5) << name;
    std::printf("%s: EXL3 against dequantized, worst row error %.3g\n", name, worst);
  }
}

/// Prefill of `ids`, then decode steps feeding `tokens` (the same ones to every engine); the
/// decode rows' logits.
Expected<std::vector<float>> decodeRows(Engine &engine, const std::vector<int32_t> &ids,
                                        const std::vector<int32_t> &tokens) {
  GLM_ASSIGN_OR_RETURN(int slot, engine.newSequence());
  GLM_RETURN_IF_ERROR(engine.prefill(slot, ids, runtime::LogitRows::Last).status());
  std::vector<float> logits;
  for (int32_t token : tokens) {
    const int slots[] = {slot};
    GLM_ASSIGN_OR_RETURN(std::vector<float> row, engine.decode(slots, std::span(&token, 1)));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  engine.endSequence(slot);
  return logits;
}

TEST_F(CudaEngineExl3, Bf16DecodeStaysCloserToTheDequantizedPlanThanBf16IsToF32) {
  // bf16 decode steps run the fused kernels of kernels/exl3_moe (fp16 operands, rotations on the
  // activations) where the dequantized plan multiplies bf16 weights: a different rounding, whose
  // operands (fp16, 2^-11) are finer than bf16's (2^-8). So the EXL3 plan's decode rows must be
  // nearer the dequantized bf16 plan's than that plan's rows are to its own f32 plan's.
  const std::vector<int32_t> ids = ints("long.input_ids");
  const std::vector<int32_t> tokens = ints("long.greedy_tokens");
  Expected<std::vector<float>> exl3 = decodeRows(*exl3Bf16_, ids, tokens);
  Expected<std::vector<float>> dense = decodeRows(*denseBf16_, ids, tokens);
  Expected<std::vector<float>> f32 = decodeRows(*denseF32_, ids, tokens);
  ASSERT_TRUE(exl3.ok()) << exl3.status().toString();
  ASSERT_TRUE(dense.ok()) << dense.status().toString();
  ASSERT_TRUE(f32.ok()) << f32.status().toString();
  const int64_t vocab = denseF32_->vocabSize();
  std::vector<double> fused, rounding;
  for (size_t r = 0; r < tokens.size(); ++r) {
    fused.push_back(rowError(exl3->data() + r * vocab, dense->data() + r * vocab, vocab));
    rounding.push_back(rowError(dense->data() + r * vocab, f32->data() + r * vocab, vocab));
  }
  std::sort(fused.begin(), fused.end());
  std::sort(rounding.begin(), rounding.end());
  const double fusedMedian = fused[fused.size() / 2],
               roundingMedian = rounding[rounding.size() / 2];
  std::printf("decode rows: EXL3 bf16 vs dequantized bf16 median %.3g max %.3g; dequantized bf16 "
              "vs f32 median %.3g max %.3g\n",
              fusedMedian, fused.back(), roundingMedian, rounding.back());
  EXPECT_GT(fusedMedian, 0.0) << "the decode steps did not take the fused kernels";
  EXPECT_LE(fusedMedian, roundingMedian);
}

/// Plans that quantize the dense linears at load (--dense q4 --head fp8, the deployment's formats)
/// and a checkpoint whose dense linears are FP8 as stored: the GPU's quantized kernels against
/// the CPU reference, which reads the same bytes.
class CudaEngineQuantized : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string why;
    if (gpu(&why) == nullptr) {
      setUpError_ = why;
      return;
    }
    const std::string arch = gpu()->info().arch;
    fp8Model_ = fixturesDir() / "glm53-tiny-fp8";
    if (!std::filesystem::exists(fp8Model_)) {
      // Outside the GPU bundle: written here, as scripts/gpu-bundle.sh writes it.
      fp8Model_ = std::filesystem::temp_directory_path() /
                  ("cuda_engine_fp8_" + std::to_string(::getpid()));
      const std::string synth =
          glmcPath() + " synth --preset tiny --dense fp8 -o " + fp8Model_.string() + " 2>/dev/null";
      if (std::system(synth.c_str()) != 0) {
        setUpError_ = "could not write the FP8 checkpoint with " + glmcPath();
        return;
      }
      ownFp8Model_ = true;
    }
    for (auto [checkpoint, path] :
         {std::pair{&checkpoint_, tinyFixture()}, {&fp8Checkpoint_, fp8Model_}}) {
      Expected<std::unique_ptr<Checkpoint>> c = Checkpoint::open(path);
      if (!c.ok()) {
        setUpError_ += c.status().toString() + "\n";
        return;
      }
      *checkpoint = std::move(c).value().release();
    }
    const std::string programs = " --decode 1x1,2x1 --prefill 1152 --prefill-logits all";
    const std::string q4 = " --dense q4 --head fp8";
    auto open = [&](const std::string &name, const std::string &options, Checkpoint *checkpoint,
                    const std::filesystem::path &model) -> Engine * {
      Expected<std::unique_ptr<PlanFile>> plan = compileTiny(name, options + programs, model);
      if (!plan.ok()) {
        setUpError_ += plan.status().toString() + "\n";
        return nullptr;
      }
      // Each backend's engine, held as the interface the comparisons take.
      auto asEngine = [](auto made) -> Expected<std::unique_ptr<Engine>> {
        if (!made.ok()) {
          return made.status();
        }
        return std::unique_ptr<Engine>(std::move(made).value());
      };
      Expected<std::unique_ptr<Engine>> engine =
          options.find("--target cpu") != std::string::npos
              ? asEngine(CpuEngine::create(std::move(plan).value(), *checkpoint))
              : asEngine(cuda::CudaEngine::create(std::move(plan).value(), *checkpoint));
      if (!engine.ok()) {
        setUpError_ += engine.status().toString() + "\n";
        return nullptr;
      }
      return std::move(engine).value().release();
    };
    cpuQ4_ = open("cpu_f32_q4", "--target cpu --precision f32" + q4, checkpoint_, {});
    f32Q4_ = open("gpu_f32_q4", "--target " + arch + " --precision f32" + q4, checkpoint_, {});
    bf16Q4_ = open("gpu_bf16_q4", "--target " + arch + " --precision bf16" + q4, checkpoint_, {});
    cpuFp8_ = open("cpu_f32_fp8ck", "--target cpu --precision f32", fp8Checkpoint_, fp8Model_);
    f32Fp8_ =
        open("gpu_f32_fp8ck", "--target " + arch + " --precision f32", fp8Checkpoint_, fp8Model_);
    golden_ =
        std::move(SafeTensorsFile::open(tinyFixture() / "golden.safetensors")).value().release();
  }
  static void TearDownTestSuite() {
    for (Engine *e : {cpuQ4_, f32Q4_, bf16Q4_, cpuFp8_, f32Fp8_}) {
      delete e;
    }
    delete golden_;
    delete checkpoint_;
    delete fp8Checkpoint_;
    if (ownFp8Model_) {
      std::filesystem::remove_all(fp8Model_);
    }
  }
  void SetUp() override { ASSERT_TRUE(setUpError_.empty()) << setUpError_; }

  static std::vector<int32_t> ints(const std::string &name) {
    const TensorView &t = *golden_->find(name);
    std::vector<int32_t> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.data, v.size() * 4);
    return v;
  }

  /// Every row of `got` within f32 summation-order distance of `want` (the bound the f32 GPU plan
  /// meets against the CPU backend), with the same argmax.
  static void expectF32Equal(Engine &got, Engine &want, const std::string &what) {
    for (const char *name : {"short", "long"}) {
      const std::vector<int32_t> ids = ints(std::string(name) + ".input_ids");
      const size_t steps = ints(std::string(name) + ".greedy_tokens").size();
      Expected<GreedyRun> a = greedyRun(got, ids, steps);
      Expected<GreedyRun> b = greedyRun(want, ids, steps);
      ASSERT_TRUE(a.ok()) << a.status().toString();
      ASSERT_TRUE(b.ok()) << b.status().toString();
      ASSERT_EQ(a->logits.size(), b->logits.size());
      const int64_t vocab = want.vocabSize();
      double worst = 0;
      for (size_t r = 0; r < b->logits.size() / vocab; ++r) {
        worst = std::max(
            worst, rowError(a->logits.data() + r * vocab, b->logits.data() + r * vocab, vocab));
        EXPECT_EQ(argmax(a->logits.data() + r * vocab, vocab),
                  argmax(b->logits.data() + r * vocab, vocab))
            << what << " " << name << " row " << r;
      }
      std::printf("%s %s: worst row error %.3g\n", what.c_str(), name, worst);
      EXPECT_LE(worst, 1e-4) << what << " " << name;
    }
  }

  static inline std::string setUpError_;
  static inline Checkpoint *checkpoint_ = nullptr, *fp8Checkpoint_ = nullptr;
  static inline Engine *cpuQ4_ = nullptr, *f32Q4_ = nullptr, *bf16Q4_ = nullptr, *cpuFp8_ = nullptr,
                       *f32Fp8_ = nullptr;
  static inline SafeTensorsFile *golden_ = nullptr;
  static inline std::filesystem::path fp8Model_;
  static inline bool ownFp8Model_ = false;
};

TEST_F(CudaEngineQuantized, Q4PlanMatchesTheCpuBackendOnTheSameBytes) {
  expectF32Equal(*f32Q4_, *cpuQ4_, "q4/fp8 f32 plan");
}

TEST_F(CudaEngineQuantized, Fp8CheckpointMatchesTheCpuBackend) {
  expectF32Equal(*f32Fp8_, *cpuFp8_, "FP8 checkpoint f32 plan");
}

TEST_F(CudaEngineQuantized, Bf16Q4PlanIsAsCloseToItsF32PlanAsBf16RoundingAllows) {
  // The bf16 and f32 quantized plans read the same weight bytes: what separates them is bf16
  // activations, held to the bound the unquantized bf16 plan meets (HF's own bf16 spread).
  size_t agree = 0, total = 0;
  for (const char *name : {"short", "long", "chunked", "xlong"}) {
    const std::vector<int32_t> ids = ints(std::string(name) + ".input_ids");
    Expected<GreedyRun> f32 = greedyRun(*f32Q4_, ids, 0);
    Expected<GreedyRun> bf16 = greedyRun(*bf16Q4_, ids, 0);
    ASSERT_TRUE(f32.ok()) << f32.status().toString();
    ASSERT_TRUE(bf16.ok()) << bf16.status().toString();
    const int64_t vocab = f32Q4_->vocabSize();
    std::vector<double> errors;
    for (size_t r = 0; r < ids.size(); ++r) {
      agree += argmax(f32->logits.data() + r * vocab, vocab) ==
               argmax(bf16->logits.data() + r * vocab, vocab);
      errors.push_back(
          rowError(bf16->logits.data() + r * vocab, f32->logits.data() + r * vocab, vocab));
    }
    total += ids.size();
    std::sort(errors.begin(), errors.end());
    std::printf("%s: bf16 vs f32 q4 plan, logits error median %.3g, max %.3g\n", name,
                errors[errors.size() / 2], errors.back());
    EXPECT_LE(errors[errors.size() / 2], 1.25 * kHfBf16WorstMedianError) << name;
  }
  EXPECT_GE(static_cast<double>(agree) / static_cast<double>(total), kHfBf16Agreement - 0.02);
}

} // namespace
} // namespace glm::testing