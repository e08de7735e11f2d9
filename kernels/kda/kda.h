// kda: the launch contract of Kimi Delta Attention's gated delta rule (glm53_arch.md §2.4 step
// 3-5), the recurrent core of GLM-5.3's linear-attention layers.
//
//   q       f32 [tokens, heads, dk]      after the short conv (+SiLU)
//   k       f32 [tokens, heads, dk]      after the short conv (+SiLU)
//   v       f32 [tokens, heads, dv]      after the short conv (+SiLU)
//   f       f32 [tokens, heads, dk]      forget-gate logits f_b(f_a(x))
//   b       f32 [tokens, heads]          write-strength logits b_proj(x)
//   aLog        [heads]                  A_log
//   dtBias      [heads·dk]               dt_bias
//   state   f32 [heads, dk, dv]          in/out: S_h, zero at sequence start
//   out     f32 [tokens, heads, dv]      o_t (before the gated output norm)
//
// Per token t and head h, in order:
//   q̂  = q / sqrt(Σ q² + l2Eps) · dk^-½        k̂ = k / sqrt(Σ k² + l2Eps)   (eps inside the sqrt)
//   g[i] = lowerBound · sigmoid( exp(A_log[h]) · (f[i] + dt_bias[h·dk + i]) )      a log decay in
//                                                 (lowerBound, 0); a scaled sigmoid, not a clamp
//   β  = sigmoid(b[h])
//   S[i][·] ← exp(g[i]) · S[i][·]                 decay key channel i
//   m[j]  = Σ_i S[i][j] · k̂[i]                    what the state predicts for k̂
//   S[i][j] ← S[i][j] + k̂[i] · β · (v[j] − m[j])  delta-rule write
//   o[j]  = Σ_i S[i][j] · q̂[i]                    read with the updated state
//
// HF prefill runs the chunked form of this recurrence; the two are the same math, and this
// per-token recurrence is the definition.
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

struct KdaArgs {
  const float *q = nullptr;
  const float *k = nullptr;
  const float *v = nullptr;
  const float *f = nullptr;
  const float *b = nullptr;
  WeightView aLog;
  WeightView dtBias;
  float *state = nullptr;
  float *out = nullptr;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t keyDim = 0;
  int64_t valueDim = 0;
  float lowerBound = -5.0f; // linear_lower_bound
  float l2Eps = 1e-6f;
};

Status kdaRef(const KdaArgs &args);

} // namespace glm::kernels
