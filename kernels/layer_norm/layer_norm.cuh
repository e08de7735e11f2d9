// layer_norm: LayerNorm with optional weight and bias (contract in layer_norm_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/layer_norm/layer_norm_gpu.h"

namespace glm::kernels {

template <typename T, typename W>
__global__ void __launch_bounds__(256) layerNormKernel(LayerNormGpuArgs a) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= a.rows) {
    return;
  }
  const int lane = threadIdx.x & 31;
  const T *x = static_cast<const T *>(a.x) + row * a.dim;
  T *out = static_cast<T *>(a.out) + row * a.dim;
  const W *w = static_cast<const W *>(a.weight);
  const W *b = static_cast<const W *>(a.bias);
  const float count = static_cast<float>(a.dim);
  float sum = 0.0f;
  for (int64_t i = lane; i < a.dim; i += 32) {
    sum += toFloat(x[i]);
  }
  const float mean = warpSum(sum) / count;
  // The second pass over (x − μ)² (the row is still in L1) avoids E[x²] − μ²'s cancellation.
  float var = 0.0f;
  for (int64_t i = lane; i < a.dim; i += 32) {
    const float d = toFloat(x[i]) - mean;
    var = fmaf(d, d, var);
  }
  const float inv = rsqrtf(warpSum(var) / count + a.eps);
  for (int64_t i = lane; i < a.dim; i += 32) {
    float y = (toFloat(x[i]) - mean) * inv;
    if (w != nullptr) {
      y *= toFloat(w[i]);
    }
    if (b != nullptr) {
      y += toFloat(b[i]);
    }
    out[i] = fromFloat<T>(y);
  }
}

} // namespace glm::kernels
