// rms_norm: RMSNorm over the last dimension (contract in rms_norm_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/rms_norm/rms_norm_gpu.h"

namespace glm::kernels {

template <typename T, typename W> __global__ void rmsNormKernel(RmsNormGpuArgs a) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T *x = static_cast<const T *>(a.x) + row * a.dim;
  T *out = static_cast<T *>(a.out) + row * a.dim;
  const W *w = static_cast<const W *>(a.weight);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) {
    const float v = toFloat(x[i]);
    sum = fmaf(v, v, sum);
  }
  const float inv = rsqrtf(blockSum(sum, scratch) / static_cast<float>(a.dim) + a.eps);
  for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) {
    const float y = roundTo<T>(toFloat(x[i]) * inv);
    out[i] = fromFloat<T>(w != nullptr ? toFloat(w[i]) * y : y);
  }
}

} // namespace glm::kernels
