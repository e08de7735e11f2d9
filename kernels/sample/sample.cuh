// sample: the on-device sampler, token for token runtime/engine/Sampler.cpp's sampleToken
// (contract in sample.h, launch rule in sample_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/sample/sample_gpu.h"

namespace glm::kernels {

namespace sample_detail {

/// What the block agrees on between phases.
struct Shared {
  double total;
  double sum; // the running sequential sum of probabilities
  int64_t kept;
  int64_t pick;
  uint32_t bin, above, binCount;
  int count;
  int stop;
  int pickIndex;
  float bestValue[32];
  int64_t bestIndex[32];
};

/// A 64-bit key whose descending order is sampleToken's order: logit descending (-0 equal to +0),
/// then id ascending. Every key of a row is distinct, and 0 is below all of them.
__device__ __forceinline__ uint64_t orderKey(float v, int64_t i) {
  uint32_t u = __float_as_uint(v);
  if ((u << 1) == 0u) {
    u = 0u;
  }
  const uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
}
__device__ __forceinline__ float keyValue(uint64_t key) {
  const uint32_t ordered = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((ordered & 0x80000000u) ? (ordered & 0x7FFFFFFFu) : ~ordered);
}
__device__ __forceinline__ int32_t keyId(uint64_t key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}

/// f(value, index) for every logit of the row, strided over the block: four loads in flight per
/// thread before any is used (16-byte ones when rows are 16-byte aligned). The order of the calls
/// is fixed, so sums over them are reproducible.
template <typename F>
__device__ __forceinline__ void forEach(const float *row, int64_t vocab, F f) {
  const int64_t stride = blockDim.x;
  if (vocab % 4 == 0) {
    const float4 *quads = reinterpret_cast<const float4 *>(row);
    const int64_t n = vocab / 4;
    int64_t q = threadIdx.x;
    for (; q + 3 * stride < n; q += 4 * stride) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        v[u] = quads[q + u * stride];
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t i = 4 * (q + u * stride);
        f(v[u].x, i);
        f(v[u].y, i + 1);
        f(v[u].z, i + 2);
        f(v[u].w, i + 3);
      }
    }
    for (; q < n; q += stride) {
      const float4 v = quads[q];
      f(v.x, 4 * q);
      f(v.y, 4 * q + 1);
      f(v.z, 4 * q + 2);
      f(v.w, 4 * q + 3);
    }
  } else {
    int64_t i = threadIdx.x;
    for (; i + 3 * stride < vocab; i += 4 * stride) {
      float v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        v[u] = row[i + u * stride];
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        f(v[u], i + u * stride);
      }
    }
    for (; i < vocab; i += stride) {
      f(row[i], i);
    }
  }
}

/// Σ over the block in a fixed order (so every run agrees); every thread gets the total.
__device__ __forceinline__ double blockSumDouble(double v, double *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  }
  if (lane == 0) {
    scratch[warp] = v;
  }
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
    total += scratch[w];
  }
  __syncthreads();
  return total;
}

/// The want-th largest key (1-based) among the row's keys below `bound` (all keys when not
/// bounded): a radix select, 8 bits a pass from the top, stopping as soon as the keys at or above
/// the candidate prefix number exactly `want`. Needs want <= the number of such keys.
__device__ uint64_t selectKey(const float *row, int64_t vocab, bool bounded, uint64_t bound,
                              int64_t want, uint32_t *hist, Shared &sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint64_t prefix = 0;
  uint32_t k = static_cast<uint32_t>(want);
  for (int digit = 7; digit >= 0; --digit) {
    const int shift = 8 * digit;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
      hist[i] = 0u;
    }
    __syncthreads();
    forEach(row, vocab, [&](float v, int64_t i) {
      const uint64_t key = orderKey(v, i);
      if ((bounded && key >= bound) || (digit < 7 && (key >> (shift + 8)) != prefix)) {
        return;
      }
      atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
    });
    __syncthreads();
    if (warp == 0) {
      // Lane L owns bins 255 - 8L down to 248 - 8L: counts from the top of the key range.
      uint32_t c[8], laneTotal = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = hist[255 - 8 * lane - j];
        laneTotal += c[j];
      }
      uint32_t inclusive = laneTotal;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const uint32_t t = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
        if (lane >= offset) {
          inclusive += t;
        }
      }
      const uint32_t exclusive = inclusive - laneTotal;
      if (exclusive < k && k <= inclusive) {
        uint32_t running = exclusive;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (running < k && k <= running + c[j]) {
            sh.bin = 255u - 8u * lane - j;
            sh.above = running;
            sh.binCount = c[j];
          }
          running += c[j];
        }
      }
    }
    __syncthreads();
    prefix = (prefix << 8) | sh.bin;
    if (sh.above + sh.binCount == k) {
      return prefix << shift;
    }
    k -= sh.above;
  }
  return prefix; // not reached: keys are distinct
}

