// Tests of the mHC residual update: new stream j reads column j of comb.
#include "kernels/mhc_post/mhc_post.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

TEST(MhcPostRef, NewStreamJSumsColumnJOfComb) {
  // hc = 2, hidden = 2, an asymmetric comb: X'[j] = post[j]·y + Σ_i comb[i][j]·R[i].
  const std::vector<float> y = {1.0f, 2.0f};
  std::vector<float> r = {10.0f, 20.0f, 100.0f, 200.0f}; // R[0] = [10, 20], R[1] = [100, 200]
  const std::vector<float> post = {0.5f, 1.5f};
  const std::vector<float> comb = {0.9f, 0.1f, 0.3f, 0.7f}; // comb[0][1] = 0.1, comb[1][0] = 0.3
  ASSERT_TRUE(mhcPostRef({.y = y.data(),
                          .residual = r.data(),
                          .post = post.data(),
                          .comb = comb.data(),
                          .out = r.data(), // in place
                          .tokens = 1,
                          .hcMult = 2,
                          .hidden = 2})
                  .ok());
  EXPECT_FLOAT_EQ(r[0], 0.5f * 1 + 0.9f * 10 + 0.3f * 100);
  EXPECT_FLOAT_EQ(r[1], 0.5f * 2 + 0.9f * 20 + 0.3f * 200);
  EXPECT_FLOAT_EQ(r[2], 1.5f * 1 + 0.1f * 10 + 0.7f * 100);
  EXPECT_FLOAT_EQ(r[3], 1.5f * 2 + 0.1f * 20 + 0.7f * 200);
}

} // namespace
} // namespace glm::kernels
