// exl3_moe's prefill kernels (exl3_moe_prefill_gpu.h) against the CPU reference of the decode
// tests (exl3LinearRef per expert, tests/gpu/support/Exl3MoeLayer.h): GLM-5.3-Flash's expert shape
// (from the fixture's config) with 16 local experts at 128 and 512 tokens, so that experts get
// many slots (more than one 64-slot tile for most at 512), the tiny model's and a ragged shape
// (features not multiples of 128, rows not 16-byte aligned); K = 3, 4 and mixed within a layer;
// the MCG, MUL1 and 3INST codebooks; experts split over two ranks; the SwiGLU clamp active; two
// runs give the same bits.
#include "kernels/moe_experts/exl3_moe_prefill_gpu.h"
#include "tests/gpu/support/Exl3MoeLayer.h"

#include <map>

namespace glm::testing {
namespace {

using namespace exl3_moe_test;

const char *kSource = R"(#include "kernels/moe_experts/exl3_moe_prefill.cuh")";

/// The prefill tests' Flash layer: 16 experts held, so that 128 tokens give ~64 slots per expert.
Shape prefillFlashShape() { return flashShape(16); }

class Exl3MoePrefillGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
  }

  /// Runs a step on the device (fast path for `bits`, `codebook`) into `out` (bf16 bits), with
  /// poisoned output and scratch.
  void run(const Layer &l, const Shape &d, int bits, Exl3Codebook codebook,
           const std::vector<float> &x, const Routing &r, int64_t tokens, int32_t firstExpert,
           std::vector<uint16_t> &out) {
    const std::vector<kernels::NamedLaunch> launches = kernels::exl3MoePrefillLaunches(
        bits, static_cast<int>(codebook), tokens, d.hidden, d.inter, d.experts, d.topK);
    cuda::Module *module = cachedModule(kSource, launches);
    ASSERT_NE(module, nullptr);
    GLM_ASSERT_OK_AND_ASSIGN(DeviceStep step,
                             uploadStep(l, d, x, r, tokens, firstExpert, swigluLimit()));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory scratch,
                             poisoned(kernels::exl3MoePrefillScratchBytes(tokens, d.topK, d.experts,
                                                                          d.hidden, d.inter)));
    const kernels::Exl3MoePrefillGpuArgs args =
        kernels::exl3MoePrefillBindScratch(step.args, reinterpret_cast<void *>(scratch.ptr()));
    GLM_ASSERT_OK(launchAllAndWait(*module, launches, args));
    GLM_ASSERT_OK_AND_ASSIGN(out, fromDevice<uint16_t>(step.out, tokens * d.hidden));
  }

  /// Runs twice, expects the same bits, and compares with the reference within the bound below;
  /// returns how many gate and up values the clamp changed.
  int64_t check(const Layer &l, const Shape &d, int bits, Exl3Codebook codebook, int64_t tokens,
                int64_t globalExperts, int32_t firstExpert, SplitMix64 &rng,
                const std::string &what) {
    const Case c = drawCase(l, d, tokens, globalExperts, firstExpert, rng);
    std::vector<uint16_t> first, second;
    run(l, d, bits, codebook, c.x, c.r, tokens, firstExpert, first);
    run(l, d, bits, codebook, c.x, c.r, tokens, firstExpert, second);
    EXPECT_EQ(first, second) << what << ": not deterministic";
    EXPECT_LE(relativeError(widen(first), c.ref), kBound) << describe(what, d, tokens, c.clamped);
    return c.clamped;
  }

  // The error bound. The kernels round the gate/up and down A operands (x ∘ suh · H, h ∘ suh · H)
  // to fp16 and use the weights' exact fp16 values; then, as moe_experts' bf16 path (HF's bf16
  // forward) does, each slot's down output y, w · y and the token's running sum after each local
  // expert to bf16; everything else is f32. A rounding's RMS relative error is ~0.4 of its unit
  // roundoff and independent errors add in quadrature. fp16 (u = 2^-11): gate/up's A (2 terms,
  // amplified up to 2x through silu·u) and down's A give 0.4·2^-11·sqrt(2·4 + 1) ≈ 5.9e-4. bf16
  // (u = 2^-8): y and w · y (1 each, relative to the sum as each slot's share), and the running
  // sum after the i-th of 8 contributions (energy ~i/8 of the final: Σ i/8 = 4.5) give
  // 0.4·2^-8·sqrt(1 + 1 + 4.5) ≈ 4.0e-3: ≈ 4.0e-3 expected in all. Bound: 2^-7 ≈ 7.8e-3.
  static constexpr double kBound = 1.0 / 128;
};

