// sample: the CPU reference sampler (contract in sample.h). It is the CPU backend's sample step,
// and the tokens the GPU kernel must pick.
#include "kernels/sample/sample.h"

#include "kernels/argmax/argmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

namespace glm::kernels {

namespace {

/// The first `count` keys of the row in the sampler's order (orderKey, descending).
std::vector<uint64_t> descendingKeys(std::span<const float> logits, size_t count) {
  std::vector<uint64_t> keys(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    keys[i] = orderKey(logits[i], static_cast<int64_t>(i));
  }
  count = std::min(count, keys.size());
  std::partial_sort(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(count), keys.end(),
                    std::greater<uint64_t>());
  keys.resize(count);
  return keys;
}

} // namespace

void processLogitsRef(std::span<const float> logits, const SampleWords &p, const int32_t *bias,
                      const uint32_t *mask, const uint32_t *counts, std::span<float> out) {
  const size_t vocab = logits.size();
  for (size_t i = 0; i < vocab; ++i) {
    const bool allowed = mask == nullptr || ((mask[i / 32] >> (i % 32)) & 1u) != 0;
    out[i] = allowed ? logits[i] : -INFINITY;
  }
  for (int32_t e = 0; bias != nullptr && e < p.biasCount; ++e) {
    const int32_t id = bias[2 * e];
    float value = 0.0f;
    std::memcpy(&value, &bias[2 * e + 1], sizeof value);
    if (id >= 0 && static_cast<size_t>(id) < vocab) {
      out[static_cast<size_t>(id)] += value;
    }
  }
  if (counts != nullptr) {
    for (size_t i = 0; i < vocab; ++i) {
      out[i] = penalizedLogit(out[i], counts[i], p);
    }
  }
}

namespace {

/// The greedy token: the lowest id of the largest logit (argmax's rule).
int32_t greedyId(std::span<const float> logits) {
  int32_t id = 0;
  (void)argmaxRef({.logits = logits.data(),
                   .out = &id,
                   .rows = 1,
                   .vocab = static_cast<int64_t>(logits.size())});
  return id;
}

/// The drawn token (sample.h): top-k, then top-p, then min-p over integer weights in the order,
/// and one draw landing in the kept mass.
int32_t drawnId(std::span<const float> logits, const SampleWords &p, int64_t position) {
  size_t kept = logits.size();
  if (p.topK > 0) {
    kept = std::min(kept, static_cast<size_t>(p.topK));
  }
  const std::vector<uint64_t> order = descendingKeys(logits, kept);
  const float top = keyValue(order[0]), invT = inverseTemperature(p.temperature);
  std::vector<float> e(kept);
  std::vector<uint64_t> w(kept);
  uint64_t total = 0;
  for (size_t j = 0; j < kept; ++j) {
    e[j] = sampleExp(sampleDistance(keyValue(order[j]), top, invT));
    w[j] = sampleWeight(e[j]);
    total += w[j];
  }
  if (p.topP < 1.0f) {
    const auto target =
        static_cast<uint64_t>(static_cast<double>(p.topP) * static_cast<double>(total));
    uint64_t mass = 0;
    size_t n = 0;
    while (n < kept && (n == 0 || mass < target)) {
      mass += w[n++];
    }
    kept = n;
  }
  if (p.minP > 0.0f) {
    size_t n = 1;
    while (n < kept && e[n] >= p.minP) {
      ++n;
    }
    kept = n;
  }
  uint64_t mass = 0;
  for (size_t j = 0; j < kept; ++j) {
    mass += w[j];
  }
  if (mass == 0) {
    return keyId(order[0]);
  }
  const uint64_t seed = static_cast<uint64_t>(p.seedLo) | (static_cast<uint64_t>(p.seedHi) << 32);
  const uint64_t target = drawTarget(philoxBits53(seed, position), mass);
  uint64_t cumulative = 0;
  for (size_t j = 0; j < kept; ++j) {
    cumulative += w[j];
    if (cumulative > target) {
      return keyId(order[j]);
    }
  }
  return keyId(order[kept - 1]); // not reached: target < mass
}

} // namespace

SampledRow sampleRowRef(std::span<const float> logits, const SampleWords &p, int64_t position,
                        bool greedy) {
  SampledRow row;
  greedy = greedy || !(p.temperature > 0.0f);
  row.id = greedy ? greedyId(logits) : drawnId(logits, p, position);
  if (p.logprobs < 0) {
    return row;
  }
  // The distribution sampled from, before top-k / top-p / min-p: the tokens' weights over the
  // row's (T = 1 when greedy), each logprob its distance below the top less log Σ e.
  const float invT = inverseTemperature(greedy ? 1.0f : p.temperature);
  const size_t k = std::min<size_t>(static_cast<size_t>(p.logprobs), logits.size());
  const std::vector<uint64_t> top = descendingKeys(logits, std::max<size_t>(k, 1));
  const float max = keyValue(top[0]);
  uint64_t total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    total += sampleWeight(sampleExp(sampleDistance(logits[i], max, invT)));
  }
  const double lse = std::log(static_cast<double>(total)) - kSampleWeightBits * std::log(2.0);
  auto logprob = [&](float x) {
    return static_cast<float>(static_cast<double>(sampleDistance(x, max, invT)) - lse);
  };
  row.logprob = logprob(logits[static_cast<size_t>(row.id)]);
  for (size_t j = 0; j < k; ++j) {
    row.topIds.push_back(keyId(top[j]));
    row.topLogprobs.push_back(logprob(keyValue(top[j])));
  }
  return row;
}

