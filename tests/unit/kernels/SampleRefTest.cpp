// The reference sampler (kernels/sample/sample.h) against its definition, written out here as
// plainly as the contract reads. Greedy: the loop `best = i whenever logits[i] > logits[best]`
// from id 0, NaNs never winning (argmax's rule). Sampled: std::stable_sort by descending logit,
// then the filters and the Philox draw in double; the sampler orders by a radix sort or a partial
// sort instead, so the rows are full of ties (and of -0 beside +0) and top-k takes both paths.
// Processing: mask, logit_bias and the penalties from OpenAI's and vLLM's definitions. Logprobs:
// a log-softmax that sums to one. The draws: their frequencies are the processed distribution's.
#include "kernels/count_tokens/count_tokens.h"
#include "kernels/sample/sample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace glm::kernels {
namespace {

uint64_t seedOf(const SampleWords &p) {
  return static_cast<uint64_t>(p.seedLo) | (static_cast<uint64_t>(p.seedHi) << 32);
}

SampleWords words(float temperature, float topP, int32_t topK, float minP, uint64_t seed) {
  SampleWords p{};
  p.temperature = temperature;
  p.topP = topP;
  p.topK = topK;
  p.minP = minP;
  p.seedLo = static_cast<uint32_t>(seed);
  p.seedHi = static_cast<uint32_t>(seed >> 32);
  p.logprobs = -1;
  return p;
}

TEST(SampleRef, PhiloxMatchesTheKnownAnswers) {
  // Random123's known-answer vectors for philox4x32-10.
  struct Case {
    uint32_t ctr[4], key[2], out[4];
  };
  const Case cases[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case &c : cases) {
    uint32_t ctr[4] = {c.ctr[0], c.ctr[1], c.ctr[2], c.ctr[3]};
    philox4x32(ctr, c.key);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(ctr[i], c.out[i]) << "word " << i << " of the case with key " << c.key[0];
    }
  }
  // The draw is a function of (seed, position) alone, 53 bits.
  EXPECT_EQ(philoxBits53(7, 3), philoxBits53(7, 3));
  EXPECT_NE(philoxBits53(7, 3), philoxBits53(7, 4));
  EXPECT_NE(philoxBits53(7, 3), philoxBits53(8, 3));
  EXPECT_LT(philoxBits53(7, 3), uint64_t{1} << 53);
}

TEST(SampleRef, TheSamplersExpIsExpWithinItsBound) {
  EXPECT_EQ(sampleExp(0.0f), 1.0f);
  EXPECT_EQ(sampleExp(-100.0f), 0.0f);
  EXPECT_EQ(sampleExp(std::numeric_limits<float>::quiet_NaN()), 0.0f);
  // Within 4e-6 where a weight is non-zero (e above 2^-40, d above -27.8); the f32 product
  // d · log2 e loses more of d's bits further out.
  for (float d = -86.0f; d <= 0.0f; d += 0.0137f) {
    const double want = std::exp(static_cast<double>(d));
    EXPECT_NEAR(sampleExp(d), want, (d > -28.0f ? 4e-6 : 1.2e-5) * want) << "d " << d;
  }
}

int32_t definition(const std::vector<float> &logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[i]))) {
      best = i;
    }
  }
  return best;
}

int32_t sampledDefinition(const std::vector<float> &logits, const SampleWords &params,
                          int64_t position) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t kept = order.size();
  if (params.topK > 0) {
    kept = std::min(kept, static_cast<size_t>(params.topK));
  }
  // Weights: the sampler's exp of the distance below the top over T, in 2^-40 units.
  const float top = logits[order[0]];
  std::vector<float> e(kept);
  std::vector<uint64_t> w(kept);
  uint64_t total = 0;
  for (size_t i = 0; i < kept; ++i) {
    const float x = logits[order[i]];
    e[i] = sampleExp(x == top ? 0.0f : (x - top) * (1.0f / params.temperature));
    w[i] = static_cast<uint64_t>(std::ldexp(static_cast<double>(e[i]), 40));
    total += w[i];
  }
  if (params.topP < 1.0f) {
    const auto target = static_cast<uint64_t>(static_cast<double>(params.topP) * total);
    uint64_t mass = 0;
    size_t n = 0;
    while (n < kept && (n == 0 || mass < target)) {
      mass += w[n++];
    }
    kept = n;
  }
  if (params.minP > 0.0f) {
    size_t n = 1;
    while (n < kept && e[n] >= params.minP) {
      ++n;
    }
    kept = n;
  }
  uint64_t mass = 0;
  for (size_t i = 0; i < kept; ++i) {
    mass += w[i];
  }
  // floor(u · mass), u the draw's 53 bits over 2^53.
  const unsigned __int128 product =
      static_cast<unsigned __int128>(philoxBits53(seedOf(params), position)) * mass;
  const auto target = static_cast<uint64_t>(product >> 53);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += w[i];
    if (target < cumulative) {
      return order[i];
    }
  }
  return order[kept - 1];
}

