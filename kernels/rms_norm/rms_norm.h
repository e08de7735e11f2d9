// rms_norm: the launch contract of RMSNorm, weighted (GLM's RMSNorm) or unweighted (mHC's).
//
//   x       f32 [rows, dim]
//   weight      [dim]                 optional; absent = unweighted
//   out     f32 [rows, dim]           may alias x
//
//   out[r] = w ⊙ ( x[r] · rsqrt( mean_i x[r][i]² + eps ) )
//
// HF's Glm5NextTextRMSNorm casts the normalised row back to the activation dtype before the weight
// product; in an fp32 plan that cast is the identity, so this is all fp32.
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

struct RmsNormArgs {
  const float *x = nullptr;
  WeightView weight; // absent: unweighted
  float *out = nullptr;
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-5f;
};

Status rmsNormRef(const RmsNormArgs &args);

} // namespace glm::kernels
