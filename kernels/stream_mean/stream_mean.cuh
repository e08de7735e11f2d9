// stream_mean: the unweighted mean over the mHC streams (contract in stream_mean_gpu.h).
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/stream_mean/stream_mean_gpu.h"

namespace glm::kernels {

template <typename T> __global__ void __launch_bounds__(128) streamMeanKernel(StreamMeanGpuArgs a) {
  using namespace elementwise;
  const int64_t t = blockIdx.x;
  const int64_t d = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kChunk;
  if (d >= a.hidden) {
    return;
  }
  const int n = chunkCount(d, a.hidden);
  const bool vector =
      n == kChunk && a.hidden % kChunk == 0 && aligned16(a.streams) && aligned16(a.out);
  const T *x = static_cast<const T *>(a.streams) + t * a.hcMult * a.hidden + d;
  float sum[kChunk] = {}, v[kChunk];
  for (int64_t s = 0; s < a.hcMult; ++s) {
    load8(x + s * a.hidden, v, n, vector);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      sum[i] += v[i];
    }
  }
  const float count = static_cast<float>(a.hcMult);
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    sum[i] /= count;
  }
  store8(static_cast<T *>(a.out) + t * a.hidden + d, sum, n, vector);
}

} // namespace glm::kernels
