// Parameter counts, weight bytes read per decoded token, and decode-state sizes of a GLM-5.3 model.
#pragma once

#include "models/glm53/Weights.h"

#include <cstdint>
#include <map>
#include <vector>

namespace glm::glm53 {

struct ParameterCounts {
  int64_t trunk = 0;       // layers 0..N-1, embedding, final norm, head
  int64_t trunkRouted = 0; // of which routed experts
  int64_t mtp = 0;         // the MTP layer (it shares embedding and head with the trunk)
  int64_t mtpRouted = 0;
  int64_t vision = 0;
  int64_t total = 0;
  /// Trunk parameters one token touches: everything but the routed experts, plus
  /// num_experts_per_tok experts in every MoE layer (the whole embedding table counted, as usual).
  int64_t activePerToken = 0;
  std::map<Component, int64_t> trunkByComponent;
};

/// Every count here is exact or an error: a parsed config's ranges (Config.h) keep them far inside
/// 64 bits, so the errors are for configs built past those ranges by hand.
Expected<ParameterCounts> countParameters(const Glm53Config &config,
                                          const std::vector<WeightInfo> &table);

/// Weight bytes one decode step at batch 1 reads: every non-routed trunk weight except the
/// embedding table, one embedding row, and num_experts_per_tok routed experts per MoE layer.
struct DecodeWeightBytes {
  uint64_t asStored = 0;        // at the checkpoint's dtypes (the release's when only config.json)
  uint64_t with4BitExperts = 0; // the same with routed experts at exactly 4 bits per weight
  uint64_t mtpAsStored = 0;     // one MTP draft step on top (its layer plus the shared head)
  uint64_t mtpWith4BitExperts = 0;
};

/// `storedBytes`, when given, holds each table tensor's bytes as stored (CheckpointCheck);
/// otherwise every tensor counts at its release dtype.
Expected<DecodeWeightBytes> decodeWeightBytes(const Glm53Config &config,
                                              const std::vector<WeightInfo> &table,
                                              const std::vector<uint64_t> *storedBytes);

/// Decode state, minimal exact layout (reference/glm53_arch.md §3).
struct StateBytes {
  /// KDA recurrent state (fp32, heads x dk x dv) and conv window (bf16, kernel-1 past inputs of
  /// q, k and v) of every linear-attention layer: constant in the sequence length.
  uint64_t kdaPerSequence = 0;
  /// Per token, all sparse-attention layers: the bf16 MLA latent row and the share of a bf16
  /// pooled index key.
  uint64_t dsaPerToken = 0;
  /// The open pool's raw indexer keys and gates (kpool-1 tokens, bf16), per sequence.
  uint64_t dsaTailPerSequence = 0;
  /// The MTP layer's own latent + pooled-key cache per token, when drafting.
  uint64_t mtpPerToken = 0;

  uint64_t perSequence(uint64_t tokens) const {
    return kdaPerSequence + dsaTailPerSequence + dsaPerToken * tokens;
  }
};

Expected<StateBytes> stateBytes(const Glm53Config &config);

} // namespace glm::glm53
