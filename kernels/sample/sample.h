// sample: the launch contract of the sampler (the plan's `sample` op), and its CPU reference.
// The kernel (sample.cuh, launch rule in sample_gpu.h) must pick the tokens sampleRef picks.
//
//   logits     f32 [rows, vocab]            the head's logits
//   positions  i32 [rows]                   StepContext: row r's absolute position; the token
//                                           drawn follows it, at positions[r] + 1 (negative:
//                                           padding, ids[r][0] = 0)
//   slots      i32 [batch]                  StepContext: sequence b's state slot
//   params     SampleWords [batch]          the sampling_params io slot (sample_params.h)
//   bias       i32 [batch, 2 · 300]         the logit_bias io slot: (id, f32 bits) pairs, sorted by
//                                           id, params.biasCount of them
//   mask       u32 [batch, ⌈vocab / 32⌉]    the token_mask io slot, read when params.hasMask
//   counts     u32 [max_seqs, vocab]        the token_counts state (count_tokens writes it)
//   ids        i32 [rows, 21]               the sampled id, then the k most likely ids
//   logprobs   f32 [rows, 21]               their log-probabilities
// Row r uses sequence b = r / rowsPerSequence's parameters.
//
// The processed logit of token i (vLLM's order): -inf when a mask applies and does not allow i;
// plus its logit_bias; then penalizedLogit with the sequence's count of i. Then, in the order
// processed logit desc, id asc (orderKey: -0 ties +0, NaNs last):
//   greedy (the op's `greedy` attribute, or temperature <= 0): the first token of the order, i.e.
//     the lowest id of the largest processed logit (NaNs never win; id 0 when all are NaN).
//   otherwise each token weighs w_i = sampleWeight(e_i), e_i = sampleExp((l_i - l_0) · (1/T)) (f32,
//     sample_params.h; e_0 = 1): fixed-point integers, whose sums are exact in any order. Keep the
//     first top_k (0: all); with top_p < 1 keep the shortest prefix whose weight reaches
//     floor(top_p · W) (W the kept weight; at least one token); with min_p > 0 keep tokens while
//     e_i >= min_p. The draw lands at D = floor(u · M), M the kept weight and u =
//     philoxBits53(seed, positions[r] + 1) / 2^53, and picks the first kept token whose running
//     weight exceeds D (the first token when M is 0).
// Logprobs (params.logprobs = k >= 0) are those of the distribution sampled from before its
// truncation: (l_i - l_0) · (1/T) - log(Σ_j e_j) over the whole row (T = 1 when greedy), the sum
// taken over the weights; ids[r][1..k] are the first k tokens of the order and logprobs[r][1..k]
// theirs. Entries past k are id -1, logprob 0.
//
// Agreement. Every quantity a pick depends on is an integer or an f32 each side rounds alike (no
// fused multiply-add, -ffp-contract=off on the host), so the GPU picks exactly the reference's
// tokens, in any batch and whatever the order of its sums. Logprobs take a double log, which may
// differ by an ulp.
#pragma once

#include "base/Status.h"
#include "kernels/sample/sample_params.h"

#include <cstdint>
#include <span>
#include <vector>

namespace glm::kernels {

struct SampleArgs {
  const float *logits = nullptr;
  const int32_t *positions = nullptr;
  const int32_t *slots = nullptr;
  const SampleWords *params = nullptr;
  const int32_t *bias = nullptr;
  const uint32_t *mask = nullptr;
  const uint32_t *counts = nullptr;
  int32_t *ids = nullptr;
  float *logprobs = nullptr;
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t rowsPerSequence = 1;
  bool greedy = false;
};

/// The reference sampler over every row.
Status sampleRef(const SampleArgs &args);

/// One row's processed logits: `logits` masked, biased and penalized as the contract says.
/// `counts` is the sequence's row of the token_counts state (null: no tokens seen).
void processLogitsRef(std::span<const float> logits, const SampleWords &params, const int32_t *bias,
                      const uint32_t *mask, const uint32_t *counts, std::span<float> out);

/// What one row yields: the sampled id and, when asked, logprobs (entry 0 the sampled token's).
struct SampledRow {
  int32_t id = 0;
  std::vector<int32_t> topIds;
  std::vector<float> topLogprobs;
  float logprob = 0.0f;
};
/// The token drawn from processed logits for the token at `position` (the row's position + 1).
SampledRow sampleRowRef(std::span<const float> processed, const SampleWords &params,
                        int64_t position, bool greedy = false);

} // namespace glm::kernels
