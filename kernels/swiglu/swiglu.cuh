// swiglu: GLM-5.3's clamped SwiGLU activation (contract in swiglu_gpu.h).
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/swiglu/swiglu_gpu.h"

namespace glm::kernels {

template <typename T> __global__ void __launch_bounds__(128) swigluKernel(SwigluGpuArgs a) {
  using namespace elementwise;
  const int64_t r = blockIdx.x;
  const int64_t d = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kChunk;
  if (d >= a.width) {
    return;
  }
  const int n = chunkCount(d, a.width);
  const bool vector = n == kChunk && a.width % kChunk == 0 && a.inputStride % kChunk == 0 &&
                      aligned16(a.gate) && aligned16(a.up) && aligned16(a.out);
  float g[kChunk], u[kChunk];
  load8(static_cast<const T *>(a.gate) + r * a.inputStride + d, g, n, vector);
  load8(static_cast<const T *>(a.up) + r * a.inputStride + d, u, n, vector);
  const float limit = a.limit;
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    // Comparisons rather than fminf/fmaxf, which would turn a NaN into the limit.
    const float x = g[i] > limit ? limit : g[i];
    const float y = u[i] > limit ? limit : (u[i] < -limit ? -limit : u[i]);
    const float silu = roundTo<T>(x / (1.0f + expf(-x)));
    g[i] = silu * y;
  }
  store8(static_cast<T *>(a.out) + r * a.width + d, g, n, vector);
}

} // namespace glm::kernels
