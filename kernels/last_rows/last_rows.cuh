// last_rows: each sequence's last real row (contract in last_rows_gpu.h).
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/last_rows/last_rows_gpu.h"

namespace glm::kernels {

template <typename T>
__global__ void __launch_bounds__(kLastRowsThreads) lastRowsKernel(LastRowsGpuArgs a) {
  using namespace elementwise;
  const int64_t b = blockIdx.x, first = b * a.rowsPerSequence;
  // The last row holding a token: the largest r with a position, found by every block alike.
  int64_t last = -1;
  for (int64_t r = threadIdx.x; r < a.rowsPerSequence; r += blockDim.x) {
    if (a.positions[first + r] >= 0) {
      last = r;
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const int64_t other = __shfl_xor_sync(0xFFFFFFFFu, last, offset);
    last = other > last ? other : last;
  }
  __shared__ int64_t warps[kLastRowsThreads / 32];
  if (threadIdx.x % 32 == 0) {
    warps[threadIdx.x / 32] = last;
  }
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kLastRowsThreads / 32; ++w) {
    last = warps[w] > last ? warps[w] : last;
  }
  const int64_t row = first + (last < 0 ? 0 : last);
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    a.picked[b] = last < 0 ? -1 : a.positions[row];
  }
  const int64_t d = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kChunk;
  if (d >= a.width) {
    return;
  }
  const int n = chunkCount(d, a.width);
  const T *in = static_cast<const T *>(a.x) + row * a.width + d;
  T *out = static_cast<T *>(a.out) + b * a.width + d;
  const bool vector = n == kChunk && a.width % kChunk == 0 && aligned16(a.x) && aligned16(a.out);
  float v[kChunk];
  load8(in, v, n, vector);
  store8(out, v, n, vector);
}

} // namespace glm::kernels
