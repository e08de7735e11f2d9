// moe_router's CUDA kernels against the CPU reference: GLM-5.3-Flash's router (288 experts, top 8,
// hidden 4096), the tiny model's (16 experts, top 4, hidden 128), DeepSeek-style group limits and
// odd widths, in f32 and bf16, each with both scores kernels (each must be right for any tokens).
#include "kernels/moe_router/moe_router.h"
#include "kernels/moe_router/moe_router_gpu.h"
#include "kernels/quantize/quantize.h"
#include "tests/gpu/support/GpuTest.h"

#include <cstring>

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/moe_router/moe_router.cuh")";

struct Shape {
  int64_t tokens, hidden, experts, topK, nGroup, topkGroup;
};
// Flash at decode (1, 4) and prefill (300, 2048) rows; the tiny model; a group-limited router
// (8 groups of 8, 4 kept) and a ragged width (no 16-byte loads).
const Shape kShapes[] = {{1, 4096, 288, 8, 1, 1},   {4, 4096, 288, 8, 1, 1},
                         {300, 4096, 288, 8, 1, 1}, {2048, 4096, 288, 8, 1, 1},
                         {3, 128, 16, 4, 1, 1},     {64, 128, 16, 4, 1, 1},
                         {37, 256, 64, 6, 8, 4},    {5, 100, 24, 3, 4, 2}};

struct Problem {
  std::vector<float> x, weight, bias;
  // The reference's outputs.
  std::vector<int32_t> ids;
  std::vector<float> weights, scores;
};

/// A run's outputs on the device, read back.
struct Result {
  std::vector<int32_t> ids;
  std::vector<float> weights, scores;
};

/// The reference's outputs for p's inputs (its bias applied when `withBias`), into p: after
/// makeProblem draws them, and again where a test changes them.
Status computeReference(Problem &p, const Shape &s, bool norm, bool withBias) {
  p.ids.resize(s.tokens * s.topK);
  p.weights.resize(s.tokens * s.topK);
  p.scores.resize(s.tokens * s.experts);
  return kernels::moeRouterRef(
      {.x = p.x.data(),
       .weight = kernels::WeightView::f32(p.weight.data(), {s.experts, s.hidden}),
       .correctionBias =
           withBias ? kernels::WeightView::f32(p.bias.data(), {s.experts}) : kernels::WeightView{},
       .expertIds = p.ids.data(),
       .expertWeights = p.weights.data(),
       .scores = p.scores.data(),
       .tokens = s.tokens,
       .hidden = s.hidden,
       .experts = s.experts,
       .topK = s.topK,
       .nGroup = s.nGroup,
       .topkGroup = s.topkGroup,
       .normTopkProb = norm,
       .routedScalingFactor = 2.5f});
}

/// Random inputs (bf16-representable when `bf16`): logits x·w of unit spread, a bias of 0.05.
Problem makeProblem(SplitMix64 &rng, const Shape &s, bool bf16, bool norm, bool withBias) {
  Problem p;
  p.x.resize(s.tokens * s.hidden);
  p.weight.resize(s.experts * s.hidden);
  p.bias.assign(s.experts, 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hidden));
  for (float &v : p.x) {
    v = rng.normal();
  }
  for (float &v : p.weight) {
    v = rng.normal() * scale;
  }
  if (withBias) {
    for (float &v : p.bias) {
      v = rng.normal() * 0.05f;
    }
  }
  if (bf16) {
    for (auto *vec : {&p.x, &p.weight}) {
      for (float &v : *vec) {
        v = kernels::roundToBf16(v);
      }
    }
  }
  const Status status = computeReference(p, s, norm, withBias);
  EXPECT_TRUE(status.ok()) << status.toString();
  return p;
}

class MoeRouterGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    std::vector<std::string> names;
    for (kernels::MoeRouterScores k : kKernels) {
      for (const auto &[t, w] : kTypes) {
        names.push_back(kernels::moeRouterScoresName(k, t, w));
      }
    }
    names.push_back("glm::kernels::moeRouterSelectKernel<float>");
    names.push_back("glm::kernels::moeRouterSelectKernel<glm::kernels::Bf16>");
    GLM_ASSERT_OK_AND_ASSIGN(module_, compileForGpu(kSource, names));
  }

  // In MoeRouterScores order: the module holds each one's instances at 3 · its index.
  static constexpr kernels::MoeRouterScores kKernels[] = {kernels::MoeRouterScores::Gemv,
                                                          kernels::MoeRouterScores::Decode,
                                                          kernels::MoeRouterScores::Tiled};
  static constexpr std::pair<const char *, const char *> kTypes[] = {
      {"float", "float"},
      {"float", "glm::kernels::Bf16"},
      {"glm::kernels::Bf16", "glm::kernels::Bf16"}};

  /// Runs both kernels: activations bf16 when `bf16Act`, weight bf16 when `bf16Weight`, bias bf16
  /// when `bf16Bias`.
  void run(const Problem &p, const Shape &s, bool bf16Act, bool bf16Weight, bool bf16Bias,
           bool norm, bool withBias, Result &r,
           kernels::MoeRouterScores scoresKernel = kernels::MoeRouterScores::Gemv) {
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx,
                             bf16Act ? toDevice(toBf16(p.x)) : toDevice(p.x));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw,
                             bf16Weight ? toDevice(toBf16(p.weight)) : toDevice(p.weight));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory db,
                             bf16Bias ? toDevice(toBf16(p.bias)) : toDevice(p.bias));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dscores, poisoned(s.tokens * s.experts * 4));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dids, poisoned(s.tokens * s.topK * 4));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dweights,
                             poisoned(s.tokens * s.topK * (bf16Act ? 2 : 4)));
    const kernels::MoeRouterGpuArgs args{reinterpret_cast<const void *>(dx.ptr()),
                                         reinterpret_cast<const void *>(dw.ptr()),
                                         withBias ? reinterpret_cast<const void *>(db.ptr())
                                                  : nullptr,
                                         reinterpret_cast<float *>(dscores.ptr()),
                                         reinterpret_cast<int32_t *>(dids.ptr()),
                                         reinterpret_cast<void *>(dweights.ptr()),
                                         s.tokens,
                                         s.hidden,
                                         s.experts,
                                         s.topK,
                                         s.nGroup,
                                         s.topkGroup,
                                         norm ? 1 : 0,
                                         bf16Bias ? 1 : 0,
                                         2.5f};
    const int scores = static_cast<int>(scoresKernel) * 3 + (bf16Act ? 2 : (bf16Weight ? 1 : 0));
    GLM_ASSERT_OK(launchAndWait(module_->function(scores),
                                kernels::moeRouterScoresLaunch(scoresKernel, s.tokens, s.experts,
                                                               s.hidden, bf16Act ? 2 : 4),
                                args));
    GLM_ASSERT_OK(launchAndWait(module_->function(bf16Act ? 10 : 9),
                                kernels::moeRouterSelectLaunch(s.tokens), args));
    GLM_ASSERT_OK_AND_ASSIGN(r.scores, fromDevice<float>(dscores, s.tokens * s.experts));
    GLM_ASSERT_OK_AND_ASSIGN(r.ids, fromDevice<int32_t>(dids, s.tokens * s.topK));
    if (bf16Act) {
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> w,
                               fromDevice<uint16_t>(dweights, s.tokens * s.topK));
      r.weights = widen(w);
    } else {
      GLM_ASSERT_OK_AND_ASSIGN(r.weights, fromDevice<float>(dweights, s.tokens * s.topK));
    }
  }

  std::unique_ptr<cuda::Module> module_;
};

