// layer_norm on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   x       T [rows, dim]
//   weight  W [dim]          null = 1
//   bias    W [dim]          null = 0
//   out     T [rows, dim]    may alias x
//
//   out[r] = (x[r] − μ) · rsqrt(σ² + eps) ⊙ w + b        biased variance, two passes in f32
//
// One warp per row, 8 rows per 256-thread block: the one user is the indexer's k_norm over 128
// values, too short a row for a block. With T = bf16 the result is rounded once at the store, as
// torch's bf16 layer_norm (f32 statistics and affine, one rounding).
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct LayerNormGpuArgs {
  const void *x;
  const void *weight;
  const void *bias;
  void *out;
  int64_t rows;
  int64_t dim;
  float eps;
};

#ifndef __CUDACC_RTC__
inline LaunchDims layerNormLaunch(int64_t rows) {
  LaunchDims d;
  d.grid[0] = ceilDiv(rows, 8);
  d.block[0] = 256;
  return d;
}
#endif

} // namespace glm::kernels
