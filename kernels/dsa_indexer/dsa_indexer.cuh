// dsa_indexer: GLM-5.3's KPool lightning indexer on the GPU: append, score, filter and select
// kernels (contract in dsa_indexer_gpu.h, math in dsa_indexer.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/common/Ptx.cuh"
#include "kernels/dsa_indexer/dsa_indexer_gpu.h"

namespace glm::kernels {
namespace dsa_detail {

constexpr int kHistShift = 21; // the histogram bins a key by its top 11 bits

/// A score as a u32 whose unsigned order is the float order. -0 is folded into +0 first, so that
/// equal scores (exact zeros from the ReLU are common) have equal keys, as in the reference.
__device__ __forceinline__ uint32_t orderedKey(float score) {
  const uint32_t u = __float_as_uint(score + 0.0f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// One row's part of the workspace (layout in dsaIndexerRowWords).
struct RowView {
  uint32_t *keys;
  uint32_t *above; // bit p: pool p's key is in a bin above the cut bin
  uint32_t *inBin; // bit p: pool p's key is in the cut bin
  uint32_t *hist;
};

__device__ __forceinline__ RowView rowView(const DsaIndexerGpuArgs &a, int64_t r) {
  uint32_t *base = static_cast<uint32_t *>(a.workspace) + r * dsaIndexerRowWords(a.maxPools);
  const int64_t words = (a.maxPools + 31) / 32;
  return {base, base + a.maxPools, base + a.maxPools + words, base + a.maxPools + 2 * words};
}

/// Exclusive prefix sum over the block in thread order (blockDim.x a multiple of 32, <= 1024);
/// `total` gets the block's sum. `scratch` holds 32 words; the call ends synchronised.
__device__ __forceinline__ uint32_t blockExclusiveScan(uint32_t v, uint32_t *scratch,
                                                       uint32_t *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  uint32_t x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(0xFFFFFFFFu, x, o);
    if (lane >= o) {
      x += y;
    }
  }
  if (lane == 31) {
    scratch[warp] = x;
  }
  __syncthreads();
  if (warp == 0) {
    uint32_t s = lane < warps ? scratch[lane] : 0u;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(0xFFFFFFFFu, s, o);
      if (lane >= o) {
        s += y;
      }
    }
    scratch[lane] = s;
  }
  __syncthreads();
  const uint32_t result = (warp > 0 ? scratch[warp - 1] : 0u) + x - v;
  *total = scratch[warps - 1];
  __syncthreads();
  return result;
}

/// The highest bin b of `hist` (bins counts, a multiple of blockDim.x) with at least `need`
/// entries in bins >= b, and the number of entries in bins above b. `scratch` holds 34 words.
__device__ __forceinline__ void findCut(const uint32_t *hist, int bins, uint32_t need,
                                        uint32_t *scratch, uint32_t *cut, uint32_t *aboveCut) {
  // Thread 0 owns the top bins, so the exclusive scan counts the entries above a thread's bins.
  const int per = bins / blockDim.x;
  const int hi = bins - threadIdx.x * per;
  uint32_t local = 0;
  for (int i = hi - per; i < hi; ++i) {
    local += hist[i];
  }
  uint32_t total;
  uint32_t above = blockExclusiveScan(local, scratch, &total);
  if (above < need && above + local >= need) {
    for (int i = hi - 1; i >= hi - per; --i) {
      if (above + hist[i] >= need) {
        scratch[32] = static_cast<uint32_t>(i);
        scratch[33] = above;
        break;
      }
      above += hist[i];
    }
  }
  __syncthreads();
  *cut = scratch[32];
  *aboveCut = scratch[33];
  __syncthreads();
}

__device__ __forceinline__ uint32_t word(const uint4 &v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

using ptx::mmaBf16;

__device__ __forceinline__ void recordScore(uint32_t *keys, uint32_t *hist, int64_t p,
                                            float score) {
  const uint32_t key = orderedKey(score);
  keys[p] = key;
  atomicAdd(&hist[key >> kHistShift], 1u);
}

/// Scores of pools [chunk0, chunk1) with f32 FMA: lanes take heads, the key is broadcast.
template <typename T, typename S>
__device__ __forceinline__ void scoreFma(const DsaIndexerGpuArgs &a, int64_t r, int64_t b,
                                         int64_t chunk0, int64_t chunk1, float *qs, uint32_t *keys,
                                         uint32_t *hist) {
  const int d = a.headDim, heads = a.heads;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float dScale = 1.0f / sqrtf(static_cast<float>(d));
  const float hScale = 1.0f / sqrtf(static_cast<float>(heads));
  const T *q = static_cast<const T *>(a.q) + r * heads * d;
  const T *w = static_cast<const T *>(a.headWeights) + r * heads;
  float *ws = qs + heads * (d + 1); // padded rows: lanes reading different heads hit other banks
  for (int i = threadIdx.x; i < heads * d; i += blockDim.x) {
    qs[(i / d) * (d + 1) + i % d] = toFloat(q[i]);
  }
  for (int h = threadIdx.x; h < heads; h += blockDim.x) {
    ws[h] = toFloat(w[h]) * hScale;
  }
  __syncthreads();
  for (int64_t p = chunk0 + warp; p < chunk1; p += warps) {
    const S *key = reinterpret_cast<const S *>(pagedRow(a.keys, a.ctx, b, p));
    float part = 0.0f;
    for (int h = lane; h < heads; h += 32) {
      const float *qh = qs + h * (d + 1);
      float dot = 0.0f;
      for (int e = 0; e < d; ++e) {
        dot = fmaf(qh[e], toFloat(key[e]), dot);
      }
      part += ws[h] * fmaxf(dot * dScale, 0.0f);
    }
    part = warpSum(part);
    if (lane == 0) {
      recordScore(keys, hist, p, part);
    }
  }
}

/// Scores of pools [chunk0, chunk1) with bf16 mma (heads <= 32, headDim a multiple of 32 up to
/// 128): a warp takes tiles of 16 pools (the A rows) against the 32 heads' queries (B columns, 4
/// n-tiles, read from shared memory), K = headDim. The reduction over K may visit channels in any
/// order as long as A and B use the same one, so each thread loads 8 consecutive channels of a
/// pool's key with one 16-byte load and uses them as its k-pairs of two k-steps: channel
/// c·32 + q·8 + 4s + j (q = lane % 4, s the k-step of the pair, j < 4) is k-index 2q + j of
/// step s for j < 2 and 8 + 2q + j − 2 otherwise.
template <typename T, typename S>
__device__ __forceinline__ void scoreMma(const DsaIndexerGpuArgs &a, int64_t r, int64_t b,
                                         int64_t chunk0, int64_t chunk1, uint16_t *qs,
                                         uint32_t *keys, uint32_t *hist) {
  const int d = a.headDim, heads = a.heads, chunks = d / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qd = lane & 3;
  const float dScale = 1.0f / sqrtf(static_cast<float>(d));
  const float hScale = 1.0f / sqrtf(static_cast<float>(heads));
  const uint4 zero = {0u, 0u, 0u, 0u};
  const uint4 *q =
      reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(a.q) + r * heads * d);
  const T *w = static_cast<const T *>(a.headWeights) + r * heads;
  for (int i = threadIdx.x; i < 32 * d / 8; i += blockDim.x) {
    // Heads beyond `heads` score 0.
    reinterpret_cast<uint4 *>(qs)[i] = i < heads * d / 8 ? q[i] : zero;
  }
  float *wq = reinterpret_cast<float *>(qs + 32 * d); // scaled head weights, 32 (zero-padded)
  if (threadIdx.x < 32) {
    wq[threadIdx.x] = threadIdx.x < heads ? toFloat(w[threadIdx.x]) * hScale : 0.0f;
  }
  __syncthreads();
  // Warp w takes tiles w + 16k and w + 8 + 16k of the chunk, both loaded before either is
  // multiplied.
  for (int64_t pair = chunk0 + warp * 16; pair < chunk1; pair += 16 * 16) {
    uint4 av[2][2][4]; // [tile][row g or g + 8][channel chunk]
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t p = pair + 128 * i + g + 8 * half;
        const uint4 *row =
            p < chunk1 ? reinterpret_cast<const uint4 *>(pagedRow(a.keys, a.ctx, b, p)) : nullptr;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          av[i][half][c] = (row != nullptr && c < chunks) ? row[c * 4 + qd] : zero;
        }
      }
    }
    const bool second = pair + 128 < chunk1; // warp-uniform
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][nt][j] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (c < chunks) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          if (nt * 8 < heads) {
            // B: head nt·8 + g, channels c·32 + qd·8 .. + 8.
            const uint4 bv =
                *reinterpret_cast<const uint4 *>(qs + (nt * 8 + g) * d + c * 32 + qd * 8);
#pragma unroll
            for (int s = 0; s < 2; ++s) {
#pragma unroll
              for (int i = 0; i < 2; ++i) {
                if (i == 0 || second) {
                  mmaBf16(acc[i][nt], word(av[i][0][c], 2 * s), word(av[i][1][c], 2 * s),
                          word(av[i][0][c], 2 * s + 1), word(av[i][1][c], 2 * s + 1),
                          word(bv, 2 * s), word(bv, 2 * s + 1));
                }
              }
            }
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t p0 = pair + 128 * i;
      if (p0 >= chunk1) {
        continue; // warp-uniform
      }
      // acc[i][nt][0..1]: pool g, heads nt·8 + 2qd + {0, 1}; acc[i][nt][2..3]: pool g + 8.
      float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const float w0 = wq[nt * 8 + 2 * qd], w1 = wq[nt * 8 + 2 * qd + 1];
        s0 += w0 * fmaxf(acc[i][nt][0] * dScale, 0.0f) + w1 * fmaxf(acc[i][nt][1] * dScale, 0.0f);
        s1 += w0 * fmaxf(acc[i][nt][2] * dScale, 0.0f) + w1 * fmaxf(acc[i][nt][3] * dScale, 0.0f);
      }
      s0 += __shfl_xor_sync(0xFFFFFFFFu, s0, 1);
      s0 += __shfl_xor_sync(0xFFFFFFFFu, s0, 2);
      s1 += __shfl_xor_sync(0xFFFFFFFFu, s1, 1);
      s1 += __shfl_xor_sync(0xFFFFFFFFu, s1, 2);
      if (qd == 0) {
        if (p0 + g < chunk1) {
          recordScore(keys, hist, p0 + g, s0);
        }
        if (p0 + g + 8 < chunk1) {
          recordScore(keys, hist, p0 + g + 8, s1);
        }
      }
    }
  }
}

