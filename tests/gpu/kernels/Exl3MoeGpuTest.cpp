// exl3_moe's CUDA kernels against a CPU reference built from exl3LinearRef per expert (double-
// precision rotations, f32 activations widened from the same bf16 inputs; layers and reference in
// tests/gpu/support/Exl3MoeLayer.h): GLM-5.3-Flash's expert shape (from the fixture's config) with
// 12 local experts, so that tokens share experts, the tiny model's, and a ragged one (features not
// multiples of 128, rows not 16-byte aligned); K = 2, 3, 4 and mixed within a layer; the MCG, MUL1
// and 3INST codebooks; 1 to 64 tokens; experts split over two ranks; the SwiGLU clamp active.
#include "kernels/common/FloatFormats.h"
#include "kernels/moe_experts/exl3_moe_gpu.h"
#include "tests/gpu/support/Exl3MoeLayer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/moe_experts/exl3_moe.cuh")";

using namespace exl3_moe_test;

/// The decode tests' Flash layer: 12 experts held, so that tokens share experts.
Shape decodeFlashShape() { return flashShape(12); }

class Exl3MoeGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
  }

  /// Runs a step on the device (fast path for `bits`, `codebook`) into `out` (bf16 bits), with
  /// poisoned output and scratch. Items of up to `residentRows` rows take the resident path (every
  /// test covers it, whatever the plans' default).
  void run(const Layer &l, const Shape &d, int bits, Exl3Codebook codebook,
           const std::vector<float> &x, const Routing &r, int64_t tokens, int32_t firstExpert,
           float limit, std::vector<uint16_t> &out,
           int32_t residentRows = kernels::kExl3MoeResidentRows) {
    const std::vector<kernels::NamedLaunch> launches = kernels::exl3MoeLaunches(
        bits, static_cast<int>(codebook), tokens, d.hidden, d.inter, d.experts, d.topK);
    cuda::Module *module = cachedModule(kSource, launches);
    ASSERT_NE(module, nullptr);
    GLM_ASSERT_OK_AND_ASSIGN(DeviceStep step, uploadStep(l, d, x, r, tokens, firstExpert, limit));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory scratch, poisoned(kernels::exl3MoeScratchBytes(
                                                             tokens, d.topK, d.hidden, d.inter)));
    kernels::Exl3MoeGpuArgs args = step.args;
    args.residentRows = residentRows;
    kernels::exl3MoeBindScratch(args, reinterpret_cast<void *>(scratch.ptr()));
    GLM_ASSERT_OK(launchAllAndWait(*module, launches, args));
    GLM_ASSERT_OK_AND_ASSIGN(out, fromDevice<uint16_t>(step.out, tokens * d.hidden));
  }

  /// Runs and compares with the reference within the bound below; returns how many gate and up
  /// values the clamp changed.
  int64_t check(const Layer &l, const Shape &d, int bits, Exl3Codebook codebook, int64_t tokens,
                int64_t globalExperts, int32_t firstExpert, SplitMix64 &rng,
                const std::string &what) {
    const Case c = drawCase(l, d, tokens, globalExperts, firstExpert, rng);
    std::vector<uint16_t> out;
    run(l, d, bits, codebook, c.x, c.r, tokens, firstExpert, swigluLimit(), out);
    EXPECT_LE(relativeError(widen(out), c.ref), kBound) << describe(what, d, tokens, c.clamped);
    return c.clamped;
  }

  // The error bound. The kernel rounds the gate/up and down A operands (x ∘ suh · H, h ∘ suh · H)
  // to fp16, uses MCG/3INST weights before their fp16 rounding (at most half an fp16 ulp away),
  // and rounds the output to bf16 once; everything else is f32 (~1e-7). A rounding's RMS relative
  // error is ~0.4 of its unit roundoff (uniform error over log-uniform mantissas); independent
  // per-element errors survive the dot products as their RMS. fp16 (u = 2^-11): the A of gate and
  // up and their weights (4 terms, amplified up to 2x through silu·u) plus down's A and weights (2)
  // give 0.4·2^-11·sqrt(4·4 + 2) ≈ 8.3e-4; the bf16 output (u = 2^-8) adds 0.4·2^-8 ≈ 1.6e-3 in
  // quadrature: ≈ 1.8e-3 expected. Bound: 2^-8 ≈ 3.9e-3.
  static constexpr double kBound = 1.0 / 256;
};

