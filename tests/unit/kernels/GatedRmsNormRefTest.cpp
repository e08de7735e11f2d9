// Tests of KDA's gated output norm: per-row RMSNorm, weight, sigmoid gate.
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

TEST(GatedRmsNormRef, NormalisesEachRowThenGates) {
  SplitMix64 rng(3);
  const int64_t rows = 4, dim = 8; // e.g. 2 tokens x 2 heads of dim 8
  const std::vector<float> x = randomFloats(rng, rows * dim);
  const std::vector<float> gate = randomFloats(rng, rows * dim, 2.0f);
  const std::vector<float> w = randomFloats(rng, dim);
  std::vector<float> out(rows * dim);
  ASSERT_TRUE(gatedRmsNormRef({.x = x.data(),
                               .gate = gate.data(),
                               .weight = WeightView::f32(w.data(), {dim}),
                               .out = out.data(),
                               .rows = rows,
                               .dim = dim,
                               .eps = 1e-5f})
                  .ok());
  for (int64_t r = 0; r < rows; ++r) {
    float ms = 0.0f;
    for (int64_t i = 0; i < dim; ++i) {
      ms += x[r * dim + i] * x[r * dim + i];
    }
    const float inv = 1.0f / std::sqrt(ms / dim + 1e-5f);
    for (int64_t i = 0; i < dim; ++i) {
      const float g = 1.0f / (1.0f + std::exp(-gate[r * dim + i]));
      EXPECT_NEAR(out[r * dim + i], w[i] * x[r * dim + i] * inv * g, 1e-5f);
    }
  }
}

} // namespace
} // namespace glm::kernels