int32_t greedy(const std::vector<float> &logits) {
  return sampleRowRef(logits, SampleWords{}, 0).id;
}

int32_t sampled(const std::vector<float> &logits, const SampleWords &params, int64_t position) {
  return sampleRowRef(logits, params, position).id;
}

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SampleRef, GreedyPicksTheLowestIdOfTheLargestLogitWhereverItLies) {
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

TEST(SampleRef, GreedyFollowsTheLoopOnNansInfinitiesAndZeros) {
  const std::vector<std::vector<float>> rows = {
      {kNan, 1.0f, 2.0f},           // NaN at 0 never wins either
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

TEST(SampleRef, SampledPicksAreTheDefinitionsWithTiesZerosAndEveryFilter) {
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
            const SampleWords params = words(temperature, topP, topK, minP, 0x5EEDull + vocab);
            for (int64_t position = 0; position < 12; ++position) {
              ASSERT_EQ(sampled(row, params, position), sampledDefinition(row, params, position))
                  << "vocab " << vocab << " T " << temperature << " top_k " << topK << " top_p "
                  << topP << " min_p " << minP << " position " << position;
            }
          }
        }
      }
    }
  }
}

TEST(SampleRef, SampledPicksAmongZerosOfBothSignsFollowIdOrder) {
  // Every token equally likely: the draw's place in the order decides, and -0 ties +0.
  std::vector<float> row(64);
  for (size_t i = 0; i < row.size(); ++i) {
    row[i] = i % 2 == 0 ? 0.0f : -0.0f;
  }
  for (int32_t topK : {0, 2}) {
    const SampleWords params = words(1.0f, 1.0f, topK, 0.0f, 9);
    for (int64_t position = 0; position < 32; ++position) {
      ASSERT_EQ(sampled(row, params, position), sampledDefinition(row, params, position))
          << "top_k " << topK << " position " << position;
    }
  }
}

TEST(SampleRef, SampledPicksOnAFullVocabularyRowAreTheDefinitions) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(154880);
  for (float &x : row) {
    x = normal(rng);
  }
  for (int64_t position = 0; position < 4; ++position) {
    const SampleWords params = words(1.0f, position % 2 == 0 ? 1.0f : 0.95f, 0, 0.0f, 42);
    EXPECT_EQ(sampled(row, params, position), sampledDefinition(row, params, position))
        << "position " << position;
  }
}

// OpenAI: logit[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty over generated
// tokens. vLLM: repetition_penalty divides positive logits and multiplies the others of every
// token the prompt or the output holds; logit_bias adds first; a mask sets disallowed to -inf.
std::vector<float> plainProcessed(std::vector<float> logits, const std::vector<int> &generated,
                                  const std::vector<bool> &inPrompt, float presence,
                                  float frequency, float repetition,
                                  const std::vector<std::pair<int32_t, float>> &bias,
                                  const std::vector<bool> &allowed) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!allowed.empty() && !allowed[i]) {
      logits[i] = -std::numeric_limits<float>::infinity();
    }
  }
  for (const auto &[id, b] : bias) {
    logits[static_cast<size_t>(id)] += b;
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    if (inPrompt[i] || generated[i] > 0) {
      logits[i] = logits[i] > 0 ? logits[i] / repetition : logits[i] * repetition;
    }
    if (generated[i] > 0) {
      logits[i] = logits[i] - frequency * static_cast<float>(generated[i]);
      logits[i] = logits[i] - presence;
    }
  }
  return logits;
}

