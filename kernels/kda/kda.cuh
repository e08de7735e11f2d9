// kda: the KDA gated delta rule with the state in registers (contract in kda_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/common/Ptx.cuh"
#include "kernels/common/StepContext.h"
#include "kernels/gated_rms_norm/gated_rms_norm.cuh"
#include "kernels/kda/kda_gpu.h"

namespace glm::kernels {

namespace kda {

struct __align__(8) Pair {
  float x, y;
};
struct __align__(16) Quad {
  float x, y, z, w;
};

/// Staged per-token vectors keep key row i at (i % 8) · kStride + i / 8: a lane's rows
/// rowLane + 8m are then contiguous (16-byte reads), and with a stride of 20 floats the 8 row lanes
/// of a warp hit 8 disjoint groups of 4 banks.
constexpr int kStride = 20;
constexpr int kSpan = 8 * kStride;
constexpr int kRows = kKdaMaxKeyDim / 8; // key rows per lane

__device__ __forceinline__ float sigmoidF(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T> __device__ __forceinline__ void storePair(T *p, float a, float b) {
  p[0] = fromFloat<T>(a);
  p[1] = fromFloat<T>(b);
}
template <> __device__ __forceinline__ void storePair<float>(float *p, float a, float b) {
  *reinterpret_cast<Pair *>(p) = Pair{a, b};
}

template <typename T, typename W, int Warps, int Tile>
__device__ __forceinline__ void recurrence(const KdaGpuArgs &a) {
  static_assert(Warps * kKdaColumnsPerWarp <= 32, "one lane stages each column of v");
  static_assert(Tile % Warps == 0, "warps stage the tile's tokens in turn");
  constexpr int kCols = Warps * kKdaColumnsPerWarp;
  constexpr int kPerWarp = Tile / Warps;
  __shared__ __align__(16) float qs[Tile][kSpan];
  __shared__ __align__(16) float ks[Tile][kSpan];
  __shared__ __align__(16) float ds[Tile][kSpan];
  __shared__ __align__(16) float vs[Tile][kCols];
  __shared__ float betas[Tile];
  __shared__ int valid[Tile];

  const int dk = a.keyDim, dv = a.valueDim, heads = a.heads;
  const int colBlocks = (dv + kCols - 1) / kCols;
  const int h = blockIdx.x / colBlocks;
  const int colBase = (blockIdx.x % colBlocks) * kCols;
  const int64_t seq = blockIdx.y;
  const int rowsPerSeq = a.ctx.rowsPerSequence;
  const int64_t firstRow = seq * rowsPerSeq;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rowLane = lane >> 2, colLane = lane & 3;
  const int col = colBase + warp * kKdaColumnsPerWarp + colLane * 2;
  const bool active = col < dv; // dv % 8 == 0: a warp is wholly in or out
  const int64_t kRowStride = static_cast<int64_t>(heads) * dk;
  const int64_t vRowStride = static_cast<int64_t>(heads) * dv;
  T *out = static_cast<T *>(a.out) + static_cast<int64_t>(h) * dv + col;

  uint8_t *slot = slotOf(a.state, a.ctx, seq);
  if (slot == nullptr) {
    for (int r = 0; r < rowsPerSeq; ++r) {
      if (active && rowLane == 0) {
        storePair(out + (firstRow + r) * vRowStride, 0.0f, 0.0f);
      }
    }
    return;
  }
  // The state loads go out first so that their latency overlaps the staging below.
  float *state = reinterpret_cast<float *>(slot) + static_cast<int64_t>(h) * dk * dv + col;
  Pair s[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    s[m] = Pair{0.0f, 0.0f};
    if (active && 8 * m < dk) {
      s[m] = *reinterpret_cast<const Pair *>(state + (rowLane + 8 * m) * dv);
    }
  }

  const T *q = static_cast<const T *>(a.q) + static_cast<int64_t>(h) * dk;
  const T *k = static_cast<const T *>(a.k) + static_cast<int64_t>(h) * dk;
  const T *f = static_cast<const T *>(a.f) + static_cast<int64_t>(h) * dk;
  const T *v = static_cast<const T *>(a.v) + static_cast<int64_t>(h) * dv + colBase;
  const T *b = static_cast<const T *>(a.b) + h;
  const W *dtBias = static_cast<const W *>(a.dtBias) + static_cast<int64_t>(h) * dk;
  float dtb[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = lane + 32 * j;
    dtb[j] = i < dk ? toFloat(dtBias[i]) : 0.0f;
  }
  const float rate = expf(toFloat(static_cast<const W *>(a.aLog)[h]));
  const float qScale = 1.0f / sqrtf(static_cast<float>(dk));

  bool touched = false;
  for (int t0 = 0; t0 < rowsPerSeq; t0 += Tile) {
    // 1. Stage the tile: warp w takes tokens w, w + Warps, ...; lane holds key rows lane + 32j.
    // The loads do not wait for the row's position (a padding row's values are loaded, unused).
    float qv[kPerWarp][4], kv[kPerWarp][4], fv[kPerWarp][4], bv[kPerWarp], vv[kPerWarp];
    bool ok[kPerWarp];
#pragma unroll
    for (int u = 0; u < kPerWarp; ++u) {
      const int r = t0 + warp + u * Warps;
      const int64_t row = firstRow + r;
      const bool inChunk = r < rowsPerSeq;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = lane + 32 * j;
        const bool in = inChunk && i < dk;
        qv[u][j] = in ? toFloat(q[row * kRowStride + i]) : 0.0f;
        kv[u][j] = in ? toFloat(k[row * kRowStride + i]) : 0.0f;
        fv[u][j] = in ? toFloat(f[row * kRowStride + i]) : 0.0f;
      }
      bv[u] = inChunk ? toFloat(b[row * heads]) : 0.0f;
      vv[u] = inChunk && lane < kCols && colBase + lane < dv ? toFloat(v[row * vRowStride + lane])
                                                             : 0.0f;
      ok[u] = inChunk && a.ctx.positions[row] >= 0;
    }
#pragma unroll
    for (int u = 0; u < kPerWarp; ++u) {
      const int tt = warp + u * Warps;
      if (ok[u]) {
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          qq = fmaf(qv[u][j], qv[u][j], qq);
          kk = fmaf(kv[u][j], kv[u][j], kk);
        }
        const float qInv = rsqrtf(warpSum(qq) + a.l2Eps) * qScale;
        const float kInv = rsqrtf(warpSum(kk) + a.l2Eps);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          // Rows past keyDim are staged as zeros (the state's rows there are zero too), so the
          // per-token loops below run over all kRows rows without a branch.
          const int i = lane + 32 * j;
          const int at = (i & 7) * kStride + (i >> 3);
          qs[tt][at] = qv[u][j] * qInv;
          ks[tt][at] = kv[u][j] * kInv;
          // g = lowerBound · sigmoid(exp(A_log) · (f + dt_bias)): a log decay in (lb, 0).
          ds[tt][at] = i < dk ? expf(a.lowerBound * sigmoidF(rate * (fv[u][j] + dtb[j]))) : 0.0f;
        }
        if (lane < kCols) {
          vs[tt][lane] = vv[u];
        }
        if (lane == 0) {
          betas[tt] = roundTo<T>(sigmoidF(bv[u])); // HF: sigmoid of a bf16 tensor is bf16
        }
      }
      if (lane == 0) {
        valid[tt] = ok[u];
      }
    }
    __syncthreads();

