// Picking the next token from a row of logits: greedy, or temperature / top-k / top-p / min-p with
// randomness keyed by (seed, position), so a reply does not depend on what it was batched with.
#pragma once

#include <cstdint>
#include <span>

namespace glm::runtime {

struct SamplingParams {
  float temperature = 0.0f; // 0: greedy
  float topP = 1.0f;        // keep the most likely tokens until their mass reaches top_p
  int32_t topK = 0;         // 0: no limit
  float minP = 0.0f;        // drop tokens below min_p times the most likely one's probability
  uint64_t seed = 0;
};

/// The token for one row of logits at absolute position `position` of its sequence. Greedy picks
/// the largest logit (ties to the lower id). Otherwise the filters apply in the order top-k,
/// top-p, min-p to the tempered softmax, and one uniform draw from SplitMix64(seed, position)
/// picks a token by cumulative probability over the kept tokens in descending order.
int32_t sampleToken(std::span<const float> logits, const SamplingParams &params, int64_t position);

} // namespace glm::runtime
