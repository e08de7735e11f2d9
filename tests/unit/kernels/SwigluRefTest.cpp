// Tests of the clamped SwiGLU MLP: the gate clamped from above, the up projection both ways.
#include "kernels/swiglu/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

TEST(SwigluRef, ClampsTheGateAboveAndTheUpProjectionBothWays) {
  // hidden = inter = 1, x = 1: gate 15 → 10, up −20 → −10; gate −15 is not clamped.
  const std::vector<float> x = {1.0f}, wd = {1.0f};
  for (auto [g, u, expected] :
       {std::tuple{15.0f, -20.0f, 10.0f / (1.0f + std::exp(-10.0f)) * -10.0f},
        std::tuple{-15.0f, 3.0f, -15.0f / (1.0f + std::exp(15.0f)) * 3.0f},
        std::tuple{2.0f, 30.0f, 2.0f / (1.0f + std::exp(-2.0f)) * 10.0f}}) {
    const std::vector<float> wg = {g}, wu = {u};
    float y = 0.0f;
    ASSERT_TRUE(swigluRef({.x = x.data(),
                           .gate = WeightView::f32(wg.data(), {1, 1}),
                           .up = WeightView::f32(wu.data(), {1, 1}),
                           .down = WeightView::f32(wd.data(), {1, 1}),
                           .out = &y,
                           .tokens = 1,
                           .hidden = 1,
                           .intermediate = 1,
                           .limit = 10.0f})
                    .ok());
    EXPECT_FLOAT_EQ(y, expected) << "gate " << g << " up " << u;
  }
}

} // namespace
} // namespace glm::kernels
