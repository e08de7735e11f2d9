// embedding: the token-embedding row gather (contract in embedding_gpu.h).
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/embedding/embedding_gpu.h"

namespace glm::kernels {

template <typename T, typename W>
__global__ void __launch_bounds__(128) embeddingKernel(EmbeddingGpuArgs a) {
  using namespace elementwise;
  const int64_t t = blockIdx.x;
  const int64_t d = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kChunk;
  if (d >= a.hidden) {
    return;
  }
  const int64_t id = static_cast<const int32_t *>(a.tokenIds)[t];
  const int n = chunkCount(d, a.hidden);
  const bool vector =
      n == kChunk && a.hidden % kChunk == 0 && aligned16(a.table) && aligned16(a.out);
  float v[kChunk] = {};
  if (id >= 0 && id < a.vocab) {
    load8(static_cast<const W *>(a.table) + id * a.hidden + d, v, n, vector);
  }
  T *out = static_cast<T *>(a.out) + t * a.copies * a.hidden + d;
  for (int64_t c = 0; c < a.copies; ++c) {
    store8(out + c * a.hidden, v, n, vector);
  }
}

} // namespace glm::kernels