template <typename T, typename S> struct UsesMma {
  static constexpr bool value = false;
};
template <> struct UsesMma<Bf16, Bf16> {
  static constexpr bool value = true;
};

} // namespace dsa_detail

/// Kernel 1: clear the row's histogram; the first row of a sequence appends its rows.
template <typename T, typename S, typename W>
__global__ void dsaIndexerAppendKernel(DsaIndexerGpuArgs a) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const dsa_detail::RowView view = dsa_detail::rowView(a, r);
  for (int i = threadIdx.x; i < kDsaHistBins; i += blockDim.x) {
    view.hist[i] = 0u;
  }
  const int32_t rowsPerSequence = a.ctx.rowsPerSequence;
  if (r % rowsPerSequence != 0) {
    return;
  }
  const int64_t b = r / rowsPerSequence;
  const int64_t start = a.ctx.positions[r];
  S *tail = reinterpret_cast<S *>(slotOf(a.tail, a.ctx, b));
  if (start < 0 || tail == nullptr) {
    return; // a padding sequence
  }
  // The sequence's real rows come first; padding rows (negative positions) end a short chunk.
  float real = 0.0f;
  for (int i = threadIdx.x; i < rowsPerSequence; i += blockDim.x) {
    real += a.ctx.positions[r + i] >= 0 ? 1.0f : 0.0f;
  }
  const int64_t n = static_cast<int64_t>(blockSum(real, scratch));
  const int d = a.headDim, kp = a.kpool;
  const T *kIn = static_cast<const T *>(a.k) + r * d;
  const T *gIn = static_cast<const T *>(a.gate) + r * d;
  const W *ape = static_cast<const W *>(a.ape);
  const int64_t end = start + n, firstPool = start / kp, endPool = end / kp;

  // Close pools [firstPool, endPool): their rows before `start` are in the tail slot, the rest
  // are this call's rows. Rounded where HF's bf16 forward rounds (prob, each product, the sum).
  for (int64_t idx = threadIdx.x; idx < (endPool - firstPool) * d; idx += blockDim.x) {
    const int64_t p = firstPool + idx / d;
    const int c = static_cast<int>(idx % d);
    auto keyOf = [&](int i) {
      const int64_t u = p * kp + i;
      return u < start ? toFloat(tail[i * 2 * d + c]) : toFloat(kIn[(u - start) * d + c]);
    };
    auto logitOf = [&](int i) {
      const int64_t u = p * kp + i;
      const float g =
          u < start ? toFloat(tail[i * 2 * d + d + c]) : toFloat(gIn[(u - start) * d + c]);
      return g + toFloat(ape[i * d + c]);
    };
    float peak = -__int_as_float(0x7F800000);
    for (int i = 0; i < kp; ++i) {
      peak = fmaxf(peak, logitOf(i));
    }
    float sum = 0.0f;
    for (int i = 0; i < kp; ++i) {
      sum += expf(logitOf(i) - peak);
    }
    float pooled = 0.0f;
    for (int i = 0; i < kp; ++i) {
      const float prob = roundTo<S>(expf(logitOf(i) - peak) / sum);
      pooled += roundTo<S>(prob * keyOf(i));
    }
    reinterpret_cast<S *>(pagedRow(a.keys, a.ctx, b, p))[c] = fromFloat<S>(pooled);
  }
  __syncthreads(); // the closed pools' reads of the tail slot come before it is overwritten
  const int64_t openStart = endPool * kp > start ? endPool * kp : start;
  for (int64_t idx = threadIdx.x; idx < (end - openStart) * d; idx += blockDim.x) {
    const int64_t u = openStart + idx / d;
    const int c = static_cast<int>(idx % d);
    S *slotRow = tail + (u % kp) * 2 * d;
    slotRow[c] = fromFloat<S>(toFloat(kIn[(u - start) * d + c]));
    slotRow[d + c] = fromFloat<S>(toFloat(gIn[(u - start) * d + c]));
  }
}

