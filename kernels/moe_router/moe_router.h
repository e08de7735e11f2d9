// moe_router: the launch contract of the noaux_tc sigmoid router (HF Glm5NextTextTopkRouter).
//
//   x               f32 [tokens, hidden]
//   weight              [experts, hidden]       mlp.gate.weight
//   correctionBias      [experts]               e_score_correction_bias (optional)
//   expertIds       i32 [tokens, topK]          chosen experts, by descending biased score
//   expertWeights   f32 [tokens, topK]          their mixing weights
//   scores          f32 [tokens, experts]       optional: the sigmoid scores
//
//   s      = sigmoid(x Wᵀ)                      fp32 logits (moe_router_dtype float32)
//   b      = s + correctionBias                 used only to choose
//   groups (nGroup > 1, DeepSeek-V3 group-limited routing): the experts split into nGroup equal
//          consecutive groups; a group's score is the sum of its two highest b; the topkGroup
//          groups of highest score stay, every other expert is out
//   E      = the topK remaining experts of highest b
//   w_e    = s_e / (Σ_{E} s + 1e-20) · routedScalingFactor    (normTopkProb)
//          = s_e · routedScalingFactor                        (otherwise)
// Ties (groups and experts) go to the lower index (tieRule LowerIndex, the contract), or to the
// ones torch.topk keeps on CPU (TorchCpu, for golden comparisons); torch leaves them unspecified.
#pragma once

#include "base/Status.h"
#include "kernels/common/TopK.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

struct MoeRouterArgs {
  const float *x = nullptr;
  WeightView weight;
  WeightView correctionBias;
  int32_t *expertIds = nullptr;
  float *expertWeights = nullptr;
  float *scores = nullptr; // optional
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t experts = 0;
  int64_t topK = 0;
  int64_t nGroup = 1;
  int64_t topkGroup = 1;
  bool normTopkProb = true;
  float routedScalingFactor = 1.0f;
  TopkTieRule tieRule = TopkTieRule::LowerIndex;
};

Status moeRouterRef(const MoeRouterArgs &args);

} // namespace glm::kernels