TEST(SampleRef, ProcessingIsMaskThenBiasThenThePenaltiesOfOpenAiAndVllm) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const size_t vocab = 300;
  std::vector<float> logits(vocab);
  for (float &x : logits) {
    x = normal(rng);
  }
  // A sequence's tokens: counts and prompt bits as count_tokens keeps them.
  std::vector<int> generated(vocab, 0);
  std::vector<bool> inPrompt(vocab, false);
  std::vector<uint32_t> counts(vocab, 0);
  for (int k = 0; k < 200; ++k) {
    const size_t id = rng() % vocab;
    if (k < 80) {
      inPrompt[id] = true;
      counts[id] |= kPromptSeenBit;
    } else {
      ++generated[id];
      ++counts[id];
    }
  }
  const std::vector<std::pair<int32_t, float>> bias = {{3, 5.0f}, {17, -100.0f}, {299, 0.25f}};
  std::vector<int32_t> biasWords;
  for (const auto &[id, b] : bias) {
    int32_t bits = 0;
    std::memcpy(&bits, &b, sizeof bits);
    biasWords.insert(biasWords.end(), {id, bits});
  }
  std::vector<bool> allowed(vocab);
  std::vector<uint32_t> mask(static_cast<size_t>(maskWords(vocab)), 0);
  for (size_t i = 0; i < vocab; ++i) {
    allowed[i] = i % 7 != 0;
    mask[i / 32] |= allowed[i] ? 1u << (i % 32) : 0u;
  }
  for (float presence : {0.0f, 0.5f, -1.5f}) {
    for (float frequency : {0.0f, 0.3f, 2.0f}) {
      for (float repetition : {1.0f, 1.3f, 0.7f}) {
        SampleWords p = words(1.0f, 1.0f, 0, 0.0f, 1);
        p.presence = presence;
        p.frequency = frequency;
        p.repetition = repetition;
        p.biasCount = static_cast<int32_t>(bias.size());
        p.hasMask = 1;
        std::vector<float> out(vocab);
        processLogitsRef(logits, p, biasWords.data(), mask.data(), counts.data(), out);
        const std::vector<float> expected = plainProcessed(logits, generated, inPrompt, presence,
                                                           frequency, repetition, bias, allowed);
        for (size_t i = 0; i < vocab; ++i) {
          ASSERT_EQ(out[i], expected[i])
              << "token " << i << " presence " << presence << " frequency " << frequency
              << " repetition " << repetition;
        }
        // Greedy over the processed row is its argmax.
        EXPECT_EQ(sampleRowRef(out, SampleWords{}, 0).id, definition(expected));
      }
    }
  }
}

TEST(SampleRef, LogprobsAreALogSoftmaxOverTemperatureWithTheTopKSorted) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> row(20);
  for (float &x : row) {
    x = std::round(normal(rng) * 4.0f) / 4.0f; // ties, broken by the lower id
  }
  for (float temperature : {0.0f, 0.6f, 1.0f}) {
    SampleWords p = words(temperature, 0.9f, 0, 0.0f, 77);
    p.logprobs = 20;
    const SampledRow r = sampleRowRef(row, p, 5);
    ASSERT_EQ(r.topIds.size(), 20u);
    const double t = temperature > 0 ? temperature : 1.0;
    double mass = 0.0;
    for (size_t j = 0; j < r.topIds.size(); ++j) {
      EXPECT_LE(r.topLogprobs[j], 0.0f);
      if (j > 0) {
        EXPECT_GE(r.topLogprobs[j - 1], r.topLogprobs[j]);
        if (r.topLogprobs[j - 1] == r.topLogprobs[j]) {
          EXPECT_LT(r.topIds[j - 1], r.topIds[j]) << "ties go to the lower id";
        }
      }
      mass += std::exp(static_cast<double>(r.topLogprobs[j]));
      // Each logprob is its logit over T less the log-sum-exp.
      EXPECT_NEAR(r.topLogprobs[j] - r.topLogprobs[0],
                  (row[static_cast<size_t>(r.topIds[j])] - row[static_cast<size_t>(r.topIds[0])]) /
                      t,
                  1e-5);
    }
    EXPECT_NEAR(mass, 1.0, 1e-5) << "every token listed: the probabilities sum to one";
    const auto at = std::find(r.topIds.begin(), r.topIds.end(), r.id);
    ASSERT_NE(at, r.topIds.end());
    EXPECT_EQ(r.logprob, r.topLogprobs[static_cast<size_t>(at - r.topIds.begin())]);
    // The pick is the one without logprobs.
    SampleWords plain = p;
    plain.logprobs = -1;
    EXPECT_EQ(r.id, sampleRowRef(row, plain, 5).id);
  }
}

