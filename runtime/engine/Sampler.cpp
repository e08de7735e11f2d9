// The reference sampler; the on-device sampler must pick the same tokens.
#include "runtime/engine/Sampler.h"

#include "base/Random.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

namespace glm::runtime {

namespace {

/// The lowest id of the largest logit, as `best = i whenever logits[i] > logits[best]` from id 0
/// picks it: NaNs never win, and a NaN at id 0 keeps 0 (nothing compares greater). That loop waits
/// on its last compare at every step (128 us for a 154880-token row on this project's build
/// machine, a decode step's host work per sequence); kLanes independent running maxima, each
/// keeping its first id, let the compiler vectorize it (49 us), and the lanes then meet with ties
/// to the lower id.
int32_t argmaxLowestId(std::span<const float> logits) {
  const size_t vocab = logits.size();
  if (vocab == 0 || std::isnan(logits[0])) {
    return 0;
  }
  constexpr size_t kLanes = 16;
  float value[kLanes];
  int32_t id[kLanes];
  for (size_t k = 0; k < kLanes; ++k) {
    value[k] = -INFINITY;
    id[k] = -1; // nothing yet: an all -inf (or NaN) lane never wins
  }
  const size_t whole = vocab - vocab % kLanes;
  for (size_t i = 0; i < whole; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) {
      const bool greater = logits[i + k] > value[k];
      value[k] = greater ? logits[i + k] : value[k];
      id[k] = greater ? static_cast<int32_t>(i + k) : id[k];
    }
  }
  for (size_t i = whole; i < vocab; ++i) {
    const size_t k = i - whole;
    if (logits[i] > value[k]) {
      value[k] = logits[i];
      id[k] = static_cast<int32_t>(i);
    }
  }
  int32_t best = -1;
  float bestValue = -INFINITY;
  for (size_t k = 0; k < kLanes; ++k) {
    if (id[k] >= 0 &&
        (best < 0 || value[k] > bestValue || (value[k] == bestValue && id[k] < best))) {
      best = id[k];
      bestValue = value[k];
    }
  }
  // No logit above -inf: the loop's pick is id 0 (every later compare failed).
  return best < 0 ? 0 : best;
}

/// The first `count` token ids in the order std::stable_sort gives them with `logits[a] >
/// logits[b]`: descending logit, ties (-0 and +0 among them) to the lower id. Sorting 154880 ids
/// that way, each compare reading two logits, took 16 ms a row on this project's build machine,
/// a sampled token's host work for each sequence (4 ms with the radix sort, the exps now most of
/// it). A few ids: a partial sort on (logit, id). Most: an LSD radix sort on the logits' bits,
/// which is stable and so keeps equal logits in id order. NaNs have no place in that order (the
/// sort was undefined for them); here they go beyond the infinity of their sign.
std::vector<int32_t> descendingOrder(std::span<const float> logits, size_t count) {
  const size_t vocab = logits.size();
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  // The partial sort's cost grows with `count`, the radix sort's does not: on the build machine
  // they meet near 4000 of 154880 ids (2.1 ms each, whole sampleToken calls at top_k 4000).
  if (count < vocab / 40) {
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(count), ids.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (!(logits[b] > logits[a]) && a < b);
                      });
    ids.resize(count);
    return ids;
  }
  // Keys ascending in the wanted order: the float's bits made monotonic (negatives flipped, the
  // sign bit set on the rest), then complemented for descending; -0 first becomes +0.
  std::vector<uint32_t> keys(vocab), keysOut(vocab);
  std::vector<int32_t> idsOut(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &logits[i], sizeof bits);
    bits = bits == 0x80000000u ? 0u : bits;
    keys[i] = ~((bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u);
  }
  constexpr int kDigitBits = 11;
  constexpr uint32_t kBuckets = 1u << kDigitBits;
  std::vector<uint32_t> start(kBuckets);
  for (int shift = 0; shift < 32; shift += kDigitBits) {
    std::fill(start.begin(), start.end(), 0u);
    for (size_t i = 0; i < vocab; ++i) {
      ++start[(keys[i] >> shift) & (kBuckets - 1)];
    }
    uint32_t sum = 0;
    for (uint32_t &b : start) {
      sum += std::exchange(b, sum);
    }
    for (size_t i = 0; i < vocab; ++i) {
      const uint32_t at = start[(keys[i] >> shift) & (kBuckets - 1)]++;
      keysOut[at] = keys[i];
      idsOut[at] = ids[i];
    }
    keys.swap(keysOut);
    ids.swap(idsOut);
  }
  ids.resize(count);
  return ids;
}

} // namespace

int32_t sampleToken(std::span<const float> logits, const SamplingParams &params, int64_t position) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (params.temperature <= 0.0f) {
    return argmaxLowestId(logits);
  }
  // Tokens by descending logit, ties to the lower id: the order every filter and the draw use.
  size_t kept = static_cast<size_t>(vocab);
  if (params.topK > 0) {
    kept = std::min(kept, static_cast<size_t>(params.topK));
  }
  const std::vector<int32_t> order = descendingOrder(logits, kept);
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
