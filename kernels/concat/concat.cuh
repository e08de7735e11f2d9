// concat: joins rows along the feature dimension (contract in concat_gpu.h).
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/concat/concat_gpu.h"

namespace glm::kernels {

template <typename T> __global__ void __launch_bounds__(128) concatKernel(ConcatGpuArgs a) {
  using namespace elementwise;
  const int input = blockIdx.z;
  // Unrolled selects, not a.widths[input]: indexing the parameter arrays with a run-time value
  // would copy them to local memory.
  const void *source = nullptr;
  int64_t width = 0, offset = 0, total = 0;
#pragma unroll
  for (int i = 0; i < kConcatMaxInputs; ++i) {
    const int64_t w = i < a.count ? a.widths[i] : 0;
    if (i == input) {
      source = a.inputs[i];
      width = w;
    }
    offset += i < input ? w : 0;
    total += w;
  }
  const int64_t r = blockIdx.x;
  const int64_t d = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kChunk;
  if (d >= width) {
    return;
  }
  const int n = chunkCount(d, width);
  T *out = static_cast<T *>(a.out) + r * total + offset + d;
  const T *in = static_cast<const T *>(source) + r * width + d;
  // Rows and the output offset must keep 16-byte alignment for the wide path.
  const bool vector = n == kChunk && width % kChunk == 0 && total % kChunk == 0 &&
                      offset % kChunk == 0 && aligned16(source) && aligned16(a.out);
  float v[kChunk];
  load8(in, v, n, vector);
  store8(out, v, n, vector);
}

} // namespace glm::kernels
