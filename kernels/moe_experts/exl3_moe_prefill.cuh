// exl3_moe prefill: the routed experts of one MoE layer with EXL3 weights for steps of many tokens,
// grouped per expert, the trellis decoded in registers straight into the tensor cores (contract,
// data flow and roundings in exl3_moe_prefill_gpu.h). The decoder, the trellis ring and the
// Hadamard butterfly are the decode kernel's (exl3_moe.cuh, exl3.cuh); route and combine are
// moe_experts'.
#pragma once

#include "kernels/moe_experts/exl3_moe.cuh"
#include "kernels/moe_experts/exl3_moe_prefill_gpu.h"
#include "kernels/moe_experts/moe_experts.cuh"

namespace glm::kernels {
namespace exl3_moe_prefill_detail {

using namespace exl3_moe_detail;

constexpr int kM = kExl3PrefillTileM;
constexpr int kGroups = kM / 16;
constexpr int kStageBytes = kM * kExl3MoeChunk * 2; // one A stage: 64 rows of 256 bytes
constexpr int kResultRow = kExl3PrefillColumns + 4; // f32 results per row in the epilogue

/// The local expert of a slot, or -1.
__device__ __forceinline__ int64_t localExpertOf(const MoeExpertsGpuArgs &a, int64_t slot) {
  const int64_t e = static_cast<int64_t>(a.expertIds[slot]) - a.firstExpert;
  return e >= 0 && e < a.experts ? e : -1;
}

/// v (a warp's 128 values, lane l holding l + 32i) := H128(v) · 1/√128, stored as fp16 at
/// dst[lane + 32i].
__device__ __forceinline__ void rotateToHalf(float (&v)[4], uint16_t *dst, int lane) {
  exl3Butterfly128(v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    dst[lane + 32 * i] = static_cast<uint16_t>(halfBits(v[i] * kHadamardScale));
  }
}

/// Two weights of the decoder's split form (fp16 lo | hi << 16, or the exact value | 0) as one
/// B-fragment register holding their fp16 sums: lo + hi rounded once, as §3.1 adds them.
__device__ __forceinline__ uint32_t packPair(uint32_t w0, uint32_t w1) {
  const uint32_t lo = __byte_perm(w0, w1, 0x5410), hi = __byte_perm(w0, w1, 0x7632);
  uint32_t r;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(lo), "r"(hi));
  return r;
}

/// The block's 64-slot tile: the `index`-th tile of the step in increasing expert id. Ends with
/// the block synchronised; expert -1 when the step has fewer tiles.
struct Tile {
  int expert;
  int first; // position of the tile's first slot in the expert's list
  int rows;
};

__device__ __forceinline__ Tile findTile(const MoeExpertsGpuArgs &a, int index, int *shared) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x < 32) {
    int found = -1, first = 0, rows = 0, before = 0;
    for (int base = 0; base < a.experts && found < 0; base += 32) {
      const int e = base + lane;
      const int count = e < a.experts ? a.counts[e] : 0;
      const int tiles = (count + kM - 1) / kM;
      int inclusive = tiles;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xFFFFFFFFu, inclusive, o);
        inclusive += lane >= o ? v : 0;
      }
      const bool mine = before + inclusive > index && before + inclusive - tiles <= index;
      const unsigned holder = __ballot_sync(0xFFFFFFFFu, mine);
      if (holder != 0) {
        const int h = __ffs(holder) - 1;
        found = __shfl_sync(0xFFFFFFFFu, e, h);
        const int start = __shfl_sync(0xFFFFFFFFu, before + inclusive - tiles, h);
        const int n = __shfl_sync(0xFFFFFFFFu, count, h);
        first = (index - start) * kM;
        rows = min(kM, n - first);
      }
      before += __shfl_sync(0xFFFFFFFFu, inclusive, 31);
    }
    if (lane == 0) {
      shared[0] = found;
      shared[1] = first;
      shared[2] = rows;
    }
  }
  __syncthreads();
  return Tile{shared[0], shared[1], shared[2]};
}