// K = 4, MCG (the GLM-5.3-Flash checkpoint's format) at Flash's shape: 128 tokens (~64 slots per
// expert) and 512 (~256: several 64-slot tiles per expert, the last ragged).
TEST_F(Exl3MoePrefillGpu, FlashMcgK4MatchesReference) {
  const Shape d = prefillFlashShape();
  const Layer l = uniformLayer(d, 4, Exl3Codebook::Mcg, 11);
  SplitMix64 rng(801);
  int64_t clamped = 0;
  for (int64_t tokens : {128, 512}) {
    clamped += check(l, d, 4, Exl3Codebook::Mcg, tokens, d.experts, 0, rng, "flash mcg K=4");
  }
  EXPECT_GT(clamped, 0) << "the clamp never acted";
}

// The tiny model and a ragged shape: the MCG, MUL1 and 3INST codebooks at K = 3 and 4 on the fast
// path, at 40 and 200 tokens.
TEST_F(Exl3MoePrefillGpu, CodebooksAndBitsMatchReference) {
  SplitMix64 rng(802);
  for (const Shape &d : {tinyShape(), kRagged}) {
    for (Exl3Codebook cb : {Exl3Codebook::Mcg, Exl3Codebook::Mul1, Exl3Codebook::Inst3}) {
      for (int bits : {3, 4}) {
        const Layer l = uniformLayer(d, bits, cb, 100 + bits);
        for (int64_t tokens : {40, 200}) {
          check(l, d, bits, cb, tokens, d.experts, 0, rng,
                std::string(exl3CodebookName(cb)) + " K=" + std::to_string(bits));
        }
      }
    }
  }
}

// A layer whose matrices mix K = 2, 3, 4 (and, on the tiny and ragged shapes, codebooks): the
// kernels compiled for K = 4 MCG take the generic decoder for the others.
TEST_F(Exl3MoePrefillGpu, MixedLayerMatchesReference) {
  SplitMix64 rng(803);
  {
    const Shape d = prefillFlashShape();
    const Layer l = mixedLayer(d, false, 21);
    check(l, d, 4, Exl3Codebook::Mcg, 128, d.experts, 0, rng, "flash mixed K");
  }
  for (const Shape &d : {tinyShape(), kRagged}) {
    const Layer l = mixedLayer(d, true, 22);
    check(l, d, 4, Exl3Codebook::Mcg, 100, d.experts, 0, rng, "mixed K and codebook");
  }
}

// expert_shards 2: rank r holds global ids [rE, (r + 1)E); the routing draws from all 2E, and the
// rank's output is its partial sum. A token none of whose experts the rank holds gets exact zeros.
TEST_F(Exl3MoePrefillGpu, ExpertShardsGiveTheRanksPartialSum) {
  SplitMix64 rng(804);
  {
    const Shape d = prefillFlashShape();
    const Layer l = uniformLayer(d, 4, Exl3Codebook::Mcg, 31);
    for (int32_t rank : {0, 1}) {
      check(l, d, 4, Exl3Codebook::Mcg, 128, 2 * d.experts, static_cast<int32_t>(rank * d.experts),
            rng, "flash rank " + std::to_string(rank));
    }
  }
  const Shape d = tinyShape();
  const Layer l = uniformLayer(d, 4, Exl3Codebook::Mcg, 32);
  const int64_t tokens = 80;
  // Token 0 selects only experts of rank 0; rank 1 must give it zeros.
  Routing r = randomRouting(rng, tokens, d.topK, 2 * d.experts);
  for (int64_t k = 0; k < d.topK; ++k) {
    r.ids[k] = static_cast<int32_t>(k);
  }
  const std::vector<float> x = randomX(rng, tokens, d.hidden);
  const int32_t first = static_cast<int32_t>(d.experts);
  std::vector<uint16_t> out;
  run(l, d, 4, Exl3Codebook::Mcg, x, r, tokens, first, out);
  EXPECT_EQ(std::vector<uint16_t>(out.begin(), out.begin() + d.hidden),
            std::vector<uint16_t>(d.hidden, 0));
  EXPECT_LE(relativeError(widen(out), reference(l, d, x, r, tokens, first, swigluLimit())), kBound);
}

// Unselected experts and the padding of suh and svh (where x and h are zero, or outputs are
// dropped) do not change the bits.
TEST_F(Exl3MoePrefillGpu, BlindToUnusedData) {
  SplitMix64 rng(805);
  for (const Shape &d : {prefillFlashShape(), kRagged}) {
    Layer l = uniformLayer(d, 4, Exl3Codebook::Mcg, 41);
    const int64_t tokens = 96;
    const std::vector<float> x = randomX(rng, tokens, d.hidden);
    const Routing r = routingWithoutExperts01(rng, tokens, d);
    std::vector<uint16_t> first, second;
    run(l, d, 4, Exl3Codebook::Mcg, x, r, tokens, 0, first);
    scribbleOnUnusedData(l, d);
    run(l, d, 4, Exl3Codebook::Mcg, x, r, tokens, 0, second);
    EXPECT_EQ(first, second) << d.hidden;
    EXPECT_LE(relativeError(widen(first), reference(l, d, x, r, tokens, 0, swigluLimit())), kBound);
  }
}

} // namespace
} // namespace glm::testing