    // 2. Step this warp's columns through the tile's tokens.
    for (int tt = 0; tt < Tile; ++tt) {
      const int r = t0 + tt;
      if (r >= rowsPerSeq) {
        break;
      }
      T *o = out + (firstRow + r) * vRowStride;
      if (!valid[tt]) {
        if (active && rowLane == 0) {
          storePair(o, 0.0f, 0.0f);
        }
        continue;
      }
      touched = true;
      if (!active) {
        continue;
      }
      float qh[kRows], kh[kRows], dh[kRows];
#pragma unroll
      for (int m = 0; m < kRows; m += 4) {
        const int at = rowLane * kStride + m;
        const Quad q4 = *reinterpret_cast<const Quad *>(&qs[tt][at]);
        const Quad k4 = *reinterpret_cast<const Quad *>(&ks[tt][at]);
        const Quad d4 = *reinterpret_cast<const Quad *>(&ds[tt][at]);
        qh[m] = q4.x, qh[m + 1] = q4.y, qh[m + 2] = q4.z, qh[m + 3] = q4.w;
        kh[m] = k4.x, kh[m + 1] = k4.y, kh[m + 2] = k4.z, kh[m + 3] = k4.w;
        dh[m] = d4.x, dh[m + 1] = d4.y, dh[m + 2] = d4.z, dh[m + 3] = d4.w;
      }
      const Pair vp =
          *reinterpret_cast<const Pair *>(&vs[tt][warp * kKdaColumnsPerWarp + colLane * 2]);
      const float beta = betas[tt];

      // S ← diag(exp g) S, then m = Sᵀ k̂ over the lane's rows, summed over the 8 row lanes.
      float m0 = 0.0f, m1 = 0.0f;
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        s[m].x *= dh[m];
        s[m].y *= dh[m];
        m0 = fmaf(s[m].x, kh[m], m0);
        m1 = fmaf(s[m].y, kh[m], m1);
      }
#pragma unroll
      for (int offset = 4; offset < 32; offset <<= 1) {
        m0 += __shfl_xor_sync(0xFFFFFFFFu, m0, offset);
        m1 += __shfl_xor_sync(0xFFFFFFFFu, m1, offset);
      }
      // S ← S + k̂ (β (v − m))ᵀ, then o = Sᵀ q̂ with the updated state.
      const float d0 = beta * (vp.x - m0), d1 = beta * (vp.y - m1);
      float o0 = 0.0f, o1 = 0.0f;
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        s[m].x = fmaf(kh[m], d0, s[m].x);
        s[m].y = fmaf(kh[m], d1, s[m].y);
        o0 = fmaf(s[m].x, qh[m], o0);
        o1 = fmaf(s[m].y, qh[m], o1);
      }
#pragma unroll
      for (int offset = 4; offset < 32; offset <<= 1) {
        o0 += __shfl_xor_sync(0xFFFFFFFFu, o0, offset);
        o1 += __shfl_xor_sync(0xFFFFFFFFu, o1, offset);
      }
      if (rowLane == 0) {
        storePair(o, o0, o1);
      }
    }
    __syncthreads(); // the next tile's staging overwrites what this one read
  }

  // Padding rows leave the state alone: a step with no real row does not write it at all.
  if (touched && active) {
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      if (8 * m < dk) {
        *reinterpret_cast<Pair *>(state + (rowLane + 8 * m) * dv) = s[m];
      }
    }
  }
}

