// mhc_pre: the mHC mixer in one launch: RMS-normalised mixing logits, the pre/post weights,
// Sinkhorn for comb, and the pre-weighted stream collapse (contract in mhc_pre_gpu.h).
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/mhc_post/mhc_post.cuh"
#include "kernels/mhc_pre/mhc_pre_gpu.h"
#include "kernels/rms_norm/rms_norm.cuh"

namespace glm::kernels {
namespace mhc {

/// The shared-window address of a shared-memory pointer, for mapa.
__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  uint32_t address;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(address) : "l"(p));
  return address;
}

/// The f32 at `address` in the shared memory of cluster block `rank`.
__device__ __forceinline__ float loadFromBlock(uint32_t address, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

__device__ __forceinline__ void clusterArrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

__device__ __forceinline__ void clusterWait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/// 1/x to within an ulp in one MUFU op. Sinkhorn's 2·iters normalisations sit on the kernel's
/// critical path at decode; a one-ulp error in a row or column scale is the kind of error the next
/// normalisation removes, so IEEE division would buy nothing.
__device__ __forceinline__ float reciprocal(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

/// HF's Sinkhorn-Knopp on an [HC, HC] row-major matrix of logits, in registers: a row softmax plus
/// eps, one column normalisation, then iters − 1 rounds of (row, column) normalisation.
template <int HC>
__device__ __forceinline__ void sinkhorn(float (&c)[HC * HC], int iters, float eps) {
#pragma unroll
  for (int i = 0; i < HC; ++i) {
    float peak = c[i * HC];
#pragma unroll
    for (int j = 1; j < HC; ++j) {
      peak = fmaxf(peak, c[i * HC + j]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < HC; ++j) {
      c[i * HC + j] = expf(c[i * HC + j] - peak);
      sum += c[i * HC + j];
    }
#pragma unroll
    for (int j = 0; j < HC; ++j) {
      c[i * HC + j] = c[i * HC + j] / sum + eps;
    }
  }
  // The first column pass happens even with iters = 0, as in HF's loop.
  const int rounds = iters > 1 ? iters : 1;
  for (int k = 0; k < rounds; ++k) {
    if (k > 0) {
#pragma unroll
      for (int i = 0; i < HC; ++i) {
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < HC; ++j) {
          sum += c[i * HC + j];
        }
        const float r = reciprocal(sum + eps);
#pragma unroll
        for (int j = 0; j < HC; ++j) {
          c[i * HC + j] *= r;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < HC; ++j) {
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < HC; ++i) {
        sum += c[i * HC + j];
      }
      const float r = reciprocal(sum + eps);
#pragma unroll
      for (int i = 0; i < HC; ++i) {
        c[i * HC + j] *= r;
      }
    }
  }
}

/// The whole mixer for the tokens of one cluster of CLUSTER blocks (1: a lone block that reduces
/// the whole width itself); TOK tokens per thread, GROUPS groups of threads per block, each group
/// on its own TOK tokens; FOLD: the streams are the folded mhc_post's, computed here; NORM: x is
/// also normalised by the folded RMSNorm (weight type NW) into `normed` (contract and layout in
/// mhc_pre_gpu.h).
template <typename T, typename W, int HC, int TOK, int GROUPS, int CLUSTER, bool FOLD = false,
          bool NORM = false, typename NW = float>
__device__ __forceinline__ void mixer(const MhcPreGpuArgs &a) {
  using namespace elementwise;
  constexpr int kMix = (2 + HC) * HC;
  constexpr int kValues = kMix + 1; // the mixing dots, then the sum of squares
  constexpr int kTokens = TOK * GROUPS;
  constexpr int kWarps = kMhcPreThreads / 32;
  constexpr int kGroupThreads = kMhcPreThreads / GROUPS;
  constexpr int kGroupWarps = kWarps / GROUPS;
  static_assert(kTokens <= 32 && kGroupThreads % 32 == 0, "one mixing lane per token");
  // The folded norm needs every block's x before any block normalises: one token per cluster.
  static_assert(!NORM || (CLUSTER > 1 && kTokens == 1 && kMhcPreThreads == kRmsNormThreads),
                "the folded RMSNorm is the decode kernels' and normalises as rmsNormKernel does");

  __shared__ float warpPart[kWarps][TOK * kValues];
  __shared__ float blockPart[kTokens * kValues];
  __shared__ float total[kTokens * kValues];
  __shared__ float preWeight[kTokens][HC];

  const int rank = static_cast<int>(blockIdx.x % CLUSTER);
  const int64_t token0 = static_cast<int64_t>(blockIdx.x / CLUSTER) * kTokens;
  const int64_t hidden = a.hidden, width = HC * hidden;
  const int64_t chunks = (hidden + kChunk - 1) / kChunk;
  const int64_t firstChunk = chunks * rank / CLUSTER;
  const int myChunks = static_cast<int>(chunks * (rank + 1) / CLUSTER - firstChunk);
  // Folded, the collapse reads back the streams phase 1 wrote: this block's own chunks, written
  // before the barriers between (plain loads, which see them).
  const T *streams = static_cast<const T *>(FOLD ? a.newStreams : a.streams);
  const W *fn = static_cast<const W *>(a.fn);
  const W *base = static_cast<const W *>(a.base);
  const W *scale = static_cast<const W *>(a.scale);
  const bool vector = hidden % kChunk == 0 && aligned16(streams) && aligned16(fn) &&
                      aligned16(a.x) && (!FOLD || (aligned16(a.y) && aligned16(a.residual)));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // 1. This block's share of Σ fn·X and Σ X² for each token: chunk (s, d) of every token's
  // streams against the same chunk of the 2 + hc mixing rows.
  const int group = threadIdx.x / kGroupThreads, member = threadIdx.x % kGroupThreads;
  const int64_t groupToken0 = token0 + group * TOK;
  float acc[TOK][kValues];
#pragma unroll
  for (int k = 0; k < TOK; ++k) {
#pragma unroll
    for (int v = 0; v < kValues; ++v) {
      acc[k][v] = 0.0f;
    }
  }
  for (int i = member; i < HC * myChunks; i += kGroupThreads) {
    const int s = i / myChunks;
    const int64_t d = (firstChunk + i % myChunks) * kChunk;
    const int n = chunkCount(d, hidden);
    float xv[TOK][kChunk];
#pragma unroll
    for (int k = 0; k < TOK; ++k) {
      const int64_t t = groupToken0 + k;
      if (t < a.tokens && FOLD) {
        // New stream s of this chunk, as mhc_post writes it; mixed as it will be read back.
        float y[kChunk], r[HC][kChunk];
        load8(static_cast<const T *>(a.y) + t * hidden + d, y, n, vector);
#pragma unroll
        for (int i = 0; i < HC; ++i) {
          load8(static_cast<const T *>(a.residual) + (t * HC + i) * hidden + d, r[i], n, vector);
        }
        postStream<T, HC>(static_cast<const float *>(a.lastPost) + t * HC,
                          static_cast<const float *>(a.lastComb) + t * HC * HC, s, y, r, xv[k]);
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          xv[k][e] = roundTo<T>(xv[k][e]);
        }
        store8(static_cast<T *>(a.newStreams) + (t * HC + s) * hidden + d, xv[k], n, vector);
      } else if (t < a.tokens) {
        load8(streams + (t * HC + s) * hidden + d, xv[k], n, vector);
      } else {
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          xv[k][e] = 0.0f;
        }
      }
#pragma unroll
      for (int e = 0; e < kChunk; ++e) {
        acc[k][kMix] = fmaf(xv[k][e], xv[k][e], acc[k][kMix]);
      }
    }
    const W *column = fn + s * hidden + d;
#pragma unroll
    for (int r = 0; r < kMix; ++r) {
      float wv[kChunk];
      load8(column + r * width, wv, n, vector);
#pragma unroll
      for (int k = 0; k < TOK; ++k) {
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          acc[k][r] = fmaf(wv[e], xv[k][e], acc[k][r]);
        }
      }
    }
  }

  // 2. Reduce over the group's warps, then over the cluster's blocks (in rank order, so that every
  // block gets the same bits).
#pragma unroll
  for (int k = 0; k < TOK; ++k) {
#pragma unroll
    for (int v = 0; v < kValues; ++v) {
      const float s = warpSum(acc[k][v]);
      if (lane == 0) {
        warpPart[warp][k * kValues + v] = s;
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTokens * kValues; i += kMhcPreThreads) {
    const int tok = i / kValues;
    const int g = tok / TOK, slot = i - g * TOK * kValues;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kGroupWarps; ++w) {
      s += warpPart[g * kGroupWarps + w][slot];
    }
    blockPart[i] = s;
  }
  if constexpr (CLUSTER > 1) {
    clusterArrive();
    clusterWait();
    const uint32_t partAddress = sharedAddress(blockPart);
    for (int i = threadIdx.x; i < kTokens * kValues; i += kMhcPreThreads) {
      // All the loads first, so that the eight round trips overlap.
      float part[CLUSTER];
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) {
        part[r] = loadFromBlock(partAddress + 4 * i, r);
      }
      float s = 0.0f;
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) {
        s += part[r];
      }
      total[i] = s;
    }
    // Done with the other blocks' shared memory; each block waits for this before it exits. With
    // the norm folded, each thread arrives once its x is written instead (below), so the wait
    // also means every block's x is visible.
    if constexpr (!NORM) {
      clusterArrive();
    }
  } else {
    __syncthreads();
    for (int i = threadIdx.x; i < kTokens * kValues; i += kMhcPreThreads) {
      total[i] = blockPart[i];
    }
  }
  __syncthreads();

  // 3. The pre weights of every token (each block's collapse needs them).
  const float meanScale = 1.0f / static_cast<float>(width);
  for (int i = threadIdx.x; i < kTokens * HC; i += kMhcPreThreads) {
    const int tok = i / HC, s = i % HC;
    const float *m = total + tok * kValues;
    const float inv = rsqrtf(m[kMix] * meanScale + a.normEps);
    preWeight[tok][s] = sigmoid(m[s] * inv * toFloat(scale[0]) + toFloat(base[s])) + a.hcEps;
  }
  __syncthreads();

  if (rank == 0 && warp == kWarps - 1) {
    if constexpr (NORM) {
      clusterArrive(); // it writes no x, so no block's norm waits for its Sinkhorn
    }
    // 4a. Block 0's last warp: post, pre and Sinkhorn, one lane per token.
    const int64_t t = token0 + lane;
    if (lane < kTokens && t < a.tokens) {
      const float *m = total + lane * kValues;
      const float inv = rsqrtf(m[kMix] * meanScale + a.normEps);
      float *post = static_cast<float *>(a.post) + t * HC;
      float *pre = static_cast<float *>(a.pre);
#pragma unroll
      for (int s = 0; s < HC; ++s) {
        post[s] = 2.0f * sigmoid(m[HC + s] * inv * toFloat(scale[1]) + toFloat(base[HC + s]));
        if (pre != nullptr) {
          pre[t * HC + s] = preWeight[lane][s];
        }
      }
      float c[HC * HC];
#pragma unroll
      for (int k = 0; k < HC * HC; ++k) {
        c[k] = m[2 * HC + k] * inv * toFloat(scale[2]) + toFloat(base[2 * HC + k]);
      }
      sinkhorn<HC>(c, a.sinkhornIters, a.hcEps);
      float *comb = static_cast<float *>(a.comb) + t * HC * HC;
#pragma unroll
      for (int k = 0; k < HC * HC; ++k) {
        comb[k] = c[k];
      }
    }
  } else {
    // 4b. x = Σ_s pre[s]·X[s] over this block's hidden positions (the streams are still in L1/L2).
    const int stride = rank == 0 ? kMhcPreThreads - 32 : kMhcPreThreads;
    T *x = static_cast<T *>(a.x);
    for (int i = threadIdx.x; i < kTokens * myChunks; i += stride) {
      const int tok = i / myChunks;
      const int64_t t = token0 + tok;
      if (t >= a.tokens) {
        break;
      }
      const int64_t d = (firstChunk + i % myChunks) * kChunk;
      const int n = chunkCount(d, hidden);
      float sum[kChunk] = {}, xv[kChunk];
#pragma unroll
      for (int s = 0; s < HC; ++s) {
        load8(streams + (t * HC + s) * hidden + d, xv, n, vector);
        const float p = preWeight[tok][s];
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          sum[e] = fmaf(p, xv[e], sum[e]);
        }
      }
      store8(x + t * hidden + d, sum, n, vector);
    }
    if constexpr (NORM) {
      __syncwarp(); // the cluster barrier is .aligned: the whole warp executes it together
      clusterArrive();
    }
  }
  if constexpr (CLUSTER > 1) {
    __syncwarp();
    clusterWait();
  }
  if constexpr (NORM) {
    // 5. The folded RMSNorm: every block reads the whole row of x for the sum, as rmsNormKernel's
    // block does (the same threads, chunks and reduction, so the same bits), and writes the
    // normalised values of its own chunks.
    __shared__ float normScratch[32];
    if (token0 < a.tokens) {
      norm::rmsNormRow(static_cast<const T *>(a.x) + token0 * hidden,
                       static_cast<const NW *>(a.inputNormWeight),
                       static_cast<T *>(a.normed) + token0 * hidden, hidden, a.inputNormEps,
                       normScratch, {firstChunk * kChunk, (firstChunk + myChunks) * kChunk});
    }
  }
}

} // namespace mhc

