// Tests of RMSNorm, weighted (GLM's) and unweighted (mHC's).
#include "kernels/rms_norm/rms_norm.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

TEST(RmsNormRef, HandComputedRow) {
  // x = [3, 4]: mean(x²) = 12.5, so x / sqrt(12.5 + eps) weighted by [2, −1].
  const std::vector<float> x = {3.0f, 4.0f};
  const std::vector<float> w = {2.0f, -1.0f};
  std::vector<float> out(2);
  ASSERT_TRUE(rmsNormRef({.x = x.data(),
                          .weight = WeightView::f32(w.data(), {2}),
                          .out = out.data(),
                          .rows = 1,
                          .dim = 2,
                          .eps = 0.5f})
                  .ok());
  EXPECT_FLOAT_EQ(out[0], 2.0f * 3.0f / std::sqrt(13.0f));
  EXPECT_FLOAT_EQ(out[1], -4.0f / std::sqrt(13.0f));
}

TEST(RmsNormRef, UnweightedAndInPlaceMatchTheFormula) {
  SplitMix64 rng(2);
  const int64_t rows = 3, dim = 17;
  std::vector<float> x = randomFloats(rng, rows * dim, 3.0f);
  std::vector<float> expected(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      ms += double(x[r * dim + i]) * x[r * dim + i];
    }
    const double inv = 1.0 / std::sqrt(ms / dim + 1e-5);
    for (int64_t i = 0; i < dim; ++i) {
      expected[r * dim + i] = static_cast<float>(x[r * dim + i] * inv);
    }
  }
  ASSERT_TRUE(
      rmsNormRef({.x = x.data(), .out = x.data(), .rows = rows, .dim = dim, .eps = 1e-5f}).ok());
  EXPECT_LE(maxRelativeError(x, expected), 1e-6);
}

TEST(RmsNormRef, RejectsAMisshapenWeight) {
  const std::vector<float> x(4), w(3);
  std::vector<float> out(4);
  EXPECT_FALSE(rmsNormRef({.x = x.data(),
                           .weight = WeightView::f32(w.data(), {3}),
                           .out = out.data(),
                           .rows = 1,
                           .dim = 4})
                   .ok());
}

} // namespace
} // namespace glm::kernels
