// next_embedding: each row's next token's embedding row (contract in next_embedding_gpu.h).
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/next_embedding/next_embedding_gpu.h"

namespace glm::kernels {

template <typename T, typename W>
__global__ void __launch_bounds__(128) nextEmbeddingKernel(NextEmbeddingGpuArgs a) {
  using namespace elementwise;
  const int64_t row = blockIdx.x;
  const int64_t d = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kChunk;
  if (d >= a.hidden) {
    return;
  }
  const int64_t r = row % a.rowsPerSequence;
  const bool inputFollows =
      a.followInput != 0 && r + 1 < a.rowsPerSequence && a.positions[row + 1] >= 0;
  const int64_t b = row / a.rowsPerSequence;
  const int64_t drawn = a.sampledRows == a.rows ? row : b;
  const int32_t following = a.followInput != 0 ? a.params[b].following : 0;
  const int64_t id = inputFollows    ? a.ids[row + 1]
                     : following > 0 ? following - 1
                                     : a.sampled[drawn * (1 + kSampleTopLogprobs)];
  const int n = chunkCount(d, a.hidden);
  const bool vector =
      n == kChunk && a.hidden % kChunk == 0 && aligned16(a.table) && aligned16(a.out);
  float v[kChunk] = {};
  if (a.positions[row] > 0 && id >= 0 && id < a.vocab) {
    load8(static_cast<const W *>(a.table) + id * a.hidden + d, v, n, vector);
  }
  store8(static_cast<T *>(a.out) + row * a.hidden + d, v, n, vector);
}

} // namespace glm::kernels