/// Gathers the next chunk of the order into keys[0, count), sorted descending: the `want`
/// largest keys below `bound` (all keys when not bounded), of which there are `remaining`.
__device__ int gatherChunk(const float *row, int64_t vocab, bool bounded, uint64_t bound,
                           int64_t want, int64_t remaining, uint64_t *keys, uint32_t *hist,
                           Shared &sh) {
  const bool all = want >= remaining;
  const int count = static_cast<int>(all ? remaining : want);
  const uint64_t tau = all ? 0 : selectKey(row, vocab, bounded, bound, want, hist, sh);
  if (threadIdx.x == 0) {
    sh.count = 0;
  }
  __syncthreads();
  forEach(row, vocab, [&](float v, int64_t i) {
    const uint64_t key = orderKey(v, i);
    if ((!bounded || key < bound) && key >= tau) {
      keys[atomicAdd(&sh.count, 1)] = key;
    }
  });
  __syncthreads();
  int size = 2;
  while (size < count) {
    size <<= 1;
  }
  for (int i = count + threadIdx.x; i < size; i += blockDim.x) {
    keys[i] = 0; // below every key: sorts last
  }
  __syncthreads();
  // Bitonic sort, descending.
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int partner = i ^ j;
        if (partner > i) {
          const uint64_t x = keys[i], y = keys[partner];
          if ((i & k) == 0 ? x < y : x > y) {
            keys[i] = y;
            keys[partner] = x;
          }
        }
      }
      __syncthreads();
    }
  }
  return count;
}

/// The first draw of SplitMix64 seeded with seed ^ position · 0xD1B54A32D192ED03, as a uniform
/// double in [0, 1) with 53 bits.
__device__ __forceinline__ double uniformDraw(uint64_t seed, int64_t position) {
  uint64_t z =
      (seed ^ (static_cast<uint64_t>(position) * 0xD1B54A32D192ED03ull)) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / 9007199254740992.0;
}

} // namespace sample_detail

