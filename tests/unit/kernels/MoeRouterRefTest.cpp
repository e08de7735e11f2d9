// Tests of the sigmoid router: bias for selection only, ties, group-limited routing, weights.
#include "kernels/moe_router/moe_router.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

struct RouterOut {
  std::vector<int32_t> ids;
  std::vector<float> weights, scores;
};

RouterOut route(const std::vector<float> &x, const std::vector<float> &w,
                const std::vector<float> &bias, int64_t tokens, int64_t hidden, int64_t experts,
                int64_t topK, int64_t nGroup = 1, int64_t topkGroup = 1, bool norm = true,
                float scaling = 2.5f) {
  RouterOut o;
  o.ids.resize(tokens * topK);
  o.weights.resize(tokens * topK);
  o.scores.resize(tokens * experts);
  const Status s = moeRouterRef(
      {.x = x.data(),
       .weight = WeightView::f32(w.data(), {experts, hidden}),
       .correctionBias = bias.empty() ? WeightView{} : WeightView::f32(bias.data(), {experts}),
       .expertIds = o.ids.data(),
       .expertWeights = o.weights.data(),
       .scores = o.scores.data(),
       .tokens = tokens,
       .hidden = hidden,
       .experts = experts,
       .topK = topK,
       .nGroup = nGroup,
       .topkGroup = topkGroup,
       .normTopkProb = norm,
       .routedScalingFactor = scaling});
  EXPECT_TRUE(s.ok()) << s.toString();
  return o;
}

TEST(MoeRouterRef, BiasChoosesButUnbiasedScoresWeigh) {
  SplitMix64 rng(61);
  const int64_t hidden = 8, experts = 6, k = 2;
  const std::vector<float> x = randomFloats(rng, hidden);
  const std::vector<float> w = randomFloats(rng, experts * hidden, 0.5f);
  // A huge bias on experts 4 and 1 forces them in, whatever their scores.
  const std::vector<float> bias = {0, 5, 0, 0, 10, 0};
  const RouterOut o = route(x, w, bias, 1, hidden, experts, k);
  EXPECT_EQ(o.ids, (std::vector<int32_t>{4, 1}));
  std::vector<double> s(experts);
  for (int64_t e = 0; e < experts; ++e) {
    double logit = 0.0;
    for (int64_t i = 0; i < hidden; ++i) {
      logit += double(x[i]) * w[e * hidden + i];
    }
    s[e] = 1.0 / (1.0 + std::exp(-logit));
    EXPECT_NEAR(o.scores[e], s[e], 1e-6);
  }
  EXPECT_NEAR(o.weights[0], s[4] / (s[4] + s[1] + 1e-20) * 2.5, 1e-6);
  EXPECT_NEAR(o.weights[1], s[1] / (s[4] + s[1] + 1e-20) * 2.5, 1e-6);
  // Without renormalisation the weights are the scaled scores.
  const RouterOut raw = route(x, w, bias, 1, hidden, experts, k, 1, 1, false, 2.5f);
  EXPECT_NEAR(raw.weights[0], s[4] * 2.5, 1e-6);
}

TEST(MoeRouterRef, TiesGoToTheLowerExpert) {
  // A zero router scores every expert sigmoid(0) = 0.5.
  const std::vector<float> x = {1, 2, 3}, w(5 * 3, 0.0f);
  const RouterOut o = route(x, w, {}, 1, 3, 5, 3);
  EXPECT_EQ(o.ids, (std::vector<int32_t>{0, 1, 2}));
  for (float weight : o.weights) {
    EXPECT_NEAR(weight, 2.5 / 3, 1e-6);
  }
}

TEST(MoeRouterRef, GroupLimitedRoutingRanksGroupsByTheirTopTwoSum) {
  // 8 experts in 4 groups of 2, keep 2 groups, then top 2 experts. The router is zero, so the
  // bias alone orders them (scores 0.5 + bias). Group 0 has one strong expert (0.9 + 0.0), group 2
  // two good ones (0.5 + 0.5), group 3 (0.45 + 0.45), group 1 (0.1 + 0.1): groups 2 and 0 stay,
  // and the best experts among them are 0 (0.9) and then 4 or 5 (0.5, tie → 4). Without groups the
  // choice would be 0 and 4 as well, so also check a case where groups change the result.
  const std::vector<float> x = {1}, w(8, 0.0f);
  const std::vector<float> bias = {0.9f, 0.0f, 0.1f, 0.1f, 0.5f, 0.5f, 0.45f, 0.45f};
  EXPECT_EQ(route(x, w, bias, 1, 1, 8, 2, 4, 2).ids, (std::vector<int32_t>{0, 4}));
  // Keep one group: group 2 (sum 1.0) beats group 0 (0.9), although expert 0 is the single best.
  EXPECT_EQ(route(x, w, bias, 1, 1, 8, 2, 4, 1).ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(route(x, w, bias, 1, 1, 8, 2, 1, 1).ids, (std::vector<int32_t>{0, 4}));
}

TEST(MoeRouterRef, RejectsImpossibleGroupSettings) {
  const std::vector<float> x = {1}, w(8, 0.0f);
  std::vector<int32_t> ids(3);
  std::vector<float> weights(3);
  MoeRouterArgs a{.x = x.data(),
                  .weight = WeightView::f32(w.data(), {8, 1}),
                  .expertIds = ids.data(),
                  .expertWeights = weights.data(),
                  .tokens = 1,
                  .hidden = 1,
                  .experts = 8,
                  .topK = 3,
                  .nGroup = 4,
                  .topkGroup = 1};
  EXPECT_FALSE(moeRouterRef(a).ok()); // 3 experts from one group of 2
  a.nGroup = 3;
  EXPECT_FALSE(moeRouterRef(a).ok()); // 3 does not divide 8
}

} // namespace
} // namespace glm::kernels
