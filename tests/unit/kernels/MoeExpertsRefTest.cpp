// Tests of the routed-expert mixture: weighted clamped-SwiGLU experts plus the unscaled shared
// expert, against a per-token loop.
#include "kernels/moe_experts/moe_experts.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

/// silu(min(x·wg, L)) · clamp(x·wu, −L, L), then ·wd, for one token, plain loops.
std::vector<float> naiveSwiglu(const float *x, const std::vector<float> &wg,
                               const std::vector<float> &wu, const std::vector<float> &wd,
                               int64_t hidden, int64_t inter, float limit) {
  std::vector<float> h(inter), y(hidden, 0.0f);
  for (int64_t j = 0; j < inter; ++j) {
    double g = 0.0, u = 0.0;
    for (int64_t i = 0; i < hidden; ++i) {
      g += double(x[i]) * wg[j * hidden + i];
      u += double(x[i]) * wu[j * hidden + i];
    }
    g = std::min(g, double(limit));
    u = std::clamp(u, -double(limit), double(limit));
    h[j] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
  }
  for (int64_t d = 0; d < hidden; ++d) {
    double s = 0.0;
    for (int64_t j = 0; j < inter; ++j) {
      s += double(h[j]) * wd[d * inter + j];
    }
    y[d] = static_cast<float>(s);
  }
  return y;
}

TEST(MoeExpertsRef, SumsWeightedRoutedExpertsPlusTheUnscaledSharedOne) {
  SplitMix64 rng(62);
  const int64_t tokens = 5, hidden = 6, inter = 4, sharedInter = 8, experts = 4, k = 2;
  // Large weights so the ±limit clamps bite.
  const float limit = 1.5f;
  const std::vector<float> x = randomFloats(rng, tokens * hidden);
  std::vector<std::vector<float>> wg, wu, wd;
  std::vector<ExpertWeights> views;
  for (int64_t e = 0; e < experts; ++e) {
    wg.push_back(randomFloats(rng, inter * hidden));
    wu.push_back(randomFloats(rng, inter * hidden));
    wd.push_back(randomFloats(rng, hidden * inter));
  }
  for (int64_t e = 0; e < experts; ++e) {
    views.push_back({WeightView::f32(wg[e].data(), {inter, hidden}),
                     WeightView::f32(wu[e].data(), {inter, hidden}),
                     WeightView::f32(wd[e].data(), {hidden, inter})});
  }
  const std::vector<float> sg = randomFloats(rng, sharedInter * hidden);
  const std::vector<float> su = randomFloats(rng, sharedInter * hidden);
  const std::vector<float> sd = randomFloats(rng, hidden * sharedInter);
  const ExpertWeights shared{WeightView::f32(sg.data(), {sharedInter, hidden}),
                             WeightView::f32(su.data(), {sharedInter, hidden}),
                             WeightView::f32(sd.data(), {hidden, sharedInter})};
  const std::vector<int32_t> ids = {3, 0, 1, 3, 2, 0, 1, 2, 3, 1};
  const std::vector<float> weights = {0.7f, 1.8f, 0.2f, 2.3f, 1.0f, 1.0f, 0.5f, 0.6f, 2.0f, 0.4f};
  std::vector<float> out(tokens * hidden);
  ASSERT_TRUE(moeExpertsRef({.x = x.data(),
                             .expertIds = ids.data(),
                             .expertWeights = weights.data(),
                             .experts = views.data(),
                             .shared = &shared,
                             .out = out.data(),
                             .tokens = tokens,
                             .hidden = hidden,
                             .numExperts = experts,
                             .topK = k,
                             .intermediate = inter,
                             .sharedIntermediate = sharedInter,
                             .swigluLimit = limit})
                  .ok());
  std::vector<float> want(tokens * hidden, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    const float *xt = &x[t * hidden];
    const std::vector<float> s = naiveSwiglu(xt, sg, su, sd, hidden, sharedInter, limit);
    for (int64_t d = 0; d < hidden; ++d) {
      want[t * hidden + d] = s[d];
    }
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      const std::vector<float> y = naiveSwiglu(xt, wg[e], wu[e], wd[e], hidden, inter, limit);
      for (int64_t d = 0; d < hidden; ++d) {
        want[t * hidden + d] += weights[t * k + j] * y[d];
      }
    }
  }
  EXPECT_LE(maxRelativeError(out, want), 1e-5);
}

} // namespace
} // namespace glm::kernels