// K = 4, MCG (the GLM-5.3-Flash checkpoint's format) at Flash's shape: 1, 4, 16 and 64 tokens
// (64: four token groups per mma, experts shared by many tokens).
TEST_F(Exl3MoeGpu, FlashMcgK4MatchesReference) {
  const Shape d = decodeFlashShape();
  const Layer l = uniformLayer(d, 4, Exl3Codebook::Mcg, 11);
  SplitMix64 rng(701);
  int64_t clamped = 0;
  for (int64_t tokens : {1, 4, 16, 64}) {
    clamped += check(l, d, 4, Exl3Codebook::Mcg, tokens, d.experts, 0, rng, "flash mcg K=4");
  }
  EXPECT_GT(clamped, 0) << "the clamp never acted";
}

// The tiny model and a ragged shape (padding on both sides, unaligned rows): every codebook and
// K = 2, 3, 4, on the fast path (the kernel compiled for the layer's K and codebook), at one and
// at 16 tokens (each instance is a compile of its own; FlashMcgK4 covers 4 and 64).
TEST_F(Exl3MoeGpu, CodebooksAndBitsMatchReference) {
  SplitMix64 rng(702);
  for (const Shape &d : {tinyShape(), kRagged}) {
    for (Exl3Codebook cb : {Exl3Codebook::Mcg, Exl3Codebook::Mul1, Exl3Codebook::Inst3}) {
      for (int bits : {2, 3, 4}) {
        const Layer l = uniformLayer(d, bits, cb, 100 + bits);
        for (int64_t tokens : {1, 16}) {
          check(l, d, bits, cb, tokens, d.experts, 0, rng,
                std::string(exl3CodebookName(cb)) + " K=" + std::to_string(bits));
        }
      }
    }
  }
}

// A layer whose matrices mix K = 2, 3, 4 and (on the tiny shape) codebooks: the kernel compiled
// for K = 4 MCG takes the generic path for the others.
TEST_F(Exl3MoeGpu, MixedLayerMatchesReference) {
  SplitMix64 rng(703);
  {
    const Shape d = decodeFlashShape();
    const Layer l = mixedLayer(d, false, 21);
    check(l, d, 4, Exl3Codebook::Mcg, 4, d.experts, 0, rng, "flash mixed K");
  }
  for (const Shape &d : {tinyShape(), kRagged}) {
    const Layer l = mixedLayer(d, true, 22);
    for (int64_t tokens : {1, 16}) {
      check(l, d, 4, Exl3Codebook::Mcg, tokens, d.experts, 0, rng, "mixed K and codebook");
    }
  }
}

// expert_shards 2: rank 1 holds global ids [E, 2E); the routing draws from all 2E, and the rank's
// output is its partial sum. A token none of whose experts the rank holds gets exact zeros.
TEST_F(Exl3MoeGpu, ExpertShardsGiveTheRanksPartialSum) {
  SplitMix64 rng(704);
  {
    const Shape d = decodeFlashShape();
    const Layer l = uniformLayer(d, 4, Exl3Codebook::Mcg, 31);
    for (int64_t tokens : {1, 4}) {
      for (int32_t rank : {0, 1}) {
        check(l, d, 4, Exl3Codebook::Mcg, tokens, 2 * d.experts,
              static_cast<int32_t>(rank * d.experts), rng, "flash rank " + std::to_string(rank));
      }
    }
  }
  const Shape d = tinyShape();
  const Layer l = uniformLayer(d, 4, Exl3Codebook::Mcg, 32);
  check(l, d, 4, Exl3Codebook::Mcg, 16, 2 * d.experts, static_cast<int32_t>(d.experts), rng,
        "tiny rank 1");
  Routing r;
  for (int64_t k = 0; k < d.topK; ++k) {
    r.ids.push_back(static_cast<int32_t>(k));
    r.weights.push_back(0.25f);
  }
  std::vector<uint16_t> out;
  run(l, d, 4, Exl3Codebook::Mcg, randomX(rng, 1, d.hidden), r, 1, static_cast<int32_t>(d.experts),
      swigluLimit(), out);
  EXPECT_EQ(out, std::vector<uint16_t>(d.hidden, 0));
}

