// Tests of LayerNorm with weight and bias (the indexer's k_norm).
#include "kernels/layer_norm/layer_norm.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

TEST(LayerNormRef, HandComputedRowUsesTheBiasedVariance) {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25.
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> w = {1, 2, 3, 4};
  const std::vector<float> b = {0.5f, 0, 0, -0.5f};
  std::vector<float> out(4);
  ASSERT_TRUE(layerNormRef({.x = x.data(),
                            .weight = WeightView::f32(w.data(), {4}),
                            .bias = WeightView::f32(b.data(), {4}),
                            .out = out.data(),
                            .rows = 1,
                            .dim = 4,
                            .eps = 1e-6f})
                  .ok());
  const double inv = 1.0 / std::sqrt(1.25 + 1e-6);
  EXPECT_NEAR(out[0], -1.5 * inv * 1 + 0.5, 1e-6);
  EXPECT_NEAR(out[1], -0.5 * inv * 2, 1e-6);
  EXPECT_NEAR(out[2], 0.5 * inv * 3, 1e-6);
  EXPECT_NEAR(out[3], 1.5 * inv * 4 - 0.5, 1e-6);
}

TEST(LayerNormRef, RowsAreIndependentAndNormalised) {
  SplitMix64 rng(4);
  const int64_t rows = 5, dim = 32;
  std::vector<float> x = randomFloats(rng, rows * dim, 4.0f);
  for (int64_t i = 0; i < dim; ++i) {
    x[i] += 10.0f; // a large mean must not leak into the result
  }
  std::vector<float> out(x.size());
  ASSERT_TRUE(
      layerNormRef({.x = x.data(), .out = out.data(), .rows = rows, .dim = dim, .eps = 1e-6f})
          .ok());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      mean += out[r * dim + i];
      sq += double(out[r * dim + i]) * out[r * dim + i];
    }
    EXPECT_NEAR(mean / dim, 0.0, 1e-6);
    EXPECT_NEAR(sq / dim, 1.0, 1e-5);
  }
}

} // namespace
} // namespace glm::kernels