/// The GEMM's k loop for one warp: its two tile columns nt0, nt0 + 1 of matrix w over every
/// 128-chunk of its (padded) k, against the block's 64 slot rows, whose A rows start at
/// actBase + slot · actStride. Fast: the warp's matrix has the kernel's K
/// and codebook and its tiles stream through the ring; else the generic decoder reads them.
template <int K, int CB, bool Fast>
__device__ __forceinline__ void gemmLoop(const Matrix &w, const uint16_t *actBase,
                                         int64_t actStride, int64_t k, const int32_t *slots,
                                         int rows, int groups, uint8_t *stages, uint32_t *ring,
                                         int64_t nt0, bool active, float (&acc)[2][2][kGroups][4]) {
  const int lane = threadIdx.x & 31;
  const int chunks = static_cast<int>(k / kExl3MoeChunk);
  const FastTiles<K, CB> tiles(lane);
  constexpr int kSlotWords = kRingSlotWords<K>;
  const int64_t rowWords = w.tilesN * 8 * K;
  // One cp.async group per chunk: its A rows (64 × 16 units of 16 bytes, swizzled: unit u of row r
  // at u ^ (r & 7), so that ldmatrix's 8 row addresses hit 8 distinct bank quads) and this warp's
  // 16 trellis tiles. Rows past the tile's are zero-filled.
  auto load = [&](int c) {
    if (c < chunks) {
      uint8_t *stage = stages + (c % kExl3PrefillStages) * kStageBytes;
      for (int i = threadIdx.x; i < kM * 16; i += kExl3PrefillThreads) {
        const int row = i >> 4, u = i & 15;
        const bool valid = row < rows;
        const uint16_t *src =
            valid ? actBase + slots[row] * actStride + c * kExl3MoeChunk + 8 * u : actBase;
        cpAsync16(sharedAddress(stage + row * 256 + ((u ^ (row & 7)) << 4)), src, valid ? 16 : 0);
      }
      if constexpr (Fast) {
        if (active) {
          copyTiles<K>(ring + (c % kRingSlots) * kSlotWords,
                       w.trellis + (static_cast<int64_t>(c) * kChunkTiles * w.tilesN + nt0) * 8 * K,
                       rowWords, lane);
        }
      }
    }
    cpAsyncCommit();
  };
  static_assert(kRingSlots == kExl3PrefillStages, "a ring slot per A stage");
  load(0);
  load(1);
  for (int c = 0; c < chunks; ++c) {
    cpAsyncWait<1>(); // chunk c has landed (c + 1 may be in flight)
    blockSync();      // for every thread; and every warp is done with chunk c - 1's stage
    load(c + 2);
    if (!active) {
      continue;
    }
    const uint32_t stage = sharedAddress(stages + (c % kExl3PrefillStages) * kStageBytes);
    const uint32_t *words = ring + (c % kRingSlots) * kSlotWords;
#pragma unroll
    for (int kk = 0; kk < kChunkTiles; ++kk) {
      // ldmatrix x4 of rows 16g + (lane & 15), k-units 2kk (lanes < 16) and 2kk + 1: the
      // standard m16n8k16 A fragment.
      uint32_t af[kGroups][4];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        if (g == 0 || g < groups) {
          const int row = 16 * g + (lane & 15), u = 2 * kk + (lane >> 4);
          ldmatrixX4(af[g], stage + row * 256 + ((u ^ (row & 7)) << 4));
        }
      }
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        uint32_t split[8];
        if constexpr (Fast) {
          tiles.decode(words + (2 * kk + t) * 8 * K, split);
        } else {
          const Weights8 any =
              decodeAny(w.tile(static_cast<int64_t>(c) * kChunkTiles + kk, nt0 + t), w.bits,
                        w.codebook, lane);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            split[i] = any.w[i];
          }
        }
        // (w0, w1): k-rows 2t', 2t' + 1 of column lane / 4; (w2, w3): 2t' + 8, 2t' + 9; w4..w7
        // the same rows of the tile's second 8 columns (t' = lane & 3, §5.1).
        const uint32_t b0 = packPair(split[0], split[1]), b1 = packPair(split[2], split[3]);
        const uint32_t b2 = packPair(split[4], split[5]), b3 = packPair(split[6], split[7]);
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          if (g == 0 || g < groups) {
            mmaF16(acc[t][0][g], af[g][0], af[g][1], af[g][2], af[g][3], b0, b1);
            mmaF16(acc[t][1][g], af[g][0], af[g][1], af[g][2], af[g][3], b2, b3);
          }
        }
      }
    }
  }
  cpAsyncWait<0>();
  blockSync(); // the stages are free for the epilogue
}

} // namespace exl3_moe_prefill_detail

