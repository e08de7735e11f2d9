// moe_experts: the launch contract of the routed-expert mixture plus the shared expert (HF
// Glm5NextTextMoE after its router).
//
//   x              f32 [tokens, hidden]
//   expertIds      i32 [tokens, topK]        from moe_router
//   expertWeights  f32 [tokens, topK]        from moe_router
//   experts            [numExperts]          per expert: gate/up [inter, hidden], down [hidden,
//   inter] shared             optional              the shared expert: gate/up [sharedInter,
//   hidden],
//                                            down [hidden, sharedInter]
//   out            f32 [tokens, hidden]      must not alias x
//
//   out[t] = Σ_k expertWeights[t][k] · SwiGLU_{expertIds[t][k]}(x[t])  +  SwiGLU_shared(x[t])
// with the clamped SwiGLU of swiglu.h (limit = swiglu_limit). The shared expert is added unscaled
// (routed_scaling_factor is already inside expertWeights). Experts are visited in increasing id, as
// HF's eager loop does, each over the tokens routed to it.
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"
#include "kernels/exl3/exl3.h"

#include <cmath>
#include <cstdint>
#include <functional>

namespace glm::kernels {

struct ExpertWeights {
  WeightView gate;
  WeightView up;
  WeightView down;
};

struct MoeExpertsArgs {
  const float *x = nullptr;
  const int32_t *expertIds = nullptr;
  const float *expertWeights = nullptr;
  const ExpertWeights *experts = nullptr; // [numExperts]
  /// Optional: gives expert e's weights just before its tokens run, instead of experts[e] (which
  /// may then be null). EXL3 experts decode here, one expert at a time.
  std::function<Status(int64_t e, ExpertWeights &weights)> resolveExpert;
  const ExpertWeights *shared = nullptr; // optional
  float *out = nullptr;
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t numExperts = 0;
  int64_t topK = 0;
  int64_t intermediate = 0;       // moe_intermediate_size
  int64_t sharedIntermediate = 0; // moe_intermediate_size · n_shared_experts
  float swigluLimit = INFINITY;
};

Status moeExpertsRef(const MoeExpertsArgs &args);

/// The routed experts of moe_experts.h with some or all projections in EXL3: each of gate, up and
/// down is either an EXL3 matrix per expert (exl3Gate etc., [numExperts]) or, when that pointer is
/// null, the dense view in moe.experts. Every routed expert's EXL3 matrices are reconstructed to
/// bf16 one expert at a time and multiplied exactly as moeExpertsRef multiplies a dense
/// checkpoint, so the sum is that of the dequantized checkpoint, bit for bit.
struct Exl3MoeExpertsArgs {
  MoeExpertsArgs moe;
  const Exl3MatrixView *exl3Gate = nullptr;
  const Exl3MatrixView *exl3Up = nullptr;
  const Exl3MatrixView *exl3Down = nullptr;
};
Status exl3MoeExpertsRef(const Exl3MoeExpertsArgs &args);

} // namespace glm::kernels
