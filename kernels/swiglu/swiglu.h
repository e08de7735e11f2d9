// swiglu: the launch contracts of GLM-5.3's clamped SwiGLU: the whole MLP (HF Glm5NextTextMLP: the
// dense MLP of the first layers, the shared expert, each routed expert) and the activation alone,
// which plans run between separate gate/up and down projections.
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

#include "base/Status.h"
#include "kernels/common/WeightView.h"

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

/// The activation alone, the `glm.swiglu` op between a plan's gate/up and down projections:
///   out[i] = silu(min(gate[i], limit)) · clamp(up[i], −limit, limit)      gate, up, out f32
///   [count]
struct SwigluActivationArgs {
  const float *gate = nullptr;
  const float *up = nullptr;
  float *out = nullptr; // may alias gate or up
  int64_t count = 0;
  float limit = INFINITY;
};

Status swigluActivationRef(const SwigluActivationArgs &args);

} // namespace glm::kernels