/// act[s][m] = fp16(H(x[t] ∘ suh_m[e]) / √128) for gate (m = 0) and up (m = 1) over pad128(hidden),
/// x = 0 past hidden. One block per slot (non-local slots return), one warp per 128-chunk.
__global__ void __launch_bounds__(kExl3PrefillThreads)
    exl3MoePrefillRotateKernel(const Exl3MoePrefillGpuArgs a) {
  using namespace exl3_moe_prefill_detail;
  const int64_t slot = blockIdx.x;
  const int64_t e = localExpertOf(a.moe, slot);
  if (e < 0) {
    return;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t k = a.gate.k, hidden = a.moe.hidden;
  const Bf16 *x = static_cast<const Bf16 *>(a.moe.x) + (slot / a.moe.topK) * hidden;
  const int64_t tasks = 2 * (k / 128);
  for (int64_t task = warp; task < tasks; task += kExl3PrefillThreads / 32) {
    const int m = static_cast<int>(task & 1);
    const int64_t k0 = (task >> 1) * 128;
    const uint16_t *suh = reinterpret_cast<const uint16_t *>(m ? a.up.slice + a.up.suhOffset
                                                               : a.gate.slice + a.gate.suhOffset) +
                          e * k;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t f = k0 + lane + 32 * i;
      v[i] = f < hidden ? toFloat(x[f]) * exl3HalfToFloat(suh[f]) : 0.0f;
    }
    rotateToHalf(v, a.act + (slot * 2 + m) * k + k0, lane);
  }
}

/// act[s] = fp16(H(h ∘ suh_down[e]) / √128) over pad128(inter), h = silu(min(g, limit)) ·
/// clamp(u, ±limit) from z (gate and up after their output rotation), 0 past inter. One block per
/// slot, one warp per 128-block.
__global__ void __launch_bounds__(kExl3PrefillThreads)
    exl3MoePrefillSwigluKernel(const Exl3MoePrefillGpuArgs a) {
  using namespace exl3_moe_prefill_detail;
  const int64_t slot = blockIdx.x;
  const int64_t e = localExpertOf(a.moe, slot);
  if (e < 0) {
    return;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n = a.down.k, inter = a.moe.inter;
  const float limit = a.moe.limit;
  const float *g = a.z + slot * 2 * n, *u = g + n;
  const uint16_t *suh = reinterpret_cast<const uint16_t *>(a.down.slice + a.down.suhOffset) + e * n;
  for (int64_t f0 = 128 * warp; f0 < n; f0 += 128 * (kExl3PrefillThreads / 32)) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t f = f0 + lane + 32 * i;
      // Comparisons rather than fminf/fmaxf so that a NaN passes the clamps as torch.clamp's does.
      const float x = g[f] > limit ? limit : g[f];
      const float y = u[f] > limit ? limit : (u[f] < -limit ? -limit : u[f]);
      v[i] = f < inter ? x / (1.0f + expf(-x)) * y * exl3HalfToFloat(suh[f]) : 0.0f;
    }
    rotateToHalf(v, a.act + slot * n + f0, lane);
  }
}

