// Tests of the final mHC stream collapse (unweighted mean).
#include "kernels/stream_mean/stream_mean.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

TEST(StreamMeanRef, AveragesTheStreams) {
  const std::vector<float> streams = {1, 2, 3, 4, 5, 6, /* token 1 */ -1, 0, 1, 2, 3, 7};
  std::vector<float> out(4);
  ASSERT_TRUE(
      streamMeanRef(
          {.streams = streams.data(), .out = out.data(), .tokens = 2, .hcMult = 3, .hidden = 2})
          .ok());
  EXPECT_EQ(out, (std::vector<float>{3, 4, 1, 3}));
}

} // namespace
} // namespace glm::kernels
