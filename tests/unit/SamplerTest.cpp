// sampleToken against its definition, written out here as plainly as it reads in
// kernels/sample/sample.h. Greedy: the loop `best = i whenever logits[i] > logits[best]` from id
// 0 (the lowest id of the largest logit, NaNs never winning, a NaN at id 0 keeping 0); the pick
// runs in independent lanes (Sampler.cpp), so the rows put the maximum, its ties, NaNs and
// infinities in every lane and in the tail. Sampled: std::stable_sort by descending logit, then
// the filters and the draw in double; the sampler orders by a radix sort or a partial sort
// instead, so the rows are full of ties (and of -0 beside +0) and top-k takes both paths. The
// same order and the same arithmetic give the same token, every time.
#include "runtime/engine/Sampler.h"

#include "base/Random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace glm::runtime {
namespace {

int32_t definition(const std::vector<float> &logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) {
      best = i;
    }
  }
  return best;
}

int32_t sampledDefinition(const std::vector<float> &logits, const SamplingParams &params,
                          int64_t position) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t kept = order.size();
  if (params.topK > 0) {
    kept = std::min(kept, static_cast<size_t>(params.topK));
  }
  const double t = params.temperature, top = logits[order[0]] / t;
  std::vector<double> probs(kept);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    total += probs[i] = std::exp(logits[order[i]] / t - top);
  }
  for (double &p : probs) {
    p /= total;
  }
  if (params.topP < 1.0f) {
    double mass = 0.0;
    size_t n = 0;
    while (n < kept && (n == 0 || mass < params.topP)) {
      mass += probs[n++];
    }
    kept = n;
  }
  if (params.minP > 0.0f) {
    size_t n = 1;
    while (n < kept && probs[n] >= params.minP * probs[0]) {
      ++n;
    }
    kept = n;
  }
  double mass = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    mass += probs[i];
  }
  SplitMix64 rng(params.seed ^ (static_cast<uint64_t>(position) * 0xD1B54A32D192ED03ull));
  const double u = static_cast<double>(rng.next() >> 11) / 9007199254740992.0 * mass;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += probs[i];
    if (u < cumulative) {
      return order[i];
    }
  }
  return order[kept - 1];
}

int32_t greedy(const std::vector<float> &logits) {
  return sampleToken(logits, SamplingParams{}, 0);
}

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Sampler, GreedyPicksTheLowestIdOfTheLargestLogitWhereverItLies) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  // Lengths around the lane groups, and a vocabulary's.
  for (size_t vocab : {1u, 2u, 15u, 16u, 17u, 31u, 33u, 100u, 154880u}) {
    std::vector<float> row(vocab);
    for (float &x : row) {
      x = normal(rng);
    }
    EXPECT_EQ(greedy(row), definition(row)) << "random row of " << vocab;
    // The maximum at each position in turn, with a tie placed later (and, for the tail, earlier).
    for (size_t at = 0; at < vocab; at += vocab > 200 ? 997 : 1) {
      std::vector<float> tied = row;
      tied[at] = 100.0f;
      tied[(at * 7 + 5) % vocab] = 100.0f;
      EXPECT_EQ(greedy(tied), definition(tied)) << "maximum at " << at << " of " << vocab;
    }
  }
}

TEST(Sampler, GreedyFollowsTheLoopOnNansInfinitiesAndZeros) {
  const std::vector<std::vector<float>> rows = {
      {kNan, 1.0f, 2.0f},           // NaN at 0: nothing compares greater
      {1.0f, kNan, 2.0f, kNan},     // NaNs elsewhere never win
      {-kInf, -kInf, -kInf},        // no logit above -inf: id 0
      {-kInf, kNan, -kInf, 3.0f},   // the one finite logit
      {-0.0f, 0.0f, -1.0f},         // zeros tie: the first
      {kInf, 5.0f, kInf},           // infinities tie like any value
      std::vector<float>(40, kNan), // all NaN
      std::vector<float>(40, 2.5f), // all equal
  };
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(greedy(rows[r]), definition(rows[r])) << "row " << r;
  }
  // A NaN in every lane and the tail, the maximum in the tail.
  std::vector<float> row(37, 1.0f);
  for (size_t i = 1; i < row.size(); i += 3) {
    row[i] = kNan;
  }
  row[35] = 9.0f;
  EXPECT_EQ(greedy(row), 35);
  EXPECT_EQ(greedy(row), definition(row));
}

} // namespace
} // namespace glm::runtime

namespace glm::runtime {
namespace {

TEST(Sampler, SampledPicksAreTheDefinitionsWithTiesZerosAndEveryFilter) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (size_t vocab : {1u, 7u, 1000u, 4099u}) {
    // Logits on a coarse grid, so that most of them tie with others, and zeros of both signs.
    std::vector<float> row(vocab);
    for (size_t i = 0; i < vocab; ++i) {
      row[i] = std::round(normal(rng) * 2.0f) / 2.0f;
      if (row[i] == 0.0f && (i % 2) == 1) {
        row[i] = -0.0f;
      }
    }
    for (float temperature : {0.3f, 1.0f, 1.7f}) {
      for (int32_t topK : {0, 1, 5, 50, 999, 5000}) {
        for (float topP : {1.0f, 0.9f, 0.3f}) {
          for (float minP : {0.0f, 0.05f}) {
            const SamplingParams params{temperature, topP, topK, minP, 0x5EEDull + vocab};
            for (int64_t position = 0; position < 12; ++position) {
              ASSERT_EQ(sampleToken(row, params, position),
                        sampledDefinition(row, params, position))
                  << "vocab " << vocab << " T " << temperature << " top_k " << topK << " top_p "
                  << topP << " min_p " << minP << " position " << position;
            }
          }
        }
      }
    }
  }
}

TEST(Sampler, SampledPicksAmongZerosOfBothSignsFollowIdOrder) {
  // Every token equally likely: the draw's place in the order decides, and -0 ties +0.
  std::vector<float> row(64);
  for (size_t i = 0; i < row.size(); ++i) {
    row[i] = i % 2 == 0 ? 0.0f : -0.0f;
  }
  for (int32_t topK : {0, 2}) {
    const SamplingParams params{1.0f, 1.0f, topK, 0.0f, 9};
    for (int64_t position = 0; position < 32; ++position) {
      ASSERT_EQ(sampleToken(row, params, position), sampledDefinition(row, params, position))
          << "top_k " << topK << " position " << position;
    }
  }
}

TEST(Sampler, SampledPicksOnAFullVocabularyRowAreTheDefinitions) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(154880);
  for (float &x : row) {
    x = normal(rng);
  }
  for (int64_t position = 0; position < 4; ++position) {
    const SamplingParams params{1.0f, position % 2 == 0 ? 1.0f : 0.95f, 0, 0.0f, 42};
    EXPECT_EQ(sampleToken(row, params, position), sampledDefinition(row, params, position))
        << "position " << position;
  }
}

} // namespace
} // namespace glm::runtime
