// gated_rms_norm: KDA's gated output norm, one warp per row (contract and design in
// gated_rms_norm_gpu.h), on rms_norm's row routine.
#pragma once

#include "kernels/gated_rms_norm/gated_rms_norm_gpu.h"
#include "kernels/rms_norm/rms_norm.cuh"

namespace glm::kernels {
namespace norm {

/// One row of the gated norm by the 32 lanes of a warp, `lane` this one, writing the elements of
/// `span` (the whole row by default). gatedRmsNormKernel runs it for each of its rows and the KDA
/// decode kernel folded with the norm (kda.cuh) for the heads of its cluster, so the two give the
/// same bits.
template <typename T, typename W>
__device__ __forceinline__ void gatedNormRow(const T *x, const T *gate, const W *w, T *out,
                                             int64_t dim, float eps, int lane,
                                             WriteSpan span = {}) {
  normaliseRow<kGatedRmsNormKeptChunks>(
      x, gate, w, out, dim, eps, lane, 32, [](float s) { return warpSum(s); },
      // All f32, rounded once at the store, as HF computes it.
      [](float y, float wv, float g) { return wv * y / (1.0f + expf(-g)); }, span);
}

} // namespace norm

// Four blocks an SM, 32 rows in flight per SM at prefill: 64 registers (70 unbounded). The bf16
// instances fit without spilling; f32 activations with bf16 weights spill 8 bytes.
template <typename T, typename W>
__global__ void __launch_bounds__(32 * kGatedRmsNormRowsPerBlock, 4)
    gatedRmsNormKernel(GatedRmsNormGpuArgs a) {
  static_assert(norm::kNormElement<T> && norm::kNormElement<W>,
                "the gated RMSNorm takes f32 or bf16");
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kGatedRmsNormRowsPerBlock + (threadIdx.x >> 5);
  if (row >= a.rows) {
    return; // the whole warp: its shuffles need no absent lanes
  }
  const int64_t at = row * a.dim;
  norm::gatedNormRow(static_cast<const T *>(a.x) + at, static_cast<const T *>(a.gate) + at,
                     static_cast<const W *>(a.weight), static_cast<T *>(a.out) + at, a.dim, a.eps,
                     threadIdx.x & 31);
}

} // namespace glm::kernels
