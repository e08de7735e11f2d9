// expand_streams: copies each row into the mHC residual streams (contract in expand_streams_gpu.h).
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/expand_streams/expand_streams_gpu.h"

namespace glm::kernels {

template <typename T>
__global__ void __launch_bounds__(128) expandStreamsKernel(ExpandStreamsGpuArgs a) {
  using namespace elementwise;
  const int64_t t = blockIdx.x;
  const int64_t d = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kChunk;
  if (d >= a.hidden) {
    return;
  }
  const int n = chunkCount(d, a.hidden);
  const bool vector = n == kChunk && a.hidden % kChunk == 0 && aligned16(a.x) && aligned16(a.out);
  float v[kChunk];
  load8(static_cast<const T *>(a.x) + t * a.hidden + d, v, n, vector);
  T *out = static_cast<T *>(a.out) + t * a.streams * a.hidden + d;
  for (int64_t s = 0; s < a.streams; ++s) {
    store8(out + s * a.hidden, v, n, vector);
  }
}

} // namespace glm::kernels