__global__ void __launch_bounds__(kSampleThreads, 1) sampleKernel(SampleGpuArgs a) {
  using namespace sample_detail;
  extern __shared__ __align__(16) uint8_t smem[];
  uint64_t *keys = reinterpret_cast<uint64_t *>(smem);
  double *prob = reinterpret_cast<double *>(smem + kSampleChunk * 8);
  __shared__ uint32_t hist[256];
  __shared__ double scratch[32];
  __shared__ Shared sh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = blockIdx.x;
  const int64_t vocab = a.vocab;
  const float *row = a.logits + r * vocab;
  const int64_t position = a.ctx.positions != nullptr ? a.ctx.positions[r] : 0;
  if (position < 0) {
    if (threadIdx.x == 0) {
      a.out[r] = 0; // padding row
    }
    return;
  }
  const int64_t perSequence = a.ctx.rowsPerSequence > 0 ? a.ctx.rowsPerSequence : 1;
  const int32_t *p = a.params != nullptr ? a.params + (r / perSequence) * 8 : nullptr;
  const float temperature = p != nullptr ? __int_as_float(p[0]) : 0.0f;

  if (a.greedy || !(temperature > 0.0f)) {
    // sampleToken's greedy loop keeps the first strictly larger value: the lowest id of the
    // maximum, NaNs never taken (and id 0 when logits[0] is NaN).
    float best = 0.0f;
    int64_t bestIndex = -1;
    forEach(row, vocab, [&](float v, int64_t i) {
      if (v == v && (bestIndex < 0 || v > best || (v == best && i < bestIndex))) {
        best = v;
        bestIndex = i;
      }
    });
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float v = __shfl_xor_sync(0xFFFFFFFFu, best, offset);
      const int64_t i = __shfl_xor_sync(0xFFFFFFFFu, bestIndex, offset);
      if (i >= 0 && (bestIndex < 0 || v > best || (v == best && i < bestIndex))) {
        best = v;
        bestIndex = i;
      }
    }
    if (lane == 0) {
      sh.bestValue[warp] = best;
      sh.bestIndex[warp] = bestIndex;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
        const float v = sh.bestValue[w];
        const int64_t i = sh.bestIndex[w];
        if (i >= 0 && (bestIndex < 0 || v > best || (v == best && i < bestIndex))) {
          best = v;
          bestIndex = i;
        }
      }
      a.out[r] = row[0] != row[0] || bestIndex < 0 ? 0 : static_cast<int32_t>(bestIndex);
    }
    return;
  }

  const float topP = __int_as_float(p[1]), minP = __int_as_float(p[2]);
  const int32_t topK = p[3];
  const uint64_t seed = static_cast<uint64_t>(static_cast<uint32_t>(p[4])) |
                        (static_cast<uint64_t>(static_cast<uint32_t>(p[5])) << 32);
  const int64_t kept0 = topK > 0 && topK < vocab ? topK : vocab; // after top-k
  const double temp = static_cast<double>(temperature);
  const bool topPOn = topP < 1.0f, minPOn = minP > 0.0f;
  // The whole top-k set fits one chunk: every sum runs in sampleToken's sequential order.
  const bool oneChunk = kept0 <= kSampleChunk;

  int count =
      gatherChunk(row, vocab, false, 0, oneChunk ? kept0 : kSampleChunk, vocab, keys, hist, sh);
  const double top = static_cast<double>(keyValue(keys[0])) / temp;
  // prob[j] = exp(l / T - top) / total for the chunk in keys.
  auto fillProbabilities = [&](int n, double total) {
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      prob[j] = exp(static_cast<double>(keyValue(keys[j])) / temp - top) / total;
    }
    __syncthreads();
  };

  double total;
  if (oneChunk) {
    for (int j = threadIdx.x; j < count; j += blockDim.x) {
      prob[j] = exp(static_cast<double>(keyValue(keys[j])) / temp - top);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double t = 0.0;
      for (int j = 0; j < count; ++j) {
        t += prob[j];
      }
      sh.total = t;
    }
    __syncthreads();
    total = sh.total;
  } else {
    // Over more than a chunk the normaliser is a fixed-order parallel sum: it differs from
    // sampleToken's sequential one in the last bits only (see sample.h).
    const bool limited = kept0 < vocab;
    const uint64_t tauK = limited ? selectKey(row, vocab, false, 0, kept0, hist, sh) : 0;
    double part = 0.0;
    forEach(row, vocab, [&](float v, int64_t i) {
      if (!limited || orderKey(v, i) >= tauK) {
        part += exp(static_cast<double>(v) / temp - top);
      }
    });
    total = blockSumDouble(part, scratch);
  }
  fillProbabilities(count, total);
  const double threshold = static_cast<double>(minP) * prob[0];
  __syncthreads(); // read by all before pass A rewrites prob

  // Pass A: sampleToken's top-p and min-p loops and its mass, one running sum in order. prob[j]
  // becomes the cumulative sum through j.
  int64_t kept = kept0;
  double mass = 1.0; // over more than a chunk without cuts: Σ of all probabilities
  bool cumulativeInChunk0 = false;
  bool chunk0InKeys = true;
  if (oneChunk || topPOn || minPOn) {
    int64_t base = 0;
    if (threadIdx.x == 0) {
      sh.sum = 0.0;
    }
    for (;;) {
      if (threadIdx.x == 0) {
        double s = sh.sum;
        int stop = 0;
        int64_t n = base + count;
        for (int j = 0; j < count; ++j) {
          const int64_t at = base + j;
          if (at > 0 && ((topPOn && !(s < static_cast<double>(topP))) ||
                         (minPOn && !(prob[j] >= threshold)))) {
            stop = 1;
            n = at;
            break;
          }
          s += prob[j];
          prob[j] = s;
        }
        if (!stop && base + count >= kept0) {
          stop = 1;
          n = kept0;
        }
        sh.sum = s;
        sh.stop = stop;
        sh.kept = n;
      }
      __syncthreads();
      if (sh.stop) {
        break;
      }
      const uint64_t bound = keys[count - 1];
      base += count;
      __syncthreads();
      count = gatherChunk(row, vocab, true, bound,
                          min(static_cast<int64_t>(kSampleChunk), kept0 - base), vocab - base, keys,
                          hist, sh);
      chunk0InKeys = false;
      fillProbabilities(count, total);
    }
    kept = sh.kept;
    mass = sh.sum;
    cumulativeInChunk0 = chunk0InKeys;
    __syncthreads(); // read by all before pass B resets the sum
  }

  // The draw: the first kept token whose cumulative probability exceeds u, else the last kept.
  const double u = uniformDraw(seed, position) * mass;
  if (cumulativeInChunk0) {
    if (threadIdx.x == 0) {
      sh.pickIndex = static_cast<int>(kept - 1);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < kept; j += blockDim.x) {
      if (u < prob[j]) {
        atomicMin(&sh.pickIndex, j);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      a.out[r] = keyId(keys[sh.pickIndex]);
    }
    return;
  }
  // Pass B: walk the order again from the top, a chunk at a time, with the same running sum.
  if (!chunk0InKeys) {
    count = gatherChunk(row, vocab, false, 0, min(static_cast<int64_t>(kSampleChunk), kept), vocab,
                        keys, hist, sh);
  }
  fillProbabilities(count, total);
  if (threadIdx.x == 0) {
    sh.sum = 0.0;
  }
  int64_t base = 0;
  for (;;) {
    if (threadIdx.x == 0) {
      double s = sh.sum;
      int found = 0;
      int64_t pick = -1;
      for (int j = 0; j < count && base + j < kept; ++j) {
        s += prob[j];
        pick = keyId(keys[j]);
        if (u < s) {
          found = 1;
          break;
        }
      }
      sh.sum = s;
      sh.stop = found || base + count >= kept;
      sh.pick = pick; // the last kept token when none was found
    }
    __syncthreads();
    if (sh.stop) {
      if (threadIdx.x == 0) {
        a.out[r] = static_cast<int32_t>(sh.pick);
      }
      return;
    }
    const uint64_t bound = keys[count - 1];
    base += count;
    __syncthreads();
    count =
        gatherChunk(row, vocab, true, bound, min(static_cast<int64_t>(kSampleChunk), kept - base),
                    vocab - base, keys, hist, sh);
    fillProbabilities(count, total);
  }
}

} // namespace glm::kernels
