// Tests of greedy argmax: ties to the lower id, NaN never wins.
#include "kernels/argmax/argmax.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

TEST(ArgmaxRef, TiesGoToTheLowerIdAndNanNeverWins) {
  const std::vector<float> logits = {1, 5, 3, 5, /**/ NAN, -2, -1, -1, /**/ NAN, NAN, NAN, NAN};
  std::vector<int32_t> out(3, -1);
  ASSERT_TRUE(argmaxRef({.logits = logits.data(), .out = out.data(), .rows = 3, .vocab = 4}).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 0}));
}

} // namespace
} // namespace glm::kernels
