// Picking the next token from a row of logits: greedy, or temperature / top-k / top-p / min-p with
// randomness keyed by (seed, position), so a reply does not depend on what it was batched with.
#pragma once

#include "runtime/api/SamplingParams.h"

#include <cstdint>
#include <span>

namespace glm::runtime {

/// The token for one row of logits at absolute position `position` of its sequence. Greedy picks
/// the largest logit (ties to the lower id). Otherwise the filters apply in the order top-k,
/// top-p, min-p to the tempered softmax, and one uniform draw from SplitMix64(seed, position)
/// picks a token by cumulative probability over the kept tokens in descending order.
int32_t sampleToken(std::span<const float> logits, const SamplingParams &params, int64_t position);

} // namespace glm::runtime
