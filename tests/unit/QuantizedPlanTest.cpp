// Plans that hold dense linears quantized at load (glmc compile --dense / --head): what the loader
// writes (the quantizer's bytes of each rank's slice), FP8 checkpoints as stored, the refusals of
// corrupt ones, the load-time ablation, and what quantization costs the tiny fixture's logits.
#include "kernels/common/FloatFormats.h"
#include "kernels/quantize/quantize.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/weights/PlanWeights.h"
#include "runtime/weights/SafeTensorsWriter.h"

#include "tests/unit/support/Compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <unistd.h>

namespace glm {
namespace {

const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

std::filesystem::path tempPath(const std::string &name) {
  return std::filesystem::temp_directory_path() /
         ("quantized_plan_test_" + std::to_string(::getpid()) + "_" + name);
}

/// A CPU f32 plan of `model` with `options` (glmc compile's).
std::unique_ptr<runtime::PlanFile> compile(const std::filesystem::path &model,
                                           const std::string &options) {
  const std::filesystem::path out = tempPath("plan.glmp");
  const std::string command = std::string(GLM_GLMC_PATH) + " compile " + model.string() + " -o " +
                              out.string() +
                              " --target cpu --precision f32 --max-seqs 2 --max-context 2048 "
                              "--decode 1x1 --prefill 256 --prefill-logits all " +
                              options + " 2>/dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(out);
  std::filesystem::remove(out);
  EXPECT_TRUE(plan.ok()) << plan.status().toString();
  return plan.ok() ? std::move(plan).value() : nullptr;
}

const plan::WeightBinding *binding(const plan::Plan &p, const std::string &name) {
  for (const plan::WeightBinding *w : *p.weights()) {
    if (w->name()->str() == name) {
      return w;
    }
  }
  ADD_FAILURE() << "no binding " << name;
  return nullptr;
}

std::vector<uint8_t> load(const runtime::PlanFile &plan, const Checkpoint &ck, uint32_t rank,
                          const WeightLoadOptions &options = {}, QuantizeReport *report = nullptr) {
  std::vector<uint8_t> arena(plan.root().arenas()->Get(0)->size());
  const Status s = loadPlanWeights(plan.root(), ck, rank, arena, options, report);
  EXPECT_TRUE(s.ok()) << s.toString();
  return arena;
}

/// Columns [c0, c0 + n) of a row-major bf16 [rows, cols] tensor, as a bf16 buffer.
std::vector<uint16_t> columns(const TensorView &t, int64_t c0, int64_t n) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<uint16_t> out(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data() + r * n, t.data + 2 * (r * cols + c0), static_cast<size_t>(2 * n));
  }
  return out;
}

std::vector<uint8_t> quantized(const void *bf16, int64_t rows, int64_t cols, bool q4) {
  std::vector<uint8_t> out(
      static_cast<size_t>(q4 ? kernels::q4Bytes(1, rows, cols) : kernels::fp8Bytes(1, rows, cols)));
  const kernels::WeightView src = kernels::WeightView::raw(bf16, DType::BF16, {rows, cols});
  const Status s =
      q4 ? kernels::quantizeQ4(src, out.data()) : kernels::quantizeFp8Blocks(src, out.data());
  EXPECT_TRUE(s.ok()) << s.toString();
  return out;
}

class QuantizedPlan : public ::testing::Test {
protected:
  static void SetUpTestSuite() { checkpoint_ = std::move(Checkpoint::open(kTiny)).value(); }
  static void TearDownTestSuite() { checkpoint_.reset(); }
  static inline std::unique_ptr<Checkpoint> checkpoint_;
};

