// gated_rms_norm on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   x       T [rows, dim]    rows = tokens · heads (the step's `group` is dim): each head alone
//   gate    T [rows, dim]
//   weight  W [dim]          W: f32 or bf16
//   out     T [rows, dim]    may alias x or gate
//
//   out[r] = w ⊙ x[r] · rsqrt(mean_i x[r][i]² + eps) ⊙ sigmoid(gate[r])
//
// One warp per row, 8 rows per 256-thread block, so the sum of squares needs only shuffles (a fixed
// order: the same bits every run). Everything is f32 and rounded once to T, as HF computes it.
//
// Why this shape (decode: 64 heads of 128 per token, one call per KDA layer). A head moves 256 B
// each of x, gate and output in bf16, so the time is latency, not bytes (~0.5-0.8 µs per round
// trip to L2 or HBM).
//   Before: each lane read its 4 values of x (2-byte loads), reduced, then read gate and weight:
//   two round trips, and 2-byte accesses.
//   Now (rms_norm's row routine, rms_norm.cuh): lane l owns the 8-element chunk l (16 bytes of
//   bf16; a 128-wide head is lanes 0-15) and issues its 16-byte loads of x, gate and weight before
//   using any: one round trip, the shuffles, one 16-byte store. A head wider than
//   32 · kGatedRmsNormKeptChunks · 8 reads the rest again in the output pass; a misaligned row, or
//   a dim that is not a multiple of 8, takes element-wise accesses.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

constexpr int kGatedRmsNormRowsPerBlock = 8;
/// 8-element chunks each lane keeps in registers between the sum and the output pass.
constexpr int kGatedRmsNormKeptChunks = 1;

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
