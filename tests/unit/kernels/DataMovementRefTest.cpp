// Tests of the data-movement references: expand_streams, add, concat, last_rows, and the SwiGLU
// activation.
#include "kernels/add/add.h"
#include "kernels/concat/concat.h"
#include "kernels/expand_streams/expand_streams.h"
#include "kernels/last_rows/last_rows.h"
#include "kernels/swiglu/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace glm::kernels {
namespace {

TEST(ExpandStreamsRef, CopiesEachRowIntoEveryStream) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}; // 2 tokens x 3
  std::vector<float> out(2 * 4 * 3, -1);
  ASSERT_TRUE(expandStreamsRef({x.data(), out.data(), 2, 4, 3}).ok());
  for (int t = 0; t < 2; ++t) {
    for (int s = 0; s < 4; ++s) {
      for (int h = 0; h < 3; ++h) {
        EXPECT_EQ(out[(t * 4 + s) * 3 + h], x[t * 3 + h]);
      }
    }
  }
  EXPECT_FALSE(expandStreamsRef({x.data(), out.data(), 2, 0, 3}).ok());
}

TEST(AddRef, SumsElementwiseInPlace) {
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
  ASSERT_TRUE(addRef({a.data(), b.data(), a.data(), 3}).ok());
  EXPECT_EQ(a, (std::vector<float>{11, 22, 33}));
}

TEST(ConcatRef, JoinsRowsAlongFeatures) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {9, 8, 7, 6, 5, 4}; // [2,2] and [2,3]
  const float *inputs[] = {a.data(), b.data()};
  const int64_t widths[] = {2, 3};
  std::vector<float> out(10);
  ASSERT_TRUE(concatRef({inputs, widths, out.data(), 2}).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 9, 8, 7, 3, 4, 6, 5, 4}));
  const int64_t negative[] = {2, -1};
  EXPECT_FALSE(concatRef({inputs, negative, out.data(), 2}).ok());
}

TEST(LastRowsRef, CopiesTheGivenRowOfEachSequence) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}; // 4 rows x 2
  const int64_t rows[] = {2, 0};
  const int32_t positions[] = {10, 11, 12, 13};
  std::vector<float> out(4, -1);
  std::vector<int32_t> picked(2, 0);
  ASSERT_TRUE(lastRowsRef({x.data(), rows, out.data(), 2, 2, positions, picked.data()}).ok());
  EXPECT_EQ(out, (std::vector<float>{5, 6, 1, 2}));
  EXPECT_EQ(picked, (std::vector<int32_t>{12, 10}));
  const int64_t none[] = {1, -1};
  EXPECT_FALSE(lastRowsRef({x.data(), none, out.data(), 2, 2}).ok());
}

TEST(SwigluActivationRef, ClampsTheGateAboveAndUpBothWays) {
  const std::vector<float> gate = {-20, 0.5f, 30}, up = {2, -40, 40};
  std::vector<float> out(3);
  ASSERT_TRUE(swigluActivationRef({gate.data(), up.data(), out.data(), 3, 10.0f}).ok());
  auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
  EXPECT_NEAR(out[0], silu(-20) * 2, 1e-7);   // the gate has no lower clamp
  EXPECT_NEAR(out[1], silu(0.5) * -10, 1e-6); // up clamped to -10
  EXPECT_NEAR(out[2], silu(10) * 10, 1e-4);   // gate clamped to 10, up to 10
  EXPECT_FALSE(swigluActivationRef({gate.data(), up.data(), out.data(), 3, 0.0f}).ok());
}

} // namespace
} // namespace glm::kernels