TEST_F(QuantizedPlan, EachRankHoldsTheQuantizerOutputOfItsSlice) {
  auto tp1 = compile(kTiny, "--tp 1 --dense q4 --head fp8");
  auto tp2 = compile(kTiny, "--tp 2 --dense q4 --head fp8");
  ASSERT_TRUE(tp1 && tp2);
  const TensorView &q = *checkpoint_->find("model.language_model.layers.0.self_attn.q_proj.weight");
  const TensorView &o = *checkpoint_->find("model.language_model.layers.0.self_attn.o_proj.weight");
  const TensorView &head = *checkpoint_->find("lm_head.weight");

  QuantizeReport report;
  const std::vector<uint8_t> whole = load(*tp1, *checkpoint_, 0, {}, &report);
  const plan::WeightBinding *q1 = binding(tp1->root(), "blk.0.attn.q_proj");
  const plan::WeightBinding *h1 = binding(tp1->root(), "head.lm_head");
  ASSERT_EQ(q1->encoding(), plan::DenseEncoding::Q4);
  ASSERT_EQ(h1->encoding(), plan::DenseEncoding::Fp8);
  const std::vector<uint8_t> qWant = quantized(q.data, 128, 128, true);
  EXPECT_EQ(std::memcmp(whole.data() + q1->slice()->offset(), qWant.data(), qWant.size()), 0);
  const std::vector<uint8_t> hWant = quantized(head.data, head.shape[0], head.shape[1], false);
  EXPECT_EQ(std::memcmp(whole.data() + h1->slice()->offset(), hWant.data(), hWant.size()), 0);

  // Every Q4 and fp8 binding is counted once, with its bytes as held and its error.
  int64_t q4 = 0, fp8 = 0;
  uint64_t held = 0;
  for (const plan::WeightBinding *w : *tp1->root().weights()) {
    q4 += w->encoding() == plan::DenseEncoding::Q4;
    fp8 += w->encoding() == plan::DenseEncoding::Fp8;
    if (w->encoding() != plan::DenseEncoding::Plain) {
      const int64_t r = w->rank_shape()->Get(0), c = w->rank_shape()->Get(1);
      held += static_cast<uint64_t>(w->encoding() == plan::DenseEncoding::Q4
                                        ? kernels::q4Bytes(1, r, c)
                                        : kernels::fp8Bytes(1, r, c));
    }
  }
  EXPECT_GT(q4, 50);
  // fp8: the head, and the routers (their kernels read fp8 blocks but not Q4).
  const plan::WeightBinding *router = binding(tp1->root(), "blk.3.ffn.router");
  ASSERT_EQ(router->encoding(), plan::DenseEncoding::Fp8);
  EXPECT_GT(fp8, 1);
  EXPECT_EQ(report.q4, q4);
  EXPECT_EQ(report.fp8, fp8);
  EXPECT_EQ(report.bytesAfter, held);
  EXPECT_GT(report.bytesBefore, 3 * report.bytesAfter); // bf16 to ~4.5 bits
  EXPECT_GT(report.worstError, 0.0);
  EXPECT_LT(report.worstError, 0.2);
  EXPECT_NE(report.line().find(strCat("quantized ", q4 + fp8, " linears")), std::string::npos)
      << report.line();

  // TP 2: q_proj is split by rows (rank r holds rows [64 r, 64 r + 64)), o_proj by columns
  // (rank r holds columns [64 r, 64 r + 64): one 64-feature group per row).
  for (uint32_t rank = 0; rank < 2; ++rank) {
    const std::vector<uint8_t> arena = load(*tp2, *checkpoint_, rank);
    const plan::WeightBinding *q2 = binding(tp2->root(), "blk.0.attn.q_proj");
    const std::vector<uint8_t> qRank = quantized(q.data + rank * 64 * 128 * 2, 64, 128, true);
    EXPECT_EQ(std::memcmp(arena.data() + q2->slice()->offset(), qRank.data(), qRank.size()), 0)
        << "rank " << rank;
    const plan::WeightBinding *o2 = binding(tp2->root(), "blk.0.attn.o_proj");
    ASSERT_EQ(o2->encoding(), plan::DenseEncoding::Q4);
    const std::vector<uint16_t> part = columns(o, 64 * rank, 64);
    const std::vector<uint8_t> oRank = quantized(part.data(), 128, 64, true);
    EXPECT_EQ(std::memcmp(arena.data() + o2->slice()->offset(), oRank.data(), oRank.size()), 0)
        << "rank " << rank;
  }
}

