// moe_router: CPU reference of sigmoid scoring, bias-corrected group-limited top-k, and the
// renormalised, scaled expert weights.
#include "kernels/moe_router/moe_router.h"

#include "kernels/common/Math.h"

#include <algorithm>
#include <vector>

namespace glm::kernels {

namespace {

/// What the selection ranks: the values themselves, or, to replay torch, their fp32 roundings
/// (HF's router scores are an fp32 tensor).
std::vector<double> rankable(std::vector<double> values, TopkTieRule rule) {
  if (rule == TopkTieRule::TorchCpu) {
    for (double &v : values) {
      v = static_cast<float>(v);
    }
  }
  return values;
}

} // namespace

Status moeRouterRef(const MoeRouterArgs &a) {
  const int64_t ne = a.experts;
  if (a.tokens < 0 || a.hidden <= 0 || ne <= 0 || a.topK <= 0 || a.nGroup <= 0 ||
      a.topkGroup <= 0) {
    return invalidArgument("moe_router: tokens >= 0 and hidden, experts, top_k, n_group, "
                           "topk_group > 0 are required");
  }
  if (ne % a.nGroup != 0 || a.topkGroup > a.nGroup) {
    return invalidArgument("moe_router: n_group (", a.nGroup, ") must divide the ", ne,
                           " experts and be >= topk_group (", a.topkGroup, ")");
  }
  const int64_t groupSize = ne / a.nGroup;
  if (a.topK > a.topkGroup * groupSize) {
    return invalidArgument("moe_router: top_k (", a.topK, ") exceeds the ", a.topkGroup * groupSize,
                           " experts of the kept groups");
  }
  GLM_RETURN_IF_ERROR(checkWeight(a.weight, "router weight", {ne, a.hidden}));
  GLM_RETURN_IF_ERROR(checkOptionalWeight(a.correctionBias, "router correction bias", {ne}));
  std::vector<float> w(ne * a.hidden);
  a.weight.loadAll(w.data());
  std::vector<float> bias(ne, 0.0f);
  if (a.correctionBias.present()) {
    a.correctionBias.loadAll(bias.data());
  }

  std::vector<double> s(ne), choice(ne), groupScore(a.nGroup);
  for (int64_t t = 0; t < a.tokens; ++t) {
    const float *x = a.x + t * a.hidden;
    for (int64_t e = 0; e < ne; ++e) {
      s[e] = sigmoid(dot(x, w.data() + e * a.hidden, a.hidden));
      choice[e] = s[e] + bias[e];
      if (a.scores != nullptr) {
        a.scores[t * ne + e] = static_cast<float>(s[e]);
      }
    }
    if (a.nGroup > 1) {
      // Group score = sum of the group's top-2 biased scores (top-1 for one-expert groups).
      for (int64_t g = 0; g < a.nGroup; ++g) {
        std::vector<double> members(choice.begin() + g * groupSize,
                                    choice.begin() + (g + 1) * groupSize);
        double sum = 0.0;
        for (int64_t idx :
             topkIndices(members, std::min<int64_t>(2, groupSize), TopkTieRule::LowerIndex)) {
          sum += members[idx];
        }
        groupScore[g] = sum;
      }
      std::vector<bool> keep(a.nGroup, false);
      for (int64_t g : topkIndices(rankable(groupScore, a.tieRule), a.topkGroup, a.tieRule)) {
        keep[g] = true;
      }
      for (int64_t e = 0; e < ne; ++e) {
        if (!keep[e / groupSize]) {
          choice[e] = -INFINITY;
        }
      }
    }
    const std::vector<int64_t> chosen = topkIndices(rankable(choice, a.tieRule), a.topK, a.tieRule);
    double denominator = 1.0;
    if (a.normTopkProb) {
      denominator = 1e-20;
      for (int64_t e : chosen) {
        denominator += s[e];
      }
    }
    for (int64_t k = 0; k < a.topK; ++k) {
      a.expertIds[t * a.topK + k] = static_cast<int32_t>(chosen[k]);
      a.expertWeights[t * a.topK + k] =
          static_cast<float>(s[chosen[k]] / denominator * a.routedScalingFactor);
    }
  }
  return Status::success();
}

} // namespace glm::kernels