/// One 64-slot tile of one expert against 256 output columns of gate or up (Down false, matrix
/// blockIdx.z) or down: C = act · Ŵ over all of k, then H + svh per 128 columns; gate/up write f32
/// z, down writes bf16(w · bf16(y)) to contrib.
template <int K, int CB, bool Down>
__global__ void __launch_bounds__(kExl3PrefillThreads, 2)
    exl3MoePrefillGemmKernel(const Exl3MoePrefillGpuArgs a) {
  using namespace exl3_moe_prefill_detail;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t slots[kM];
  __shared__ int tileShared[3];
  const Tile tile = findTile(a.moe, static_cast<int>(blockIdx.y), tileShared);
  if (tile.expert < 0) {
    return;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int m = Down ? 2 : static_cast<int>(blockIdx.z);
  Matrix w;
  if (m == 0) {
    w = matrixOf(a.gate, tile.expert);
  } else if (m == 1) {
    w = matrixOf(a.up, tile.expert);
  } else {
    w = matrixOf(a.down, tile.expert);
  }
  // act: [slot][pad128(inter)] for down, [slot][gate, up][pad128(hidden)] for gate and up.
  const int64_t k = Down ? a.down.k : a.gate.k;
  const uint16_t *actBase = Down ? a.act : a.act + m * k;
  const int64_t actStride = Down ? k : 2 * k;
  if (threadIdx.x < kM) {
    slots[threadIdx.x] = threadIdx.x < tile.rows
                             ? a.moe.lists[static_cast<int64_t>(tile.expert) * a.moe.tokens +
                                           tile.first + threadIdx.x]
                             : 0;
  }
  __syncthreads();
  const int rows = tile.rows, groups = (rows + 15) / 16;
  const int64_t nt0 = 16 * static_cast<int64_t>(blockIdx.x) + 2 * warp;
  const bool active = nt0 < w.tilesN;

  float acc[2][2][kGroups][4];
  zeroAccumulators<kGroups>(acc);
  uint32_t *ring = reinterpret_cast<uint32_t *>(smem + kExl3PrefillStages * kStageBytes) +
                   warp * kRingSlots * kRingSlotWords<K>;
  if (w.bits == K && w.codebook == CB) {
    gemmLoop<K, CB, true>(w, actBase, actStride, k, slots, rows, groups, smem, ring, nt0, active,
                          acc);
  } else {
    gemmLoop<K, CB, false>(w, actBase, actStride, k, slots, rows, groups, smem, ring, nt0, active,
                           acc);
  }

  // Epilogue: results to shared memory [row][256 columns], then H + svh per (row, 128 columns).
  float *result = reinterpret_cast<float *>(smem);
  if (active) {
#pragma unroll
    for (int t = 0; t < 2; ++t) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          const int row = 16 * g + (lane >> 2);
          const int col = 32 * warp + 16 * t + 8 * h + 2 * (lane & 3);
          float *at = result + row * kResultRow + col;
          at[0] = acc[t][h][g][0];
          at[1] = acc[t][h][g][1];
          at[8 * kResultRow] = acc[t][h][g][2];
          at[8 * kResultRow + 1] = acc[t][h][g][3];
        }
      }
    }
  }
  __syncthreads();
  const int64_t n = w.tilesN * 16;
  const int64_t column0 = static_cast<int64_t>(blockIdx.x) * kExl3PrefillColumns;
  for (int task = warp; task < 2 * rows; task += kExl3PrefillThreads / 32) {
    const int row = task >> 1, half = task & 1;
    const int64_t c0 = column0 + 128 * half;
    if (c0 >= n) {
      continue;
    }
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = result[row * kResultRow + 128 * half + lane + 32 * i];
    }
    exl3Butterfly128(v);
    const int64_t slot = slots[row];
    if constexpr (Down) {
      const int64_t hidden = a.moe.hidden;
      const float weight = toFloat(static_cast<const Bf16 *>(a.moe.expertWeights)[slot]);
      Bf16 *contrib = static_cast<Bf16 *>(a.moe.contrib) + slot * hidden;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t col = c0 + lane + 32 * i;
        if (col < hidden) {
          const float y = v[i] * kHadamardScale * halfAt(w.svh, col);
          contrib[col] = fromFloat<Bf16>(weight * roundTo<Bf16>(y));
        }
      }
    } else {
      float *z = a.z + (slot * 2 + m) * n;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t col = c0 + lane + 32 * i;
        z[col] = v[i] * kHadamardScale * halfAt(w.svh, col);
      }
    }
  }
}

} // namespace glm::kernels