/// Kernel 2: scores of the row's candidate pools in this block's chunk, and their histogram. The
/// row's candidates are split evenly over the gridDim.x blocks of the row, in multiples of 128.
template <typename T, typename S>
__global__ void __launch_bounds__(256, 2) dsaIndexerScoreKernel(DsaIndexerGpuArgs a) {
  extern __shared__ __align__(16) uint8_t dsaShared[];
  uint32_t *hist = reinterpret_cast<uint32_t *>(dsaShared);
  uint8_t *qArea = dsaShared + kDsaHistBins * 4;
  const int64_t r = blockIdx.y;
  const int64_t t = a.ctx.positions[r];
  if (t < 0) {
    return;
  }
  const int64_t candidates = (t + 1) / a.kpool;
  const int64_t share = (candidates + gridDim.x - 1) / gridDim.x;
  const int64_t per =
      (share + kDsaScorePoolsPerBlock - 1) / kDsaScorePoolsPerBlock * kDsaScorePoolsPerBlock;
  const int64_t chunk0 = static_cast<int64_t>(blockIdx.x) * per;
  if (candidates <= a.topk / a.kpool || chunk0 >= candidates) {
    return;
  }
  const int64_t chunk1 = chunk0 + per < candidates ? chunk0 + per : candidates;
  const int64_t b = r / a.ctx.rowsPerSequence;
  for (int i = threadIdx.x; i < kDsaHistBins; i += blockDim.x) {
    hist[i] = 0u;
  }
  const dsa_detail::RowView view = dsa_detail::rowView(a, r);
  bool done = false;
  if constexpr (dsa_detail::UsesMma<T, S>::value) {
    if (a.heads <= 32 && a.headDim % 32 == 0 && a.headDim <= 128) {
      dsa_detail::scoreMma<T, S>(a, r, b, chunk0, chunk1, reinterpret_cast<uint16_t *>(qArea),
                                 view.keys, hist);
      done = true;
    }
  }
  if (!done) {
    dsa_detail::scoreFma<T, S>(a, r, b, chunk0, chunk1, reinterpret_cast<float *>(qArea), view.keys,
                               hist);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kDsaHistBins; i += blockDim.x) {
    if (hist[i] != 0u) {
      atomicAdd(&view.hist[i], hist[i]);
    }
  }
}