/// A tiny checkpoint with its dense linears in FP8, as `glmc synth --dense fp8` writes it: two
/// layers (KDA, dense MLPs), whose rank slices at TP 2 fall on or inside 128 x 128 blocks.
class Fp8Checkpoint : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = tempPath("fp8");
    const std::string command = std::string(GLM_GLMC_PATH) +
                                " synth --preset tiny --layers 2 --dense fp8 -o " + dir_.string() +
                                " 2>/dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  /// A copy of the checkpoint's tensors with `edit` applied to each spec (return false to drop).
  static std::filesystem::path rewritten(const std::string &name,
                                         const std::function<bool(TensorSpec &)> &edit) {
    const std::filesystem::path out = tempPath(name);
    std::filesystem::create_directories(out);
    std::filesystem::copy_file(dir_ / "config.json", out / "config.json");
    std::unique_ptr<Checkpoint> ck = std::move(Checkpoint::open(dir_)).value();
    std::vector<TensorSpec> specs;
    for (const TensorView *t : ck->tensors()) {
      TensorSpec spec;
      spec.name = t->name;
      spec.dtype = t->dtype;
      spec.shape = t->shape;
      const std::vector<uint8_t> bytes(t->data, t->data + t->byteSize);
      spec.fill = [bytes](std::span<uint8_t> dst) {
        std::memcpy(dst.data(), bytes.data(), std::min(dst.size(), bytes.size()));
      };
      if (edit(spec)) {
        specs.push_back(std::move(spec));
      }
    }
    EXPECT_TRUE(writeSafeTensors(out / "model.safetensors", specs).ok());
    return out;
  }

  static inline std::filesystem::path dir_;
};

TEST_F(Fp8Checkpoint, LoadsAsStoredAndRunsOnTheCpu) {
  std::unique_ptr<Checkpoint> ck = std::move(Checkpoint::open(dir_)).value();
  // Without the MTP head: its attention's 192 output features would cut a 128 x 128 fp8 block
  // between the two ranks (the trunk's two layers here are KDA and dense).
  auto plan = compile(dir_, "--tp 2 --mtp off");
  ASSERT_TRUE(plan);
  // q_proj is fp8 as stored: rank 1 holds rows [64, 128), one block row, and its block scales.
  const plan::WeightBinding *q = binding(plan->root(), "blk.0.attn.q_proj");
  ASSERT_EQ(q->format(), plan::WeightFormat::FP8);
  ASSERT_EQ(q->encoding(), plan::DenseEncoding::Fp8);
  const TensorView &values = *ck->find("model.language_model.layers.0.self_attn.q_proj.weight");
  const TensorView &scales =
      *ck->find("model.language_model.layers.0.self_attn.q_proj.weight_scale_inv");
  ASSERT_EQ(values.dtype, DType::F8_E4M3);
  const std::vector<uint8_t> arena = load(*plan, *ck, 1);
  const uint8_t *slice = arena.data() + q->slice()->offset();
  EXPECT_EQ(std::memcmp(slice, values.data + 64 * 128, 64 * 128), 0);
  EXPECT_EQ(std::memcmp(slice + kernels::fp8ScalesOffset(1, 64, 128), scales.data, 4), 0);

  // The CPU engine runs the plan (at TP 1) and reads the fp8 values times their scales.
  auto tp1 = compile(dir_, "--tp 1");
  ASSERT_TRUE(tp1);
  Expected<std::unique_ptr<runtime::CpuEngine>> engine =
      runtime::CpuEngine::create(std::move(tp1), *ck);
  ASSERT_TRUE(engine.ok()) << engine.status().toString();
  Expected<int> slot = (*engine)->newSequence();
  ASSERT_TRUE(slot.ok());
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  Expected<std::vector<float>> logits = (*engine)->prefill(*slot, ids);
  ASSERT_TRUE(logits.ok()) << logits.status().toString();
  EXPECT_TRUE(
      std::all_of(logits->begin(), logits->end(), [](float v) { return std::isfinite(v); }));
}

