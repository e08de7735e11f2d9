// swiglu: the launch contract of GLM-5.3's clamped SwiGLU MLP (HF Glm5NextTextMLP): the dense MLP
// of the first layers, the shared expert, and each routed expert.
//
//   x       f32 [tokens, hidden]
//   gate        [inter, hidden]      gate_proj.weight
//   up          [inter, hidden]      up_proj.weight
//   down        [hidden, inter]      down_proj.weight
//   out     f32 [tokens, hidden]     must not alias x
//
//   a   = min(x Wgᵀ, limit)               the gate is clamped from above only
//   b   = clamp(x Wuᵀ, −limit, limit)     the up projection both ways
//   out = (silu(a) ⊙ b) Wdᵀ
// limit = swiglu_limit; +inf disables the clamps.
#pragma once

#include "kernels/common/WeightView.h"
#include "runtime/common/Status.h"

#include <cmath>
#include <cstdint>

namespace glm::kernels {

struct SwigluArgs {
  const float *x = nullptr;
  WeightView gate;
  WeightView up;
  WeightView down;
  float *out = nullptr;
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  float limit = INFINITY;
};

Status swigluRef(const SwigluArgs &args);

} // namespace glm::kernels
