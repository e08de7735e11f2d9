// The reference sampler; the on-device sampler must pick the same tokens.
#include "runtime/engine/Sampler.h"

#include "runtime/common/Random.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace glm::runtime {

int32_t sampleToken(std::span<const float> logits, const SamplingParams &params, int64_t position) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (params.temperature <= 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i) {
      if (logits[i] > logits[best]) {
        best = i;
      }
    }
    return best;
  }
  // Tokens by descending logit, ties to the lower id: the order every filter and the draw use.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t kept = order.size();
  if (params.topK > 0) {
    kept = std::min(kept, static_cast<size_t>(params.topK));
  }
  std::vector<double> probs(kept);
  const double top = logits[order[0]] / static_cast<double>(params.temperature);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    probs[i] = std::exp(logits[order[i]] / static_cast<double>(params.temperature) - top);
    total += probs[i];
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
  // One draw per (seed, position), independent of the batch.
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

} // namespace glm::runtime