/// Kernel 3: the cut bin from the row's histogram, and the masks of pools above it and in it.
__global__ void dsaIndexerFilterKernel(DsaIndexerGpuArgs a) {
  __shared__ uint32_t hist[kDsaHistBins];
  __shared__ uint32_t scratch[34];
  const int64_t r = blockIdx.y;
  const int64_t t = a.ctx.positions[r];
  if (t < 0) {
    return;
  }
  const int64_t candidates = (t + 1) / a.kpool;
  const int64_t chunk0 = static_cast<int64_t>(blockIdx.x) * kDsaFilterPoolsPerBlock;
  const uint32_t chosen = static_cast<uint32_t>(a.topk / a.kpool);
  if (candidates <= chosen || chunk0 >= candidates) {
    return;
  }
  const dsa_detail::RowView view = dsa_detail::rowView(a, r);
  for (int i = threadIdx.x; i < kDsaHistBins; i += blockDim.x) {
    hist[i] = view.hist[i];
  }
  __syncthreads();
  uint32_t cut, above;
  dsa_detail::findCut(hist, kDsaHistBins, chosen, scratch, &cut, &above);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int wordsPerWarp = kDsaFilterPoolsPerBlock / 32 / warps;
  for (int j = 0; j < wordsPerWarp; ++j) {
    const int64_t w = chunk0 / 32 + warp * wordsPerWarp + j;
    if (w * 32 >= candidates) {
      break; // warp-uniform
    }
    const int64_t p = w * 32 + lane;
    const bool valid = p < candidates;
    const uint32_t bin = valid ? view.keys[p] >> dsa_detail::kHistShift : 0u;
    const uint32_t hi = __ballot_sync(0xFFFFFFFFu, valid && bin > cut);
    const uint32_t in = __ballot_sync(0xFFFFFFFFu, valid && bin == cut);
    if (lane == 0) {
      view.above[w] = hi;
      view.inBin[w] = in;
    }
  }
}

