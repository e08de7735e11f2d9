// layer_norm: the launch contract of LayerNorm with weight and bias (the indexer's k_norm).
//
//   x       f32 [rows, dim]
//   weight      [dim]     optional (absent = 1)
//   bias        [dim]     optional (absent = 0)
//   out     f32 [rows, dim]           may alias x
//
//   μ = mean_i x[r][i],  σ² = mean_i (x[r][i] − μ)²   (biased variance, as torch.nn.LayerNorm)
//   out[r] = (x[r] − μ) · rsqrt(σ² + eps) ⊙ w + b
//
// GLM-5.3's indexer hard-codes eps = 1e-6 here (not rms_norm_eps).
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

struct LayerNormArgs {
  const float *x = nullptr;
  WeightView weight;
  WeightView bias;
  float *out = nullptr;
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-6f;
};

Status layerNormRef(const LayerNormArgs &args);

} // namespace glm::kernels
