// gated_rms_norm: KDA's gated output norm, one warp per row (contract in gated_rms_norm_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/gated_rms_norm/gated_rms_norm_gpu.h"

namespace glm::kernels {

template <typename T, typename W> __global__ void gatedRmsNormKernel(GatedRmsNormGpuArgs a) {
  // Values a lane keeps in registers between the two passes (dim <= 256 needs no second read).
  constexpr int kKept = 8;
  const int lane = threadIdx.x & 31;
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kGatedRmsNormRowsPerBlock + (threadIdx.x >> 5);
  if (row >= a.rows) {
    return;
  }
  const T *x = static_cast<const T *>(a.x) + row * a.dim;
  const T *gate = static_cast<const T *>(a.gate) + row * a.dim;
  const W *w = static_cast<const W *>(a.weight);
  T *out = static_cast<T *>(a.out) + row * a.dim;

  float kept[kKept];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kKept; ++j) {
    const int64_t i = lane + 32 * j;
    kept[j] = i < a.dim ? toFloat(x[i]) : 0.0f;
    sum = fmaf(kept[j], kept[j], sum);
  }
  for (int64_t i = lane + 32 * kKept; i < a.dim; i += 32) {
    const float v = toFloat(x[i]);
    sum = fmaf(v, v, sum);
  }
  const float inv = rsqrtf(warpSum(sum) / static_cast<float>(a.dim) + a.eps);
  // Each element is read and then written by the same lane, so out may alias x or gate.
#pragma unroll
  for (int j = 0; j < kKept; ++j) {
    const int64_t i = lane + 32 * j;
    if (i < a.dim) {
      const float g = toFloat(gate[i]);
      out[i] = fromFloat<T>(toFloat(w[i]) * (kept[j] * inv) / (1.0f + expf(-g)));
    }
  }
  for (int64_t i = lane + 32 * kKept; i < a.dim; i += 32) {
    const float g = toFloat(gate[i]);
    out[i] = fromFloat<T>(toFloat(w[i]) * (toFloat(x[i]) * inv) / (1.0f + expf(-g)));
  }
}

} // namespace glm::kernels