/// Kernel 4: the exact cut key and the row of selected positions.
__global__ void dsaIndexerSelectKernel(DsaIndexerGpuArgs a) {
  __shared__ uint32_t hist[kDsaHistBins];
  __shared__ uint32_t scratch[34];
  const int64_t r = blockIdx.x;
  int32_t *row = a.selected + r * a.width;
  const int64_t t = a.ctx.positions[r];
  if (t < 0) {
    for (int i = threadIdx.x; i < a.width; i += blockDim.x) {
      row[i] = -1;
    }
    return;
  }
  const int kp = a.kpool;
  const int64_t candidates = (t + 1) / kp;
  const int64_t maxChosen = a.topk / kp;
  const int64_t chosen = candidates < maxChosen ? candidates : maxChosen;
  if (candidates <= maxChosen) {
    for (int64_t i = threadIdx.x; i < candidates * kp; i += blockDim.x) {
      row[i] = static_cast<int32_t>(i);
    }
  } else {
    const dsa_detail::RowView view = dsa_detail::rowView(a, r);
    for (int i = threadIdx.x; i < kDsaHistBins; i += blockDim.x) {
      hist[i] = view.hist[i];
    }
    __syncthreads();
    uint32_t cut, above;
    dsa_detail::findCut(hist, kDsaHistBins, static_cast<uint32_t>(maxChosen), scratch, &cut,
                        &above);
    uint32_t need = static_cast<uint32_t>(maxChosen) - above; // taken from the cut bin
    const int64_t words = (candidates + 31) / 32;
    // Two radix passes over the cut bin's members: key bits [20, 10), then [10, 0).
    uint32_t prefix = cut;
    for (int pass = 0; pass < 2; ++pass) {
      const int shift = pass == 0 ? 10 : 0;
      const uint32_t mask = pass == 0 ? 2047u : 1023u;
      for (int i = threadIdx.x; i < kDsaHistBins; i += blockDim.x) {
        hist[i] = 0u;
      }
      __syncthreads();
      for (int64_t w = threadIdx.x; w < words; w += blockDim.x) {
        uint32_t bits = view.inBin[w];
        while (bits != 0u) {
          const int64_t p = w * 32 + (__ffs(bits) - 1);
          bits &= bits - 1u;
          const uint32_t key = view.keys[p];
          if ((key >> (shift + (pass == 0 ? 11 : 10))) == prefix) {
            atomicAdd(&hist[(key >> shift) & mask], 1u);
          }
        }
      }
      __syncthreads();
      uint32_t digit, over;
      dsa_detail::findCut(hist, pass == 0 ? 2048 : 1024, need, scratch, &digit, &over);
      need -= over;
      prefix = (prefix << (pass == 0 ? 11 : 10)) | digit;
    }
    const uint32_t cutKey = prefix; // the chosen-th largest key; `need` of its equals are taken
    // Pools above the cut key, then the lowest-indexed `need` pools equal to it; written in
    // ascending pool order, each thread owning 8 consecutive mask words of a segment.
    uint32_t eqCarry = 0u, outCarry = 0u;
    for (int64_t seg = 0; seg < words; seg += 8 * static_cast<int64_t>(blockDim.x)) {
      uint32_t fin[8], eq[8];
      uint32_t eqCount = 0u;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t w = seg + threadIdx.x * 8 + j;
        fin[j] = 0u;
        eq[j] = 0u;
        if (w < words) {
          fin[j] = view.above[w];
          uint32_t bits = view.inBin[w];
          while (bits != 0u) {
            const int bit = __ffs(bits) - 1;
            bits &= bits - 1u;
            const uint32_t key = view.keys[w * 32 + bit];
            if (key > cutKey) {
              fin[j] |= 1u << bit;
            } else if (key == cutKey) {
              eq[j] |= 1u << bit;
            }
          }
        }
        eqCount += __popc(eq[j]);
      }
      uint32_t eqTotal, outTotal;
      uint32_t eqBefore = eqCarry + dsa_detail::blockExclusiveScan(eqCount, scratch, &eqTotal);
      uint32_t count = 0u;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t n = __popc(eq[j]);
        uint32_t take = need > eqBefore ? (need - eqBefore < n ? need - eqBefore : n) : 0u;
        eqBefore += n;
        uint32_t x = eq[j];
        for (; take > 0u; --take) {
          fin[j] |= x & (0u - x);
          x &= x - 1u;
        }
        count += __popc(fin[j]);
      }
      uint32_t slot = outCarry + dsa_detail::blockExclusiveScan(count, scratch, &outTotal);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t w = seg + threadIdx.x * 8 + j;
        uint32_t x = fin[j];
        while (x != 0u) {
          const int64_t p = w * 32 + (__ffs(x) - 1);
          x &= x - 1u;
          if (slot < static_cast<uint32_t>(maxChosen)) {
            for (int e = 0; e < kp; ++e) {
              row[slot * kp + e] = static_cast<int32_t>(p * kp + e);
            }
          }
          ++slot;
        }
      }
      eqCarry += eqTotal;
      outCarry += outTotal;
    }
  }
  for (int64_t i = chosen * kp + threadIdx.x; i < a.topk; i += blockDim.x) {
    row[i] = -1;
  }
  // The open pool's tail: positions kp·candidates .. t, then -1.
  for (int64_t i = a.topk + threadIdx.x; i < a.width; i += blockDim.x) {
    const int64_t pos = candidates * kp + (i - a.topk);
    row[i] = (a.width >= a.topk + kp - 1 && pos <= t) ? static_cast<int32_t>(pos) : -1;
  }
}

} // namespace glm::kernels