template <typename T, typename W, int HC>
__global__ void __cluster_dims__(kMhcPreCluster, 1, 1) __launch_bounds__(kMhcPreThreads)
    mhcPreDecodeKernel(MhcPreGpuArgs a) {
  mhc::mixer<T, W, HC, 1, 1, kMhcPreCluster>(a);
}

template <typename T, typename W, int HC>
__global__ void __cluster_dims__(kMhcPreCluster, 1, 1) __launch_bounds__(kMhcPreThreads)
    mhcPostPreDecodeKernel(MhcPreGpuArgs a) {
  mhc::mixer<T, W, HC, 1, 1, kMhcPreCluster, true>(a);
}

template <typename T, typename W, int HC, typename NW>
__global__ void __cluster_dims__(kMhcPreCluster, 1, 1) __launch_bounds__(kMhcPreThreads)
    mhcPreNormDecodeKernel(MhcPreGpuArgs a) {
  mhc::mixer<T, W, HC, 1, 1, kMhcPreCluster, false, true, NW>(a);
}

template <typename T, typename W, int HC, typename NW>
__global__ void __cluster_dims__(kMhcPreCluster, 1, 1) __launch_bounds__(kMhcPreThreads)
    mhcPostPreNormDecodeKernel(MhcPreGpuArgs a) {
  mhc::mixer<T, W, HC, 1, 1, kMhcPreCluster, true, true, NW>(a);
}

template <typename T, typename W, int HC>
__global__ void __launch_bounds__(kMhcPreThreads) mhcPrePrefillKernel(MhcPreGpuArgs a) {
  mhc::mixer<T, W, HC, 4, 4, 1>(a);
}

} // namespace glm::kernels