TEST_F(Fp8Checkpoint, MissingOrMisshapenScalesAreRefusedByName) {
  auto plan = compile(dir_, "--tp 1");
  ASSERT_TRUE(plan);
  const std::string scale = "model.language_model.layers.0.self_attn.k_proj.weight_scale_inv";
  const std::filesystem::path missing =
      rewritten("missing", [&](TensorSpec &t) { return t.name != scale; });
  const std::filesystem::path misshapen = rewritten("misshapen", [&](TensorSpec &t) {
    if (t.name == scale) {
      t.shape = {1, 2};
    }
    return true;
  });
  for (const auto &[dir, words] : {std::pair{missing, "has no"}, std::pair{misshapen, "[1, 2]"}}) {
    std::unique_ptr<Checkpoint> ck = std::move(Checkpoint::open(dir)).value();
    std::vector<uint8_t> arena(plan->root().arenas()->Get(0)->size());
    const Status s = loadPlanWeights(plan->root(), *ck, 0, arena);
    std::filesystem::remove_all(dir);
    ASSERT_FALSE(s.ok()) << dir;
    EXPECT_NE(s.message().find(scale), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  }
}

TEST_F(QuantizedPlan, AblationProjectsTheDirectionOutOfTheChosenLayers) {
  auto plan = compile(kTiny, "--tp 1");
  ASSERT_TRUE(plan);
  Ablation ablation;
  ablation.direction.resize(128);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (float &v : ablation.direction) {
    v = normal(rng);
  }
  ablation.firstLayer = 2;
  ablation.lastLayer = 5;
  ablation.alpha = 1.0;
  QuantizeReport report;
  const std::vector<uint8_t> plain = load(*plan, *checkpoint_, 0);
  const std::vector<uint8_t> ablated =
      load(*plan, *checkpoint_, 0, {.ablation = &ablation}, &report);
  EXPECT_EQ(report.ablated, 4);
  double norm = 0;
  for (float v : ablation.direction) {
    norm += double(v) * v;
  }
  for (int layer = 0; layer < 8; ++layer) {
    const plan::WeightBinding *o = binding(plan->root(), strCat("blk.", layer, ".attn.o_proj"));
    const size_t at = o->slice()->offset(), bytes = o->slice()->size();
    const bool chosen = layer >= 2 && layer <= 5;
    EXPECT_EQ(std::memcmp(plain.data() + at, ablated.data() + at, bytes) == 0, !chosen)
        << "layer " << layer;
    // dᵀW' is zero up to bf16 rounding of W' in every column; dᵀW is not.
    const auto *w = reinterpret_cast<const uint16_t *>(ablated.data() + at);
    const auto *w0 = reinterpret_cast<const uint16_t *>(plain.data() + at);
    double worst = 0, before = 0;
    for (int64_t c = 0; c < 128; ++c) {
      double dot = 0, dot0 = 0, scale = 0;
      for (int64_t r = 0; r < 128; ++r) {
        const double d = ablation.direction[r] / std::sqrt(norm);
        dot += d * kernels::bf16ToFloat(w[r * 128 + c]);
        dot0 += d * kernels::bf16ToFloat(w0[r * 128 + c]);
        scale += std::fabs(kernels::bf16ToFloat(w0[r * 128 + c]));
      }
      worst = std::max(worst, std::fabs(dot) / scale);
      before = std::max(before, std::fabs(dot0) / scale);
    }
    if (chosen) {
      EXPECT_LT(worst, 1e-2) << "layer " << layer;
      EXPECT_GT(before, 5 * worst) << "layer " << layer;
    }
  }
}

TEST_F(QuantizedPlan, AnAblationOfALayerThePlanLacksIsRefused) {
  // The plans hold no MTP layer yet: --ablate-mtp's projection is not there to change.
  auto plan = compile(kTiny, "--tp 1");
  ASSERT_TRUE(plan);
  Ablation ablation;
  ablation.direction.assign(128, 1.0f);
  ablation.firstLayer = 7;
  ablation.lastLayer = 7;
  ablation.mtpLayer = 8;
  std::vector<uint8_t> arena(plan->root().arenas()->Get(0)->size());
  RankWeightLoad load(plan->root(), *checkpoint_, 0, {.ablation = &ablation});
  ASSERT_TRUE(load.window(0, arena).ok());
  const Status s = load.finish();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("holds 1 of the 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("MTP layer 8"), std::string::npos) << s.message();
  ablation.mtpLayer = -1;
  RankWeightLoad trunk(plan->root(), *checkpoint_, 0, {.ablation = &ablation});
  ASSERT_TRUE(trunk.window(0, arena).ok());
  EXPECT_TRUE(trunk.finish().ok());
}

TEST_F(QuantizedPlan, TheTinyFixturesLogitsStayCloseToTheUnquantizedPlans) {
  // What quantization costs, on the fixture's golden prompts through the CPU backend: top-1
  // agreement and the relative L2 error of every prefill row's logits against the plan that
  // holds the weights as stored. docs/quantization.md records the figures.
  std::unique_ptr<SafeTensorsFile> golden =
      std::move(SafeTensorsFile::open(kTiny / "golden.safetensors")).value();
  std::vector<int32_t> ids;
  for (const char *name : {"short.input_ids", "long.input_ids"}) {
    const TensorView &t = *golden->find(name);
    const auto *p = reinterpret_cast<const int32_t *>(t.data);
    ids.insert(ids.end(), p, p + t.numel());
  }
  ids.resize(std::min<size_t>(ids.size(), 256));
  auto run = [&](const std::string &options) {
    Expected<std::unique_ptr<runtime::CpuEngine>> engine =
        runtime::CpuEngine::create(compile(kTiny, "--tp 1 " + options), *checkpoint_);
    EXPECT_TRUE(engine.ok()) << engine.status().toString();
    int slot = std::move((*engine)->newSequence()).value();
    return std::move((*engine)->prefill(slot, ids)).value();
  };
  const std::vector<float> reference = run("");
  const int64_t vocab = static_cast<int64_t>(reference.size() / ids.size());
  // The fixture's random weights amplify any rounding: HF's own bf16 run differs from its f32 run
  // by a median 8% relative L2 with 80% top-1 agreement (fixtures/glm53-tiny/README.md). So the
  // bounds below are the measured figures with a margin, and the check that matters is the order:
  // fp8 (about 2.5% weight error) must cost less than q4 (about 8%), and both something.
  // The head alone (the last op: nothing amplifies its error) shows each format's own cost.
  double previous = 0.0;
  for (const auto &[options, minAgreement, maxMedianError] :
       {std::tuple{"--head fp8", 0.9, 0.05}, std::tuple{"--head q4", 0.8, 0.15},
        std::tuple{"--dense fp8 --head fp8", 0.45, 0.40},
        std::tuple{"--dense q4 --head q4", 0.22, 0.70}}) {
    const std::vector<float> got = run(options);
    ASSERT_EQ(got.size(), reference.size());
    size_t agree = 0;
    std::vector<double> errors;
    for (size_t r = 0; r < ids.size(); ++r) {
      const float *a = got.data() + r * vocab, *b = reference.data() + r * vocab;
      agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
      errors.push_back(glm::testing::relativeL2(a, b, vocab));
    }
    std::sort(errors.begin(), errors.end());
    const double agreement = static_cast<double>(agree) / static_cast<double>(ids.size());
    const double median = errors[errors.size() / 2];
    std::printf("%s: top-1 agreement %.3f over %zu rows, logits relative L2 median %.4f, p90 %.4f, "
                "max %.4f\n",
                options, agreement, ids.size(), median, errors[errors.size() * 9 / 10],
                errors.back());
    EXPECT_GE(agreement, minAgreement) << options;
    EXPECT_LE(median, maxMedianError) << options;
    EXPECT_GT(median, previous) << options << ": no more error than the finer format";
    previous = median;
  }
}

} // namespace
} // namespace glm
