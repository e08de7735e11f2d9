// The sampling settings of one request, as the server sets them and the sampler applies them
// (kernels/sample/sample.h defines the order and arithmetic both backends follow).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace glm::runtime {

/// The most alternatives a sampled token reports (OpenAI's top_logprobs cap).
inline constexpr int32_t kMaxTopLogprobs = 20;
/// The most logit_bias entries a request may carry (OpenAI's cap).
inline constexpr int32_t kMaxLogitBias = 300;

struct SamplingParams {
  float temperature = 0.0f; // 0: greedy
  float topP = 1.0f;        // keep the most likely tokens until their mass reaches top_p
  int32_t topK = 0;         // 0: no limit
  float minP = 0.0f;        // drop tokens below min_p times the most likely one's probability
  // Penalties over the tokens seen so far (OpenAI's and vLLM's definitions): presence and
  // frequency count generated tokens only; repetition covers the prompt and generated tokens.
  float presencePenalty = 0.0f;
  float frequencyPenalty = 0.0f;
  float repetitionPenalty = 1.0f; // > 0; 1: off
  /// The key of the draws: the token at position p is drawn from Philox(seed, p) alone.
  uint64_t seed = 0;
  /// Added to the listed tokens' logits; ids distinct and inside the vocabulary, at most
  /// kMaxLogitBias entries.
  std::vector<std::pair<int32_t, float>> logitBias;
  /// -1: no logprobs; k in [0, kMaxTopLogprobs]: the sampled token's logprob and the k most
  /// likely tokens' (of the distribution sampled from, before top-k / top-p / min-p).
  int32_t logprobs = -1;
  /// The tokens that may be sampled, bit i % 32 of word i / 32 for token i; empty: all. The hook
  /// structured outputs set per step.
  std::vector<uint32_t> allowedTokens;
};

} // namespace glm::runtime
