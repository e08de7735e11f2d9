// mhc_post: the mHC residual update that writes a sub-block's output back into the streams
// (contract in mhc_post_gpu.h).
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/mhc_post/mhc_post_gpu.h"

namespace glm::kernels {

namespace mhc {

/// New stream j over one chunk, from the sub-block output y and the old streams r:
/// post[j]·y + Σ_i comb[i][j]·r[i], rounded where HF's bf16 forward rounds (mhc_post_gpu.h).
/// mhc_pre's folded prologue computes its streams with it, so both kernels give the same bits.
template <typename T, int HC>
__device__ __forceinline__ void
postStream(const float *post, const float *comb, int j, const float (&y)[elementwise::kChunk],
           const float (&r)[HC][elementwise::kChunk], float (&v)[elementwise::kChunk]) {
  const float p = roundTo<T>(post[j]);
  float c[HC];
#pragma unroll
  for (int i = 0; i < HC; ++i) {
    c[i] = roundTo<T>(comb[i * HC + j]);
  }
#pragma unroll
  for (int e = 0; e < elementwise::kChunk; ++e) {
    float mixed = 0.0f;
#pragma unroll
    for (int i = 0; i < HC; ++i) {
      mixed = fmaf(c[i], r[i][e], mixed);
    }
    v[e] = roundTo<T>(p * y[e]) + roundTo<T>(mixed);
  }
}

} // namespace mhc

template <typename T, int HC>
__global__ void __launch_bounds__(128) mhcPostKernel(MhcPostGpuArgs a) {
  using namespace elementwise;
  const int64_t t = blockIdx.x;
  const int64_t d = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kChunk;
  if (d >= a.hidden) {
    return;
  }
  const int n = chunkCount(d, a.hidden);
  const bool vector = n == kChunk && a.hidden % kChunk == 0 && aligned16(a.y) &&
                      aligned16(a.residual) && aligned16(a.out);
  const float *post = static_cast<const float *>(a.post) + t * HC;
  const float *comb = static_cast<const float *>(a.comb) + t * HC * HC;
  const T *residual = static_cast<const T *>(a.residual) + t * HC * a.hidden + d;
  float y[kChunk], r[HC][kChunk];
  load8(static_cast<const T *>(a.y) + t * a.hidden + d, y, n, vector);
#pragma unroll
  for (int i = 0; i < HC; ++i) {
    load8(residual + i * a.hidden, r[i], n, vector);
  }
  T *out = static_cast<T *>(a.out) + t * HC * a.hidden + d;
#pragma unroll
  for (int j = 0; j < HC; ++j) {
    float v[kChunk];
    mhc::postStream<T, HC>(post, comb, j, y, r, v);
    store8(out + j * a.hidden, v, n, vector);
  }
}

} // namespace glm::kernels
