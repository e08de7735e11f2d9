// The engine interface the server calls: submit a generation, read the load, ask the health.
// The scheduler implements it; the HTTP tests use a fake, so every endpoint is tested in-process
// without a model run. Nothing here knows the plan format, so the server builds without it.
#pragma once

#include "base/Status.h"
#include "runtime/api/SamplingParams.h"
#include "runtime/api/TokenConstraint.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace glm::runtime {

enum class FinishReason { Stop, Length, Cancelled, Error };

/// One token and its log-probability.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

/// A token the engine sampled. With SamplingParams::logprobs = k >= 0: its log-probability and the
/// k most likely tokens', most likely first (ties to the lower id); otherwise logprob is 0 and
/// top empty.
struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
  /// The MTP head's guess of the token after this one, or -1 (a plan without the head, or a
  /// token the engine did not draw in the step that guessed). Only a draft: speculative decoding
  /// verifies it.
  int32_t draft = -1;
};

/// One generation: the prompt's token ids and how to continue it.
struct SequenceRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t maxTokens = 16;
  int64_t minTokens = 0;  // end-of-sequence tokens are not sampled before this many (vLLM)
  bool ignoreEos = false; // an end-of-sequence token does not end the generation (vLLM)
  std::vector<int32_t> eosIds;
  /// Choices: the prompt is prefilled once and its state forked; choice i draws with the key
  /// sampling.seed + i, so it equals the n = 1 reply with that seed.
  int32_t n = 1;
  /// Structured outputs: the tokens each choice may sample, step by step (null: unconstrained).
  /// The scheduler clones it per choice; the prototype itself is never advanced.
  std::shared_ptr<const TokenConstraint> constraint;
  /// Speculative decoding may guess the next tokens and verify them in one step: the reply is the
  /// same token for token (a guess counts only where it equals the token the request's own
  /// sampling draws there). False: decoded one token a step, the serial reference.
  bool draft = true;
};

/// Where a request's tokens go, choice by choice (0 .. n-1). Called on the engine's thread:
/// implementations hand the work off and return quickly. onToken returning false cancels the
/// request (a client that went away): every choice of it ends Cancelled.
class TokenSink {
public:
  virtual ~TokenSink() = default;
  virtual bool onToken(int choice, const SampledToken &token) = 0;
  /// Called once per choice.
  virtual void onFinish(int choice, FinishReason reason, const Status &error) = 0;
  /// The first `tokens` tokens of the prompt came from a kept state instead of a prefill
  /// (usage.prompt_tokens_details.cached_tokens). Called at most once, before the first token.
  virtual void onPromptCached(int64_t /*tokens*/) {}
  /// The request left the waiting queue for a sequence slot: its prefill begins (the end of
  /// vLLM's queue time, the start of its prefill time). Called at most once, before any token.
  virtual void onScheduled() {}
  /// True once the consumer is gone. Asked of waiting requests, so that one whose client left
  /// is dropped before it costs a prefill. May be called from any thread.
  virtual bool cancelled() const { return false; }
};

struct SchedulerStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t finished = 0;
  int64_t generatedTokens = 0;
  int64_t preemptions = 0; // sequences that gave their state back to be recomputed
  // Prefix reuse, in tokens as vLLM counts them: prompt tokens looked up, and those found kept.
  int64_t prefixQueryTokens = 0;
  int64_t prefixHitTokens = 0;
  int64_t keptStates = 0; // kept prompt states held now
  /// The state pool's pages in use, 0 to 1 (vLLM's kv_cache_usage_perc): pages that only kept
  /// states hold count as free, as vLLM counts its cached blocks; 0 for a plan without a pool.
  double kvCacheUsage = 0.0;
  /// The state pool in tokens (/health's pool_tokens, pool_free_tokens): every page, and those
  /// no running sequence holds (free pages and pages only kept states hold, which give way to a
  /// new request). 0 for a plan without a pool.
  int64_t poolTokens = 0;
  int64_t poolFreeTokens = 0;
  // Speculative decoding, as vLLM counts it (vllm:spec_decode_*): verify rounds of a sequence that
  // carried drafts, the drafted tokens, those accepted, and those accepted by their position in
  // the round (acceptedPerPosition[0]: first drafts accepted; as long as the longest round).
  int64_t specDrafts = 0;
  int64_t specDraftTokens = 0;
  int64_t specAcceptedTokens = 0;
  std::vector<int64_t> specAcceptedPerPosition;
};

class EngineApi {
public:
  virtual ~EngineApi() = default;
  /// Unavailable when the engine cannot take more work now (the waiting queue is full);
  /// InvalidArgument naming the field when the request can never run here (n above the engine's
  /// sequence slots, a token id outside the vocabulary in logit_bias).
  virtual Status submit(SequenceRequest request, std::shared_ptr<TokenSink> sink) = 0;
  virtual SchedulerStats stats() const = 0;
  /// An error (shown on /health) while the engine cannot run, e.g. a missing tensor-parallel rank.
  virtual Status health() const { return Status::success(); }
};

} // namespace glm::runtime
