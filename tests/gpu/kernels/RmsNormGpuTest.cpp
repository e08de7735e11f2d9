// rms_norm's CUDA kernel against its CPU reference, at GLM-5.3-Flash's width and the tiny model's.
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rms_norm/rms_norm_gpu.h"
#include "tests/gpu/support/GpuTest.h"

namespace glm::testing {
namespace {

using kernels::Bf16;

const char *kSource = R"(#include "kernels/rms_norm/rms_norm.cuh")";

struct Shape {
  int64_t rows, dim;
};
// Flash's hidden size at decode and prefill row counts, and the tiny model's.
std::vector<Shape> shapes() {
  const int64_t flash = flashConfig().hiddenSize, tiny = tinyConfig().hiddenSize;
  return {{1, flash}, {5, flash}, {300, flash}, {3, tiny}, {64, tiny}};
}

class RmsNormGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(
        module_,
        compileForGpu(kSource,
                      {
                          "glm::kernels::rmsNormKernel<float, float>",
                          "glm::kernels::rmsNormKernel<float, glm::kernels::Bf16>",
                          "glm::kernels::rmsNormKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
                      }));
  }
  std::unique_ptr<cuda::Module> module_;
};

TEST_F(RmsNormGpu, F32MatchesReference) {
  SplitMix64 rng(11);
  for (const Shape &s : shapes()) {
    for (bool bf16Weight : {false, true}) {
      for (bool weighted : {true, false}) {
        std::vector<float> x(s.rows * s.dim), w(s.dim);
        for (float &v : x) {
          v = rng.normal() * 3.0f;
        }
        for (float &v : w) {
          v = kernels::roundToBf16(1.0f + 0.2f * rng.normal());
        }
        std::vector<float> ref(x.size());
        GLM_ASSERT_OK(
            kernels::rmsNormRef({.x = x.data(),
                                 .weight = weighted ? kernels::WeightView::f32(w.data(), {s.dim})
                                                    : kernels::WeightView{},
                                 .out = ref.data(),
                                 .rows = s.rows,
                                 .dim = s.dim,
                                 .eps = 1e-5f}));
        std::vector<uint16_t> wBf16(w.size());
        std::transform(w.begin(), w.end(), wBf16.begin(), kernels::floatToBf16);
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, toDevice(x));
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw, bf16Weight ? toDevice(wBf16) : toDevice(w));
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(x.size() * 4));
        const kernels::RmsNormGpuArgs args{reinterpret_cast<const void *>(dx.ptr()),
                                           weighted ? reinterpret_cast<const void *>(dw.ptr())
                                                    : nullptr,
                                           reinterpret_cast<void *>(dout.ptr()),
                                           s.rows,
                                           s.dim,
                                           1e-5f};
        GLM_ASSERT_OK(launchAndWait(module_->function(bf16Weight ? 1 : 0),
                                    kernels::rmsNormLaunch(s.rows), args));
        GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, fromDevice<float>(dout, x.size()));
        EXPECT_LE(relativeError(out, ref), 1e-5)
            << s.rows << "x" << s.dim << (bf16Weight ? " bf16 weight" : " f32 weight")
            << (weighted ? "" : " unweighted");
      }
    }
  }
}

// bf16 activations: the kernel rounds the normalised row and the product to bf16, as HF does, so
// against the f32 reference on the same (bf16) inputs each element carries at most two bf16
// roundings of at most 2^-8 relative each (8 significant bits); the f32 sum adds ~1e-6.
TEST_F(RmsNormGpu, Bf16WithinTwoRoundings) {
  SplitMix64 rng(12);
  for (const Shape &s : shapes()) {
    std::vector<float> x(s.rows * s.dim), w(s.dim);
    for (float &v : x) {
      v = kernels::roundToBf16(rng.normal() * 3.0f);
    }
    for (float &v : w) {
      v = kernels::roundToBf16(1.0f + 0.2f * rng.normal());
    }
    std::vector<float> ref(x.size());
    GLM_ASSERT_OK(kernels::rmsNormRef({.x = x.data(),
                                       .weight = kernels::WeightView::f32(w.data(), {s.dim}),
                                       .out = ref.data(),
                                       .rows = s.rows,
                                       .dim = s.dim,
                                       .eps = 1e-5f}));
    std::vector<uint16_t> xb(x.size()), wb(w.size());
    std::transform(x.begin(), x.end(), xb.begin(), kernels::floatToBf16);
    std::transform(w.begin(), w.end(), wb.begin(), kernels::floatToBf16);
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, toDevice(xb));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw, toDevice(wb));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(x.size() * 2));
    const kernels::RmsNormGpuArgs args{reinterpret_cast<const void *>(dx.ptr()),
                                       reinterpret_cast<const void *>(dw.ptr()),
                                       reinterpret_cast<void *>(dout.ptr()),
                                       s.rows,
                                       s.dim,
                                       1e-5f};
    GLM_ASSERT_OK(launchAndWait(module_->function(2), kernels::rmsNormLaunch(s.rows), args));
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> out, fromDevice<uint16_t>(dout, x.size()));
    EXPECT_LE(relativeError(widen(out), ref), 2.0 / 256 + 1e-5) << s.rows << "x" << s.dim;
  }
}

} // namespace
} // namespace glm::testing
