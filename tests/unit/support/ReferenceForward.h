// ReferenceModel: the GLM-5.3 text forward pass (glm53_arch.md §2.1-2.7) composed from the CPU
// reference kernels, all fp32, with per-sequence state for chunked prefill and decode. Test
// support: the runtime's CPU backend runs the same kernels from a plan.
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"
#include "kernels/dsa_indexer/dsa_indexer.h"
#include "kernels/mla_sparse_attention/mla_sparse_attention.h"
#include "kernels/moe_experts/moe_experts.h"
#include "models/glm53/Config.h"
#include "runtime/weights/SafeTensors.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

namespace glm::reference {

/// Everything one sequence carries from one forward call to the next.
struct SequenceState {
  struct Layer {
    // Linear-attention (KDA) layers: the short convs' last kernel − 1 inputs ([channels,
    // kernel − 1] each) and the recurrent state S [heads, dk, dv].
    std::vector<float> qConv, kConv, vConv;
    std::vector<float> recurrent;
    // Sparse-attention layers: MLA latents [length, rank], pooled index keys [pools, d] and the
    // open pool's raw index keys and gates [kpool, d]. The kernel cache structs point into these
    // vectors; their `length` fields are the layer's position.
    std::vector<float> latents;
    std::vector<float> poolKeys;
    std::vector<float> openKeys, openGates;
    kernels::MlaLatentCache mla;
    kernels::DsaIndexerCache indexer;
  };
  std::vector<Layer> layers;
  int64_t length = 0; // tokens consumed so far
};

/// What a forward call can record on the way, for comparisons with HF.
struct ForwardTrace {
  /// Per decoder layer, the hc streams entering it: [tokens, hc, hidden].
  std::vector<std::vector<float>> layerInputs;
  /// Per indexer call, in call order: [tokens, indexerWidth] absolute positions, −1 = none.
  std::vector<std::vector<int32_t>> indexerSelections;
  int64_t indexerWidth = 0;
  /// Per indexer call: every closed pool's score for each query, [tokens, stride] with the
  /// call's stride (closed pools after the call); −inf where a pool is not a candidate.
  std::vector<std::vector<float>> indexerScores;
  std::vector<int64_t> indexerScoreStrides;
};

class ReferenceModel {
public:
  /// Reads MODEL_DIR/config.json and maps the checkpoint; every tensor the forward pass needs is
  /// looked up here, so a missing one fails now, by name (the kernels check shapes on use).
  static Expected<std::unique_ptr<ReferenceModel>> load(const std::filesystem::path &modelDir);
  ~ReferenceModel();

  const glm53::Glm53Config &config() const { return config_; }

  SequenceState newSequence() const;

  /// How top-k ties are broken (indexer pools, router groups and experts). TorchCpu, the default,
  /// reproduces HF's CPU reference run exactly; LowerIndex is the serving kernels' contract.
  void setTieRule(kernels::TopkTieRule rule) { tieRule_ = rule; }

  /// Appends `tokens` to the sequence (a prefill chunk, or one decode token) and returns their
  /// logits, [tokens, vocab].
  Expected<std::vector<float>> forward(SequenceState &state, std::span<const int32_t> tokens,
                                       ForwardTrace *trace = nullptr) const;

  struct Weights; // resolved views into the checkpoint

private:
  ReferenceModel() = default;

  Status attention(int64_t layer, SequenceState::Layer &state, int64_t tokens, const float *x,
                   float *y, ForwardTrace *trace, std::vector<int32_t> &sharedSelection) const;
  Status linearAttention(int64_t layer, SequenceState::Layer &state, int64_t tokens, const float *x,
                         float *y) const;
  Status sparseAttention(int64_t layer, SequenceState::Layer &state, int64_t tokens, const float *x,
                         float *y, ForwardTrace *trace,
                         std::vector<int32_t> &sharedSelection) const;
  Status mlp(int64_t layer, int64_t tokens, const float *x, float *y) const;

  glm53::Glm53Config config_;
  kernels::TopkTieRule tieRule_ = kernels::TopkTieRule::TorchCpu;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Weights> weights_;
};

} // namespace glm::reference
