// moe_router: sigmoid router scores, then group-limited top-k selection (contract in
// moe_router_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/common/Ptx.cuh"
#include "kernels/moe_router/moe_router_gpu.h"

namespace glm::kernels {

namespace moe_router_detail {

__device__ __forceinline__ float negInf() { return -__int_as_float(0x7F800000); }
__device__ __forceinline__ float quietNan() { return __int_as_float(0x7FC00000); }

/// (value desc, index asc) argmax over one warp's candidates; index < 0 means none. NaN values
/// (taken experts) never win.
__device__ __forceinline__ void warpArgmax(float &value, int &index) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xFFFFFFFFu, value, offset);
    const int i = __shfl_xor_sync(0xFFFFFFFFu, index, offset);
    if (i >= 0 && (index < 0 || v > value || (v == value && i < index))) {
      value = v;
      index = i;
    }
  }
}

/// The lane-local best of values[lane], values[lane + 32], ... then the warp's.
__device__ __forceinline__ int warpArgmaxOf(const float *values, int64_t count, float &best) {
  const int lane = threadIdx.x & 31;
  float value = 0.0f;
  int index = -1;
  for (int64_t i = lane; i < count; i += 32) {
    const float v = values[i];
    if (v == v && (index < 0 || v > value)) { // ascending i: equal values keep the lower index
      value = v;
      index = static_cast<int>(i);
    }
  }
  warpArgmax(value, index);
  best = value;
  return index;
}

/// Eight weights [c, c + 8) of expert row `row` widened to f32 as WeightView widens them: fp8
/// blocks' values times their block's scale, one rounding (c is a multiple of 8, so the eight
/// share a block).
template <typename W>
__device__ __forceinline__ void loadWeights8(const MoeRouterGpuArgs &a, const W *row, int64_t e,
                                             int64_t c, float (&v)[8]) {
  if constexpr (sizeof(W) == 1) {
    const uint2 bits = *reinterpret_cast<const uint2 *>(row + c);
    const float s = a.weightScaleInv[(e / 128) * ((a.hidden + 127) / 128) + c / 128];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t word = j < 4 ? bits.x : bits.y;
      v[j] = __fmul_rn(toFloat(Fp8E4m3{static_cast<uint8_t>(word >> (8 * (j % 4)))}), s);
    }
  } else {
    load8(row + c, v);
  }
}

/// Weight (e, c) widened to f32, as loadWeights8.
template <typename W>
__device__ __forceinline__ float loadWeight(const MoeRouterGpuArgs &a, const W *weight, int64_t e,
                                            int64_t c) {
  if constexpr (sizeof(W) == 1) {
    return __fmul_rn(toFloat(weight[e * a.hidden + c]),
                     a.weightScaleInv[(e / 128) * ((a.hidden + 127) / 128) + c / 128]);
  } else {
    return toFloat(weight[e * a.hidden + c]);
  }
}

} // namespace moe_router_detail