Status sampleRef(const SampleArgs &a) {
  if (a.rows < 0 || a.vocab <= 0 || a.rowsPerSequence <= 0) {
    return invalidArgument("sample: rows must be >= 0, vocab and rows per sequence > 0");
  }
  constexpr int64_t kOut = 1 + kSampleTopLogprobs;
  const int64_t words = maskWords(a.vocab);
  std::vector<float> processed(static_cast<size_t>(a.vocab));
  for (int64_t r = 0; r < a.rows; ++r) {
    int32_t *ids = a.ids + r * kOut;
    float *logprobs = a.logprobs != nullptr ? a.logprobs + r * kOut : nullptr;
    std::fill(ids, ids + kOut, -1);
    if (logprobs != nullptr) {
      std::fill(logprobs, logprobs + kOut, 0.0f);
    }
    const int64_t position = a.positions != nullptr ? a.positions[r] : 0;
    if (position < 0) {
      ids[0] = 0; // padding row
      continue;
    }
    const int64_t b = r / a.rowsPerSequence;
    const SampleWords p = a.params != nullptr ? a.params[b] : SampleWords{};
    const int32_t slot = a.slots != nullptr ? a.slots[b] : -1;
    const uint32_t *counts = a.counts != nullptr && slot >= 0
                                 ? a.counts + static_cast<int64_t>(slot) * a.vocab
                                 : nullptr;
    const std::span<const float> logits(a.logits + r * a.vocab, static_cast<size_t>(a.vocab));
    processLogitsRef(logits, p, a.bias != nullptr ? a.bias + b * 2 * kSampleBiasEntries : nullptr,
                     a.mask != nullptr && p.hasMask ? a.mask + b * words : nullptr, counts,
                     processed);
    const SampledRow row = sampleRowRef(processed, p, position + 1, a.greedy);
    ids[0] = row.id;
    if (logprobs != nullptr && p.logprobs >= 0) {
      logprobs[0] = row.logprob;
      for (size_t j = 0; j < row.topIds.size(); ++j) {
        ids[1 + j] = row.topIds[j];
        logprobs[1 + j] = row.topLogprobs[j];
      }
    }
  }
  return Status::success();
}

} // namespace glm::kernels