/// Compares expert ids token by token. The GPU ranks f32 biased scores, the reference double
/// ones; where they order two experts differently, the reference's biased scores of the two must be
/// a near-tie (within `tieTolerance`, a few f32 roundings of the logit). Returns how many tokens
/// differed; their weights are left out of `gpuWeights` / `refWeights`.
int compareIds(const Problem &p, const Shape &s, const std::vector<int32_t> &ids,
               const std::vector<float> &weights, std::vector<float> &gpuWeights,
               std::vector<float> &refWeights, double tieTolerance) {
  int differing = 0;
  for (int64_t t = 0; t < s.tokens; ++t) {
    bool same = true;
    for (int64_t k = 0; k < s.topK; ++k) {
      const int32_t g = ids[t * s.topK + k], r = p.ids[t * s.topK + k];
      if (g == r) {
        continue;
      }
      same = false;
      EXPECT_TRUE(g >= 0 && g < s.experts) << "token " << t << " k " << k << " id " << g;
      if (g < 0 || g >= s.experts) {
        continue;
      }
      const double bg = static_cast<double>(p.scores[t * s.experts + g]) + p.bias[g];
      const double br = static_cast<double>(p.scores[t * s.experts + r]) + p.bias[r];
      EXPECT_LE(std::abs(bg - br), tieTolerance)
          << "token " << t << " k " << k << ": expert " << g << " instead of " << r;
    }
    if (same) {
      for (int64_t k = 0; k < s.topK; ++k) {
        gpuWeights.push_back(weights[t * s.topK + k]);
        refWeights.push_back(p.weights[t * s.topK + k]);
      }
    } else {
      ++differing;
    }
  }
  return differing;
}

/// A run of `scoresKernel` at random inputs against the reference: scores to 1e-5; ids equal but
/// for near-ties (compareIds within 1e-6), which must stay rare; the weights of the tokens whose
/// ids agree within `weightBound`. `variant` (" variant v", or empty) names the inputs in the ids'
/// and weights' messages.
void expectMatchesReference(const Problem &p, const Shape &s, const Result &r,
                            kernels::MoeRouterScores scoresKernel, double weightBound,
                            const std::string &variant) {
  const int kernel = static_cast<int>(scoresKernel);
  EXPECT_LE(relativeError(r.scores, p.scores), 1e-5)
      << s.tokens << "x" << s.experts << " kernel " << kernel;
  std::vector<float> gw, rw;
  const int differing = compareIds(p, s, r.ids, r.weights, gw, rw, 1e-6);
  EXPECT_LE(differing, std::max<int64_t>(1, s.tokens / 100))
      << s.tokens << "x" << s.experts << variant << " kernel " << kernel;
  EXPECT_LE(relativeError(gw, rw), weightBound)
      << s.tokens << "x" << s.experts << variant << " kernel " << kernel;
}

// f32: scores to 1e-5; ids equal but for near-ties (the biased scores of two experts within 1e-6
// in the reference's double: f32 logits carry ~1e-7 of rounding), which must stay rare; weights
// of the tokens whose ids agree to 1e-5.
TEST_F(MoeRouterGpu, F32MatchesReference) {
  SplitMix64 rng(501);
  for (const Shape &s : kShapes) {
    for (int variant = 0; variant < 3; ++variant) { // bias+norm, bias+no norm, no bias+norm
      const bool withBias = variant != 2, norm = variant != 1;
      for (bool bf16Weight : {false, true}) {
        const Problem p = makeProblem(rng, s, bf16Weight, norm, withBias);
        for (kernels::MoeRouterScores k : kKernels) {
          Result r;
          run(p, s, false, bf16Weight, false, norm, withBias, r, k);
          expectMatchesReference(p, s, r, k, 1e-5, " variant " + std::to_string(variant));
        }
      }
    }
  }
}

// bf16 activations, weight and bias (HF computes the router in f32 from the bf16 values, so the
// scores and ids are as in f32): the weights are computed in f32 (~1e-6) and rounded once to bf16,
// whose unit roundoff is 2^-8 (8 significant bits), so every weight is within 2^-8 relative and the
// L2 error is at most 2^-8 + 1e-5.
TEST_F(MoeRouterGpu, Bf16WithinOneRounding) {
  SplitMix64 rng(502);
  for (const Shape &s : kShapes) {
    Problem p = makeProblem(rng, s, true, true, false);
    // A bf16 bias: recompute the reference with the rounded bias.
    for (float &b : p.bias) {
      b = kernels::roundToBf16(rng.normal() * 0.05f);
    }
    GLM_ASSERT_OK(computeReference(p, s, true, true));
    for (kernels::MoeRouterScores k : kKernels) {
      Result r;
      run(p, s, true, true, true, true, true, r, k);
      expectMatchesReference(p, s, r, k, 1.0 / 256 + 1e-5, "");
    }
  }
}

