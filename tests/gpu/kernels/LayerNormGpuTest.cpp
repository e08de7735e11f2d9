// layer_norm's CUDA kernel against its CPU reference: the indexer's k_norm at GLM-5.3-Flash's
// index_head_dim (128) and the tiny model's (32), plus Flash's hidden size for generality.
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/layer_norm/layer_norm_gpu.h"
#include "tests/gpu/support/GpuTest.h"

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/layer_norm/layer_norm.cuh")";

struct Shape {
  int64_t rows, dim;
};
const Shape kShapes[] = {{1, 128}, {3, 128},   {37, 128}, {2048, 128}, {1, 32},
                         {37, 32}, {2048, 32}, {5, 4096}, {9, 100}};

class LayerNormGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(
        module_,
        compileForGpu(kSource,
                      {
                          "glm::kernels::layerNormKernel<float, float>",
                          "glm::kernels::layerNormKernel<float, glm::kernels::Bf16>",
                          "glm::kernels::layerNormKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
                          "glm::kernels::layerNormKernel<glm::kernels::Bf16, float>",
                      }));
  }

  void run(const std::vector<float> &x, const std::vector<float> &w, const std::vector<float> &b,
           const Shape &s, bool bf16, bool bf16Weight, bool weighted, bool biased, bool inPlace,
           std::vector<float> &out) {
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, bf16 ? toDevice(toBf16(x)) : toDevice(x));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw, bf16Weight ? toDevice(toBf16(w)) : toDevice(w));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory db, bf16Weight ? toDevice(toBf16(b)) : toDevice(b));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory fresh, poisoned(x.size() * 4));
    const cuda::DeviceMemory &target = inPlace ? dx : fresh;
    const kernels::LayerNormGpuArgs args{
        reinterpret_cast<const void *>(dx.ptr()),
        weighted ? reinterpret_cast<const void *>(dw.ptr()) : nullptr,
        biased ? reinterpret_cast<const void *>(db.ptr()) : nullptr,
        reinterpret_cast<void *>(target.ptr()),
        s.rows,
        s.dim,
        1e-6f};
    const size_t kernel = bf16 ? (bf16Weight ? 2 : 3) : (bf16Weight ? 1 : 0);
    GLM_ASSERT_OK(launchAndWait(module_->function(kernel), kernels::layerNormLaunch(s.rows), args));
    if (bf16) {
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> o, fromDevice<uint16_t>(target, x.size()));
      out = widen(o);
    } else {
      GLM_ASSERT_OK_AND_ASSIGN(out, fromDevice<float>(target, x.size()));
    }
  }

  std::unique_ptr<cuda::Module> module_;
};

/// Rows with a mean well away from zero (LayerNorm's reason to exist), bf16-representable weights.
void makeInputs(SplitMix64 &rng, const Shape &s, bool bf16, std::vector<float> &x,
                std::vector<float> &w, std::vector<float> &b) {
  x.resize(s.rows * s.dim);
  for (int64_t r = 0; r < s.rows; ++r) {
    const float offset = 4.0f * rng.normal();
    for (int64_t i = 0; i < s.dim; ++i) {
      const float v = offset + 2.0f * rng.normal();
      x[r * s.dim + i] = bf16 ? kernels::roundToBf16(v) : v;
    }
  }
  w.resize(s.dim);
  b.resize(s.dim);
  for (float &v : w) {
    v = kernels::roundToBf16(1.0f + 0.3f * rng.normal());
  }
  for (float &v : b) {
    v = kernels::roundToBf16(0.5f * rng.normal());
  }
}

std::vector<float> reference(const std::vector<float> &x, const std::vector<float> &w,
                             const std::vector<float> &b, const Shape &s, bool weighted,
                             bool biased) {
  std::vector<float> out(x.size());
  const Status status = kernels::layerNormRef(
      {.x = x.data(),
       .weight = weighted ? kernels::WeightView::f32(w.data(), {s.dim}) : kernels::WeightView{},
       .bias = biased ? kernels::WeightView::f32(b.data(), {s.dim}) : kernels::WeightView{},
       .out = out.data(),
       .rows = s.rows,
       .dim = s.dim,
       .eps = 1e-6f});
  EXPECT_TRUE(status.ok()) << status.toString();
  return out;
}

TEST_F(LayerNormGpu, F32MatchesReference) {
  SplitMix64 rng(501);
  for (const Shape &s : kShapes) {
    std::vector<float> x, w, b;
    makeInputs(rng, s, false, x, w, b);
    for (int affine = 0; affine < 4; ++affine) {
      const bool weighted = (affine & 1) == 0, biased = (affine & 2) == 0;
      const std::vector<float> ref = reference(x, w, b, s, weighted, biased);
      for (bool bf16Weight : {false, true}) {
        std::vector<float> out;
        run(x, w, b, s, false, bf16Weight, weighted, biased, affine == 3 && bf16Weight, out);
        EXPECT_LE(relativeError(out, ref), 1e-5)
            << s.rows << "x" << s.dim << " affine " << affine << (bf16Weight ? " bf16 w" : "");
      }
    }
  }
}

// bf16: torch's bf16 layer_norm keeps the statistics and the affine in f32 and rounds once. bf16
// keeps 8 significant bits, so the rounding moves each element by at most 2^-8 of itself, and the
// L2 error against the reference on the same inputs is at most 2^-8 (+1e-5 for the f32 part). (The
// typical error is nearer 2^-9, which a 32-element row exceeded by chance: 2.04e-3.) And since the
// kernel's f32 value is within a few f32 ulps of the reference, it rounds to the same bf16 as the
// rounded reference except within a few f32 ulps of a midpoint: ~2^-14 of the elements, allow
// 1e-3.
TEST_F(LayerNormGpu, Bf16WithinOneRounding) {
  SplitMix64 rng(502);
  for (const Shape &s : kShapes) {
    std::vector<float> x, w, b;
    makeInputs(rng, s, true, x, w, b);
    const std::vector<float> ref = reference(x, w, b, s, true, true);
    for (bool bf16Weight : {true, false}) {
      std::vector<float> out;
      run(x, w, b, s, true, bf16Weight, true, true, false, out);
      EXPECT_LE(relativeError(out, ref), 1.0 / 256 + 1e-5) << s.rows << "x" << s.dim;
      size_t differ = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        differ += out[i] != kernels::roundToBf16(ref[i]) ? 1 : 0;
      }
      EXPECT_LE(static_cast<double>(differ), 1e-3 * out.size() + 1) << s.rows << "x" << s.dim;
    }
  }
}

} // namespace
} // namespace glm::testing