TEST(SampleRef, DrawsFollowTheProcessedDistribution) {
  // Eight tokens at temperature 0.8 with top_p 0.95: over 40000 positions the frequencies of
  // the kept tokens pass a chi-square test against their renormalised probabilities (the draws
  // are a fixed function of the positions, so this is deterministic).
  const std::vector<float> row = {2.0f, 1.5f, 1.4f, 0.3f, -0.2f, -1.0f, -3.0f, -6.0f};
  SampleWords p = words(0.8f, 0.95f, 0, 0.0f, 2024);
  std::vector<double> probs(row.size());
  double total = 0.0;
  for (size_t i = 0; i < row.size(); ++i) {
    total += probs[i] = std::exp((row[i] - row[0]) / 0.8);
  }
  size_t kept = 0;
  double mass = 0.0;
  while (kept < row.size() && (kept == 0 || mass < 0.95)) {
    mass += probs[kept++] / total;
  }
  std::vector<int64_t> seen(row.size(), 0);
  const int64_t draws = 40000;
  for (int64_t position = 0; position < draws; ++position) {
    ++seen[static_cast<size_t>(sampleRowRef(row, p, position).id)];
  }
  double chi2 = 0.0;
  for (size_t i = 0; i < row.size(); ++i) {
    if (i >= kept) {
      EXPECT_EQ(seen[i], 0) << "token " << i << " is cut by top_p";
      continue;
    }
    const double expected = static_cast<double>(draws) * probs[i] / total / mass;
    chi2 += (static_cast<double>(seen[i]) - expected) * (static_cast<double>(seen[i]) - expected) /
            expected;
  }
  // The 0.999 quantile of chi-square with kept - 1 <= 6 degrees of freedom is at most 22.46.
  EXPECT_LT(chi2, 22.46) << kept << " tokens kept";
}

TEST(CountTokensRef, PromptTokensSetTheirBitAndGeneratedOnesCount) {
  // Two sequences in slots 1 and 0; sequence 0's prompt ends at position 3.
  const int64_t vocab = 10;
  const std::vector<int32_t> tokens = {4, 4, 7, 4, 9, 9, 2, 5};
  const std::vector<int32_t> positions = {0, 1, 2, 3, 4, 5, -1, 0};
  const std::vector<int32_t> slots = {1, 0};
  SampleWords params[2] = {};
  params[0].promptTokens = 3;
  params[1].promptTokens = 0;
  std::vector<uint32_t> counts(2 * vocab, 0);
  ASSERT_TRUE(countTokensRef({.tokens = tokens.data(),
                              .positions = positions.data(),
                              .slots = slots.data(),
                              .params = params,
                              .counts = counts.data(),
                              .rows = 8,
                              .rowsPerSequence = 4,
                              .vocab = vocab})
                  .ok());
  // Sequence 0 (slot 1): 4 and 4 and 7 in the prompt, then 4 generated.
  EXPECT_EQ(counts[vocab + 4], kPromptSeenBit | 1u);
  EXPECT_EQ(counts[vocab + 7], kPromptSeenBit);
  // Sequence 1 (slot 0): 9, 9 generated; the padding row's 2 is not counted; 5 generated.
  EXPECT_EQ(counts[9], 2u);
  EXPECT_EQ(counts[2], 0u);
  EXPECT_EQ(counts[5], 1u);
}

} // namespace
} // namespace glm::kernels