/// s[t][e] = sigmoid(x[t] · w[e]) in f32, for few tokens: one warp per expert streams its row
/// (8 loads of 16 bytes in flight per thread for bf16 weights, 4 for f32) against up to 8 tokens
/// at a time.
template <typename T, typename W>
__global__ void __launch_bounds__(32 * kMoeRouterGemvWarps)
    moeRouterScoresGemvKernel(MoeRouterGpuArgs a) {
  using namespace moe_router_detail;
  constexpr int kTok = kMoeRouterTokensPerPass, kUnroll = sizeof(W) <= 2 ? 8 : 2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kMoeRouterGemvWarps + warp;
  if (e >= a.experts) {
    return;
  }
  const int64_t hidden = a.hidden;
  const T *x = static_cast<const T *>(a.x);
  const W *w = static_cast<const W *>(a.weight) + e * hidden;
  const bool vec = hidden % 8 == 0;
  for (int64_t t0 = 0; t0 < a.tokens; t0 += kTok) {
    const int64_t nt = a.tokens - t0 < kTok ? a.tokens - t0 : kTok;
    float acc[kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      acc[t] = 0.0f;
    }
    if (vec) {
      for (int64_t c0 = lane * 8; c0 < hidden; c0 += 256 * kUnroll) {
        float wv[kUnroll][8];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (c0 + u * 256 < hidden) {
            loadWeights8(a, w, e, c0 + u * 256, wv[u]);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t c = c0 + u * 256;
          if (c < hidden) {
#pragma unroll
            for (int t = 0; t < kTok; ++t) {
              if (t < nt) {
                float xv[8];
                load8(x + (t0 + t) * hidden + c, xv);
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                  acc[t] = fmaf(wv[u][j], xv[j], acc[t]);
                }
              }
            }
          }
        }
      }
    } else {
      for (int64_t c = lane; c < hidden; c += 32) {
        const float wv = loadWeight(a, static_cast<const W *>(a.weight), e, c);
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          if (t < nt) {
            acc[t] = fmaf(wv, toFloat(x[(t0 + t) * hidden + c]), acc[t]);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      const float logit = warpSum(acc[t]);
      if (lane == 0 && t < nt) {
        a.scores[(t0 + t) * a.experts + e] = 1.0f / (1.0f + expf(-logit));
      }
    }
  }
}

/// s[t][e] = sigmoid(x[t] · w[e]) in f32, for few tokens, with every load of a row in flight at
/// once: a warp per expert, its row in segments of 8 16-byte chunks a lane (fp8: 4096 weights, the
/// whole of Flash's row; bf16: 2048), held in registers while the block's warps stage the tokens'
/// activations in shared memory `pass` tokens at a time (moeRouterDecodePass), so that a decode
/// call waits for one HBM round trip, not one per chunk. A lane sums its chunks in ascending order
/// for each token whatever the pass, then the warp adds the lanes (warpSum): a token's score has
/// the same bits at any token count this kernel runs.
template <typename T, typename W>
__global__ void __launch_bounds__(32 * kMoeRouterDecodeWarps)
    moeRouterScoresDecodeKernel(MoeRouterGpuArgs a) {
  using namespace moe_router_detail;
  constexpr int kE = 16 / static_cast<int>(sizeof(W)); // weights a 16-byte chunk holds
  constexpr int kChunks = kMoeRouterDecodeChunks;
  constexpr int64_t kSegment = 32 * kChunks * kE;
  extern __shared__ __align__(16) uint8_t staged[];
  T *xs = reinterpret_cast<T *>(staged);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t hidden = a.hidden;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kMoeRouterDecodeWarps + warp;
  const bool live = e < a.experts; // a warp past the last expert still stages
  const uint8_t *row = static_cast<const uint8_t *>(a.weight) + (live ? e : 0) * hidden * sizeof(W);
  const bool vec = (hidden * sizeof(W)) % 16 == 0 && (reinterpret_cast<uint64_t>(row) & 15) == 0;
  const int64_t blocksPerRow = (hidden + 127) / 128;
  const int pass = static_cast<int>(ptx::dynamicSharedBytes() / (hidden * sizeof(T)));

  ptx::U32x4 w[kChunks];
  float scale[kChunks];
  const auto loadSegment = [&](int64_t s0) {
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int64_t c = s0 + (static_cast<int64_t>(j) * 32 + lane) * kE;
      w[j] = ptx::zero4();
      scale[j] = 1.0f;
      if (!live || c >= hidden) {
        continue;
      }
      if (vec) {
        w[j] = ptx::loadStream(row + c * sizeof(W));
      } else {
        uint32_t words[4] = {0u, 0u, 0u, 0u};
        for (int b = 0; b < 16 && c * static_cast<int64_t>(sizeof(W)) + b < hidden * sizeof(W);
             ++b) {
          words[b / 4] |= static_cast<uint32_t>(row[c * sizeof(W) + b]) << (8 * (b % 4));
        }
        w[j] = ptx::U32x4{words[0], words[1], words[2], words[3]};
      }
      if constexpr (sizeof(W) == 1) {
        // The chunk's 16 weights lie in one 128-wide block (c is a multiple of 16).
        scale[j] = a.weightScaleInv[(e / 128) * blocksPerRow + c / 128];
      }
    }
  };
  loadSegment(0);

  const T *x = static_cast<const T *>(a.x);
  for (int64_t t0 = 0; t0 < a.tokens; t0 += pass) {
    const int nt = static_cast<int>(a.tokens - t0 < pass ? a.tokens - t0 : pass);
    // Stage tokens [t0, t0 + nt): contiguous rows, 16 bytes a thread at a time where they allow.
    __syncthreads(); // the last pass's reads are done
    const int64_t count = nt * hidden;
    const T *from = x + t0 * hidden;
    if ((count * sizeof(T)) % 16 == 0 && (reinterpret_cast<uint64_t>(from) & 15) == 0) {
      for (int64_t i = threadIdx.x; i < count * static_cast<int64_t>(sizeof(T)) / 16;
           i += blockDim.x) {
        reinterpret_cast<ptx::U32x4 *>(xs)[i] =
            ptx::loadShared16(reinterpret_cast<const uint8_t *>(from) + 16 * i);
      }
    } else {
      for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        xs[i] = from[i];
      }
    }
    __syncthreads();
    float acc[kMoeRouterDecodeMaxPass];
#pragma unroll
    for (int t = 0; t < kMoeRouterDecodeMaxPass; ++t) {
      acc[t] = 0.0f;
    }
    for (int64_t s0 = 0; s0 < hidden; s0 += kSegment) {
      // Segment 0 is in registers already, for every pass when it is the whole row.
      if (s0 > 0 || (t0 > 0 && hidden > kSegment)) {
        loadSegment(s0);
      }
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        const int64_t c = s0 + (static_cast<int64_t>(j) * 32 + lane) * kE;
        if (c >= hidden) {
          continue;
        }
        float wv[kE];
        const uint32_t words[4] = {w[j].x, w[j].y, w[j].z, w[j].w};
#pragma unroll
        for (int i = 0; i < kE; ++i) {
          if constexpr (sizeof(W) == 1) {
            // As WeightView widens fp8 blocks: the value times its block's scale, one rounding.
            wv[i] = __fmul_rn(toFloat(Fp8E4m3{static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)))}),
                              scale[j]);
          } else if constexpr (sizeof(W) == 2) {
            wv[i] = __uint_as_float(i % 2 == 0 ? words[i / 2] << 16 : words[i / 2] & 0xFFFF0000u);
          } else {
            wv[i] = __uint_as_float(words[i]);
          }
        }