// Exact ties: equal rows of the router weight give equal scores, and LowerIndex keeps the lower
// expert id, for experts and for groups.
TEST_F(MoeRouterGpu, TiesGoToTheLowerIndex) {
  SplitMix64 rng(503);
  for (const Shape &s : {Shape{8, 128, 32, 6, 1, 1}, Shape{8, 128, 32, 5, 8, 3}}) {
    Problem p = makeProblem(rng, s, false, true, false);
    // Experts come in equal octets (8q..8q+7 share a row), so with n_group 8 (groups of 4)
    // groups 2q and 2q+1 tie as wholes too.
    for (int64_t e = 0; e < s.experts; ++e) {
      std::copy_n(p.weight.begin() + (e / 8) * 8 * s.hidden, s.hidden,
                  p.weight.begin() + e * s.hidden);
    }
    GLM_ASSERT_OK(computeReference(p, s, true, false));
    for (kernels::MoeRouterScores k : kKernels) {
      Result r;
      run(p, s, false, false, false, true, false, r, k);
      EXPECT_EQ(r.ids, p.ids) << "n_group " << s.nGroup << " kernel " << static_cast<int>(k);
      EXPECT_LE(relativeError(r.weights, p.weights), 1e-5)
          << "n_group " << s.nGroup << " kernel " << static_cast<int>(k);
    }
  }
}

// The router's weight as fp8 blocks (the deployment's --dense q4 takes the router to fp8: its
// kernels read no Q4): both scores kernels against the reference reading the same bytes through
// WeightView, f32 and bf16 activations, at Flash's router, the tiny one's and a ragged width.
TEST_F(MoeRouterGpu, Fp8BlockWeightsMatchTheReferenceOnTheSameBytes) {
  std::vector<std::string> names;
  for (kernels::MoeRouterScores k : kKernels) {
    for (const char *t : {"float", "glm::kernels::Bf16"}) {
      names.push_back(kernels::moeRouterScoresName(k, t, "glm::kernels::Fp8E4m3"));
    }
  }
  GLM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<cuda::Module> module, compileForGpu(kSource, names));
  SplitMix64 rng(504);
  for (const Shape &s : {kShapes[0], kShapes[1], kShapes[2], kShapes[4], kShapes[7]}) {
    for (bool bf16Act : {false, true}) {
      Problem p = makeProblem(rng, s, bf16Act, true, true);
      std::vector<uint8_t> fp8(static_cast<size_t>(kernels::fp8Bytes(1, s.experts, s.hidden)));
      GLM_ASSERT_OK(kernels::quantizeFp8Blocks(
          kernels::WeightView::f32(p.weight.data(), {s.experts, s.hidden}), fp8.data()));
      // The reference reads the stored values: the problem's weight becomes their widening.
      kernels::WeightView::encoded(fp8.data(), kernels::DenseEncoding::Fp8, DType::F32, s.experts,
                                   s.hidden)
          .loadAll(p.weight.data());
      GLM_ASSERT_OK(computeReference(p, s, true, true));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx,
                               bf16Act ? toDevice(toBf16(p.x)) : toDevice(p.x));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw, toDevice(fp8));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory db, toDevice(p.bias));
      for (kernels::MoeRouterScores k : kKernels) {
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dscores, poisoned(s.tokens * s.experts * 4));
        kernels::MoeRouterGpuArgs args{};
        args.x = reinterpret_cast<const void *>(dx.ptr());
        args.weight = reinterpret_cast<const void *>(dw.ptr());
        args.weightScaleInv = reinterpret_cast<const float *>(
            dw.ptr() + kernels::fp8ScalesOffset(1, s.experts, s.hidden));
        args.correctionBias = reinterpret_cast<const void *>(db.ptr());
        args.scores = reinterpret_cast<float *>(dscores.ptr());
        args.tokens = s.tokens;
        args.hidden = s.hidden;
        args.experts = s.experts;
        const int index = static_cast<int>(k) * 2 + (bf16Act ? 1 : 0);
        GLM_ASSERT_OK(launchAndWait(
            module->function(index),
            kernels::moeRouterScoresLaunch(k, s.tokens, s.experts, s.hidden, bf16Act ? 2 : 4),
            args));
        GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> scores,
                                 fromDevice<float>(dscores, s.tokens * s.experts));
        EXPECT_LE(relativeError(scores, p.scores), 1e-5)
            << s.tokens << "x" << s.hidden << "x" << s.experts << " kernel " << static_cast<int>(k)
            << (bf16Act ? " bf16" : " f32");
      }
    }
  }
}

