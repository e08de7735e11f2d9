// gated_rms_norm on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   x       T [rows, dim]    rows = tokens · heads (the step's `group` is dim): each head alone
//   gate    T [rows, dim]
//   weight  W [dim]
//   out     T [rows, dim]    may alias x or gate
//
//   out[r] = w ⊙ x[r] · rsqrt(mean_i x[r][i]² + eps) ⊙ sigmoid(gate[r])
//
// One warp per row, 8 rows per 256-thread block: a head (128 values) is 4 per lane, so the sum of
// squares needs only shuffles. Everything is f32 and rounded once to T, as HF computes it.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

constexpr int kGatedRmsNormRowsPerBlock = 8;

struct GatedRmsNormGpuArgs {
  const void *x;
  const void *gate;
  const void *weight;
  void *out;
  int64_t rows;
  int64_t dim;
  float eps;
};

#ifndef __CUDACC_RTC__
inline LaunchDims gatedRmsNormLaunch(int64_t rows) {
  LaunchDims d;
  d.grid[0] = ceilDiv(rows, kGatedRmsNormRowsPerBlock);
  d.block[0] = 32 * kGatedRmsNormRowsPerBlock;
  return d;
}
#endif

} // namespace glm::kernels
