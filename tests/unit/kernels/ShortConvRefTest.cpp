// Tests of the causal depthwise short conv: the formula, SiLU, and state carried across chunks.
#include "kernels/short_conv/short_conv.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

TEST(ShortConvRef, HandComputedWindowsWithZeroHistory) {
  // One channel, K = 3, w = [1, 2, 3]: z_t = 1·u_{t−2} + 2·u_{t−1} + 3·u_t.
  const std::vector<float> w = {1, 2, 3};
  const std::vector<float> u = {1, 10, 100, 1000};
  std::vector<float> out(4);
  ASSERT_TRUE(shortConvRef({.x = u.data(),
                            .weight = WeightView::f32(w.data(), {1, 1, 3}),
                            .out = out.data(),
                            .tokens = 4,
                            .channels = 1,
                            .kernelSize = 3,
                            .activation = ConvActivation::None})
                  .ok());
  EXPECT_EQ(out, (std::vector<float>{3, 32, 321, 3210}));
  ASSERT_TRUE(shortConvRef({.x = u.data(),
                            .weight = WeightView::f32(w.data(), {1, 1, 3}),
                            .out = out.data(),
                            .tokens = 1,
                            .channels = 1,
                            .kernelSize = 3,
                            .activation = ConvActivation::Silu})
                  .ok());
  EXPECT_FLOAT_EQ(out[0], 3.0f / (1.0f + std::exp(-3.0f)));
}

TEST(ShortConvRef, ChunksWithCarriedStateEqualOneCall) {
  SplitMix64 rng(21);
  const int64_t tokens = 23, channels = 6, k = 4;
  const std::vector<float> w = randomFloats(rng, channels * k);
  const std::vector<float> x = randomFloats(rng, tokens * channels);
  const WeightView weight = WeightView::f32(w.data(), {channels, 1, k});

  std::vector<float> whole(tokens * channels);
  std::vector<float> state(channels * (k - 1), 0.0f);
  ASSERT_TRUE(shortConvRef({.x = x.data(),
                            .weight = weight,
                            .state = state.data(),
                            .out = whole.data(),
                            .tokens = tokens,
                            .channels = channels,
                            .kernelSize = k})
                  .ok());
  // The state after the call holds the last K − 1 inputs, oldest first.
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t j = 0; j < k - 1; ++j) {
      EXPECT_EQ(state[c * (k - 1) + j], x[(tokens - (k - 1) + j) * channels + c]);
    }
  }

  // Chunks of 1, 2, 7 and 13 tokens (shorter and longer than the window), in place.
  std::vector<float> chunked = x;
  std::fill(state.begin(), state.end(), 0.0f);
  int64_t start = 0;
  for (int64_t len : {1, 2, 7, 13}) {
    ASSERT_TRUE(shortConvRef({.x = chunked.data() + start * channels,
                              .weight = weight,
                              .state = state.data(),
                              .out = chunked.data() + start * channels,
                              .tokens = len,
                              .channels = channels,
                              .kernelSize = k})
                    .ok());
    start += len;
  }
  ASSERT_EQ(start, tokens);
  EXPECT_EQ(chunked, whole);
}

} // namespace
} // namespace glm::kernels