/// The folded gated norm of this block's columns: for each row of its sequence (the block's warps
/// take them in turn) the head's whole row of o, which the cluster's blocks stored before the
/// barrier, normalised with gatedRmsNormKernel's row routine into `normed`. Every row is
/// normalised, padding rows and those of a sequence without a slot (o = 0) too, as the unfused
/// norm step does.
template <typename T, typename WN, int Warps>
__device__ __forceinline__ void normaliseColumns(const KdaGpuArgs &a) {
  constexpr int kCols = Warps * kKdaColumnsPerWarp;
  const int dv = a.valueDim;
  const int colBlocks = (dv + kCols - 1) / kCols;
  const int h = blockIdx.x / colBlocks;
  const int colBase = (blockIdx.x % colBlocks) * kCols;
  const int rowsPerSeq = a.ctx.rowsPerSequence;
  const int64_t firstRow = static_cast<int64_t>(blockIdx.y) * rowsPerSeq;
  const int64_t rowStride = static_cast<int64_t>(a.heads) * dv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int r = warp; r < rowsPerSeq; r += Warps) {
    const int64_t at = (firstRow + r) * rowStride + static_cast<int64_t>(h) * dv;
    norm::gatedNormRow(static_cast<const T *>(a.out) + at, static_cast<const T *>(a.gate) + at,
                       static_cast<const WN *>(a.normWeight), static_cast<T *>(a.normed) + at, dv,
                       a.normEps, lane, norm::WriteSpan{colBase, colBase + kCols});
  }
}

} // namespace kda

template <typename T, typename W> __global__ void kdaDecodeKernel(KdaGpuArgs a) {
  kda::recurrence<T, W, kKdaDecodeWarps, kKdaDecodeTile>(a);
}

/// kdaDecodeKernel and the gated output norm after it in one launch (kda_gpu.h): kCluster =
/// kdaNormCluster(valueDim), the blocks of a head.
template <typename T, typename W, typename WN, int kCluster>
__global__ void __cluster_dims__(kCluster, 1, 1) kdaDecodeNormKernel(KdaGpuArgs a) {
  kda::recurrence<T, W, kKdaDecodeWarps, kKdaDecodeTile>(a);
  // Every thread arrives, its columns of o stored (recurrence returns on every path, none of
  // them early for part of the block): after the barrier the cluster's stores are visible. The
  // barrier is .aligned, so each warp reaches it converged.
  __syncwarp();
  ptx::clusterSync();
  kda::normaliseColumns<T, WN, kKdaDecodeWarps>(a);
}

template <typename T, typename W> __global__ void kdaPrefillKernel(KdaGpuArgs a) {
  kda::recurrence<T, W, kKdaPrefillWarps, kKdaPrefillTile>(a);
}

} // namespace glm::kernels
