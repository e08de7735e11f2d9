// gated_rms_norm's CUDA kernel against its CPU reference, at GLM-5.3-Flash's heads and the tiny's.
//
// KDA's per-head gated output norm: Flash has 64 heads of 128 per token, the tiny model 4 of 32.
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/gated_rms_norm/gated_rms_norm_gpu.h"
#include "tests/gpu/support/GpuTest.h"

namespace glm::testing {
namespace {

using kernels::roundToBf16;

const char *kSource = R"(#include "kernels/gated_rms_norm/gated_rms_norm.cuh")";

struct Shape {
  int64_t tokens, heads, dim;
  int64_t rows() const { return tokens * heads; }
};
// Flash at decode (1, 4 tokens) and prefill (2048) row counts, the tiny model's, and a head of 320
// (wider than the 256 values a lane keeps in registers).
const Shape kShapes[] = {{1, 64, 128}, {4, 64, 128}, {2048, 64, 128},
                         {3, 4, 32},   {64, 4, 32},  {5, 3, 320}};

int fn(bool tBf16, bool wBf16) { return (tBf16 ? 2 : 0) + (wBf16 ? 1 : 0); }

std::vector<float> randomValues(SplitMix64 &rng, size_t n, bool bf16, float scale, float mean) {
  std::vector<float> v(n);
  for (float &x : v) {
    x = mean + scale * rng.normal();
    x = bf16 ? roundToBf16(x) : x;
  }
  return v;
}

class GatedRmsNormGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(
        module_,
        compileForGpu(
            kSource, {
                         "glm::kernels::gatedRmsNormKernel<float, float>",
                         "glm::kernels::gatedRmsNormKernel<float, glm::kernels::Bf16>",
                         "glm::kernels::gatedRmsNormKernel<glm::kernels::Bf16, float>",
                         "glm::kernels::gatedRmsNormKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
                     }));
  }

  /// The kernel on (x, gate, w); `inPlace` writes the result over x.
  void check(SplitMix64 &rng, const Shape &s, bool tBf16, bool wBf16, bool inPlace, double bound) {
    const size_t n = s.rows() * s.dim;
    const std::vector<float> x = randomValues(rng, n, tBf16, 2.0f, 0.0f);
    const std::vector<float> gate = randomValues(rng, n, tBf16, 2.0f, 0.0f);
    const std::vector<float> w = randomValues(rng, s.dim, wBf16, 0.2f, 1.0f);
    std::vector<float> ref(n);
    GLM_ASSERT_OK(kernels::gatedRmsNormRef({.x = x.data(),
                                            .gate = gate.data(),
                                            .weight = kernels::WeightView::f32(w.data(), {s.dim}),
                                            .out = ref.data(),
                                            .rows = s.rows(),
                                            .dim = s.dim,
                                            .eps = 1e-5f}));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, upload(x, tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dg, upload(gate, tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw, upload(w, wBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dOut, poisoned(n * (tBf16 ? 2 : 4)));
    const cuda::DeviceMemory &result = inPlace ? dx : dOut;
    const kernels::GatedRmsNormGpuArgs args{dx.as<const void>(),
                                            dg.as<const void>(),
                                            dw.as<const void>(),
                                            result.as<void>(),
                                            s.rows(),
                                            s.dim,
                                            1e-5f};
    GLM_ASSERT_OK(launchAndWait(module_->function(fn(tBf16, wBf16)),
                                kernels::gatedRmsNormLaunch(s.rows()), args));
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, download(result, n, tBf16));
    EXPECT_LE(relativeError(out, ref), bound)
        << s.tokens << " tokens x " << s.heads << " heads x " << s.dim << (tBf16 ? " bf16" : "")
        << (wBf16 ? " bf16 W" : "") << (inPlace ? " in place" : "");
  }

  std::unique_ptr<cuda::Module> module_;
};

TEST_F(GatedRmsNormGpu, F32MatchesReference) {
  SplitMix64 rng(41);
  for (const Shape &s : kShapes) {
    for (bool wBf16 : {false, true}) {
      check(rng, s, false, wBf16, false, 1e-5);
    }
  }
  check(rng, kShapes[1], false, false, true, 1e-5);
}

// bf16 activations: x and gate are bf16 values on both sides and the kernel computes in f32 and
// rounds once at the store (as HF does), so each element is within one bf16 rounding (2^-9
// relative) of the reference: L2 bound 2^-9, + 1e-5 for the f32 arithmetic.
TEST_F(GatedRmsNormGpu, Bf16WithinOneRounding) {
  SplitMix64 rng(42);
  for (const Shape &s : kShapes) {
    for (bool wBf16 : {false, true}) {
      check(rng, s, true, wBf16, false, 1.0 / 512 + 1e-5);
    }
  }
  check(rng, kShapes[3], true, true, true, 1.0 / 512 + 1e-5);
}

} // namespace
} // namespace glm::testing