#pragma unroll
        for (int t = 0; t < kMoeRouterDecodeMaxPass; ++t) {
          if (t < nt) {
            const T *xt = xs + t * hidden + c;
#pragma unroll
            for (int i = 0; i < kE; ++i) {
              // Past the row's end the weights are zero; the activation read stays in the row.
              acc[t] = fmaf(wv[i], c + i < hidden ? toFloat(xt[i]) : 0.0f, acc[t]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kMoeRouterDecodeMaxPass; ++t) {
      if (t < nt) {
        const float logit = warpSum(acc[t]);
        if (lane == 0 && live) {
          a.scores[(t0 + t) * a.experts + e] = 1.0f / (1.0f + expf(-logit));
        }
      }
    }
  }
}

/// The same for many tokens: 64 tokens x 32 experts per block through shared memory, 32 columns
/// of hidden at a time; each thread owns 4 tokens x 2 experts.
template <typename T, typename W>
__global__ void __launch_bounds__(256) moeRouterScoresTiledKernel(MoeRouterGpuArgs a) {
  constexpr int kM = kMoeRouterTileTokens, kN = kMoeRouterTileExperts, kK = 32;
  __shared__ __align__(16) float xs[kK][kM + 4];
  __shared__ __align__(16) float ws[kK][kN + 4];
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kM;
  const int64_t e0 = static_cast<int64_t>(blockIdx.x) * kN;
  const int64_t hidden = a.hidden;
  const T *x = static_cast<const T *>(a.x);
  const W *weight = static_cast<const W *>(a.weight);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][2] = {};
  for (int64_t k0 = 0; k0 < hidden; k0 += kK) {
    __syncthreads();
    for (int i = threadIdx.x; i < kM * kK; i += blockDim.x) {
      const int m = i / kK, k = i % kK;
      const int64_t t = t0 + m;
      xs[k][m] = t < a.tokens && k0 + k < hidden ? toFloat(x[t * hidden + k0 + k]) : 0.0f;
    }
    for (int i = threadIdx.x; i < kN * kK; i += blockDim.x) {
      const int n = i / kK, k = i % kK;
      const int64_t e = e0 + n;
      ws[k][n] = e < a.experts && k0 + k < hidden
                     ? moe_router_detail::loadWeight(a, weight, e, k0 + k)
                     : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kK; ++k) {
      const float4 xv = *reinterpret_cast<const float4 *>(&xs[k][ty * 4]);
      const float2 wv = *reinterpret_cast<const float2 *>(&ws[k][tx * 2]);
      const float xa[4] = {xv.x, xv.y, xv.z, xv.w}, wa[2] = {wv.x, wv.y};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          acc[i][j] = fmaf(xa[i], wa[j], acc[i][j]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t t = t0 + ty * 4 + i, e = e0 + tx * 2 + j;
      if (t < a.tokens && e < a.experts) {
        a.scores[t * a.experts + e] = 1.0f / (1.0f + expf(-acc[i][j]));
      }
    }
  }
}

/// One warp per token: biased scores, group limit, top-k, weights.
template <typename T> __global__ void moeRouterSelectKernel(MoeRouterGpuArgs a) {
  using namespace moe_router_detail;
  __shared__ float choiceAll[kMoeRouterSelectWarps][kMoeRouterMaxExperts];
  __shared__ float groupAll[kMoeRouterSelectWarps][kMoeRouterMaxExperts];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kMoeRouterSelectWarps + warp;
  if (t >= a.tokens) {
    return; // whole warps leave; the rest synchronise per warp only
  }
  const int64_t ne = a.experts;
  float *choice = choiceAll[warp];
  float *groupScore = groupAll[warp];
  const float *s = a.scores + t * ne;
  for (int64_t e = lane; e < ne; e += 32) {
    float bias = 0.0f;
    if (a.correctionBias != nullptr) {
      bias = a.biasBf16 ? toFloat(static_cast<const Bf16 *>(a.correctionBias)[e])
                        : static_cast<const float *>(a.correctionBias)[e];
    }
    choice[e] = s[e] + bias;
  }
  __syncwarp();
  if (a.nGroup > 1) {
    // A group's score is the sum of its two highest biased scores; the topkGroup best groups stay.
    const int64_t groupSize = ne / a.nGroup;
    for (int64_t g = lane; g < a.nGroup; g += 32) {
      float m1 = negInf(), m2 = negInf();
      for (int64_t j = 0; j < groupSize; ++j) {
        const float v = choice[g * groupSize + j];
        if (v > m1) {
          m2 = m1;
          m1 = v;
        } else if (v > m2) {
          m2 = v;
        }
      }
      groupScore[g] = groupSize >= 2 ? m1 + m2 : m1;
    }
    __syncwarp();
    for (int64_t k = 0; k < a.topkGroup; ++k) {
      float best;
      const int g = warpArgmaxOf(groupScore, a.nGroup, best);
      if (lane == 0 && g >= 0) {
        groupScore[g] = quietNan(); // taken: NaN marks a kept group
      }
      __syncwarp();
    }
    for (int64_t e = lane; e < ne; e += 32) {
      const float gs = groupScore[e / groupSize];
      if (gs == gs) {
        choice[e] = negInf();
      }
    }
    __syncwarp();
  }
  int32_t *ids = a.expertIds + t * a.topK;
  float denominator = 1e-20f;
  for (int64_t k = 0; k < a.topK; ++k) {
    float best;
    const int e = warpArgmaxOf(choice, ne, best);
    if (e < 0) {
      break; // fewer candidates than topK: excluded by the host's checks
    }
    if (lane == 0) {
      ids[k] = e;
      choice[e] = quietNan();
    }
    denominator += s[e];
    __syncwarp();
  }
  T *weights = static_cast<T *>(a.expertWeights) + t * a.topK;
  for (int64_t k = lane; k < a.topK; k += 32) {
    const float sk = s[ids[k]];
    const float w = a.normTopkProb ? sk / denominator * a.scaling : sk * a.scaling;
    weights[k] = fromFloat<T>(w);
  }
}

} // namespace glm::kernels