// The resident and the chunked path (args.residentRows 0) give the same bits: the same step run
// both ways, on Flash's shape at 1 to 16 tokens (items of 1 to several rows) and on the tiny and
// ragged shapes (unaligned rows, blocks with no chunk of hidden), with a mixed-K layer (the
// generic decoder on both paths).
TEST_F(Exl3MoeGpu, ResidentAndChunkedPathsGiveTheSameBits) {
  SplitMix64 rng(707);
  const auto compare = [&](const Layer &l, const Shape &d, int64_t tokens,
                           const std::string &what) {
    const Case c = drawCase(l, d, tokens, d.experts, 0, rng);
    std::vector<uint16_t> resident, chunked;
    run(l, d, 4, Exl3Codebook::Mcg, c.x, c.r, tokens, 0, swigluLimit(), resident);
    run(l, d, 4, Exl3Codebook::Mcg, c.x, c.r, tokens, 0, swigluLimit(), chunked, 0);
    EXPECT_EQ(resident, chunked) << what << ", " << tokens << " tokens";
  };
  const Shape flash = decodeFlashShape();
  const Layer uniform = uniformLayer(flash, 4, Exl3Codebook::Mcg, 61);
  for (int64_t tokens : {1, 2, 4, 16}) {
    compare(uniform, flash, tokens, "flash");
  }
  compare(mixedLayer(flash, false, 62), flash, 4, "flash mixed K");
  for (const Shape &d : {tinyShape(), kRagged}) {
    const Layer l = mixedLayer(d, true, 63);
    for (int64_t tokens : {1, 4}) {
      compare(l, d, tokens, "mixed K and codebook, hidden " + std::to_string(d.hidden));
    }
  }
}

// An expert's item takes the resident path at up to kExl3MoeResidentRows rows and the chunked path
// beyond (and 4 token groups at 64 tokens): the same arithmetic per row either way, so a token's
// output bits do not depend on how many tokens share its experts (which verify windows need: a
// window's rows must draw what serial steps draw).
TEST_F(Exl3MoeGpu, ATokensBitsDoNotDependOnHowManyTokensShareItsExperts) {
  SplitMix64 rng(706);
  const Shape d = decodeFlashShape();
  const Layer l = uniformLayer(d, 4, Exl3Codebook::Mcg, 51);
  const std::vector<float> x = randomX(rng, 1, d.hidden);
  const Routing r = randomRouting(rng, 1, d.topK, d.experts);
  std::vector<uint16_t> alone;
  run(l, d, 4, Exl3Codebook::Mcg, x, r, 1, 0, swigluLimit(), alone);
  for (int64_t tokens :
       {int64_t{kernels::kExl3MoeResidentRows}, int64_t{5}, int64_t{16}, int64_t{64}}) {
    Routing shared;
    std::vector<float> xs;
    for (int64_t t = 0; t < tokens; ++t) {
      shared.ids.insert(shared.ids.end(), r.ids.begin(), r.ids.end());
      shared.weights.insert(shared.weights.end(), r.weights.begin(), r.weights.end());
      xs.insert(xs.end(), x.begin(), x.end());
    }
    std::vector<uint16_t> out;
    run(l, d, 4, Exl3Codebook::Mcg, xs, shared, tokens, 0, swigluLimit(), out);
    ASSERT_EQ(out.size(), static_cast<size_t>(tokens * d.hidden));
    for (int64_t t = 0; t < tokens; ++t) {
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), out.begin() + t * d.hidden))
          << "token " << t << " of " << tokens;
    }
  }
}

// Deterministic: two runs give the same bits. Unselected experts and the padding of suh and svh
// (where x and h are zero, or outputs are dropped) do not change them.
TEST_F(Exl3MoeGpu, DeterministicAndBlindToUnusedData) {
  SplitMix64 rng(705);
  for (const Shape &d : {decodeFlashShape(), kRagged}) {
    Layer l = uniformLayer(d, 4, Exl3Codebook::Mcg, 41);
    const int64_t tokens = 4;
    const std::vector<float> x = randomX(rng, tokens, d.hidden);
    const Routing r = routingWithoutExperts01(rng, tokens, d);
    std::vector<uint16_t> first, second, third;
    run(l, d, 4, Exl3Codebook::Mcg, x, r, tokens, 0, swigluLimit(), first);
    run(l, d, 4, Exl3Codebook::Mcg, x, r, tokens, 0, swigluLimit(), second);
    EXPECT_EQ(first, second) << d.hidden;
    scribbleOnUnusedData(l, d);
    run(l, d, 4, Exl3Codebook::Mcg, x, r, tokens, 0, swigluLimit(), third);
    EXPECT_EQ(first, third) << d.hidden;
    EXPECT_LE(relativeError(widen(first), reference(l, d, x, r, tokens, 0, swigluLimit())), kBound);
  }
}

} // namespace
} // namespace glm::testing