// The decode scores kernel sums a token's row in one order whatever the token count (verify
// windows of 1-16 rows must give each row the bits a one-row step gives it): 16 tokens at once
// against each token alone, bit for bit, bf16 and fp8-block weights at Flash's router.
TEST_F(MoeRouterGpu, DecodeScoresDoNotDependOnTheTokenCount) {
  GLM_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<cuda::Module> module,
      compileForGpu(kSource,
                    {kernels::moeRouterScoresName(kernels::MoeRouterScores::Decode,
                                                  "glm::kernels::Bf16", "glm::kernels::Bf16"),
                     kernels::moeRouterScoresName(kernels::MoeRouterScores::Decode,
                                                  "glm::kernels::Bf16", "glm::kernels::Fp8E4m3")}));
  SplitMix64 rng(505);
  const Shape s{16, 4096, 288, 8, 1, 1};
  const Problem p = makeProblem(rng, s, true, true, false);
  for (bool fp8 : {false, true}) {
    std::vector<uint8_t> weight;
    if (fp8) {
      weight.resize(static_cast<size_t>(kernels::fp8Bytes(1, s.experts, s.hidden)));
      GLM_ASSERT_OK(kernels::quantizeFp8Blocks(
          kernels::WeightView::f32(p.weight.data(), {s.experts, s.hidden}), weight.data()));
    } else {
      const std::vector<uint16_t> bf16 = toBf16(p.weight);
      weight.resize(bf16.size() * 2);
      std::memcpy(weight.data(), bf16.data(), weight.size());
    }
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw, toDevice(weight));
    const std::vector<uint16_t> x = toBf16(p.x);
    auto scoresOf = [&](int64_t first, int64_t tokens) -> Expected<std::vector<float>> {
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dx, toDevice(std::vector<uint16_t>(
                                                      x.begin() + first * s.hidden,
                                                      x.begin() + (first + tokens) * s.hidden)));
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dscores, poisoned(tokens * s.experts * 4));
      kernels::MoeRouterGpuArgs args{};
      args.x = reinterpret_cast<const void *>(dx.ptr());
      args.weight = reinterpret_cast<const void *>(dw.ptr());
      if (fp8) {
        args.weightScaleInv = reinterpret_cast<const float *>(
            dw.ptr() + kernels::fp8ScalesOffset(1, s.experts, s.hidden));
      }
      args.scores = reinterpret_cast<float *>(dscores.ptr());
      args.tokens = tokens;
      args.hidden = s.hidden;
      args.experts = s.experts;
      GLM_RETURN_IF_ERROR(
          launchAndWait(module->function(fp8 ? 1 : 0),
                        kernels::moeRouterScoresLaunch(kernels::MoeRouterScores::Decode, tokens,
                                                       s.experts, s.hidden, 2),
                        args));
      return fromDevice<float>(dscores, tokens * s.experts);
    };
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> all, scoresOf(0, s.tokens));
    for (int64_t t = 0; t < s.tokens; ++t) {
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> alone, scoresOf(t, 1));
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + t * s.experts))
          << (fp8 ? "fp8" : "bf16") << " token " << t;
    }
    if (!fp8) { // the reference reads the bf16 values; fp8 blocks are another weight
      EXPECT_LE(relativeError(all, p.scores), 1e-5);
    }
  }
}

} // namespace
} // namespace glm::testing
