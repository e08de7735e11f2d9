// gated_rms_norm: the launch contract of KDA's gated output norm (HF Glm5NextTextRMSNormGated).
//
//   x       f32 [rows, dim]     rows = tokens·heads, dim = head dim: each head normalised alone
//   gate    f32 [rows, dim]     g_b(g_a(x)) viewed per head
//   weight      [dim]           o_norm.weight
//   out     f32 [rows, dim]     may alias x or gate
//
//   out[r] = w ⊙ x[r] · rsqrt(mean_i x[r][i]² + eps) ⊙ sigmoid(gate[r])
//
// HF does all of it in fp32 and casts once at the end (eps = rms_norm_eps).
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

struct GatedRmsNormArgs {
  const float *x = nullptr;
  const float *gate = nullptr;
  WeightView weight;
  float *out = nullptr;
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-5f;
};

Status gatedRmsNormRef(const GatedRmsNormArgs &args);

} // namespace glm::kernels
