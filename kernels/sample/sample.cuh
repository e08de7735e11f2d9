// sample: the on-device sampler, token for token the reference's sampleRef (contract in sample.h,
// launch rules in sample_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/common/Ptx.cuh"
#include "kernels/sample/sample_gpu.h"

namespace glm::kernels {

__global__ void __launch_bounds__(kProcessThreads) sampleProcessKernel(SampleGpuArgs a) {
  const int64_t r = blockIdx.x;
  const int64_t position = a.ctx.positions[r];
  const int64_t b = r / a.ctx.rowsPerSequence;
  const SampleWords p = a.params[b];
  if (position < 0 || !sampleProcesses(p)) {
    return;
  }
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kProcessSlice;
  const int64_t last = min(first + static_cast<int64_t>(kProcessSlice), a.vocab);
  const float *in = a.logits + r * a.vocab;
  float *out = a.processed + r * a.vocab;
  const uint32_t *mask = p.hasMask ? a.mask + b * maskWords(a.vocab) : nullptr;
  const float minusInfinity = __int_as_float(0xFF800000); // NVRTC has no INFINITY
  for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x) {
    out[i] = mask == nullptr || ((mask[i / 32] >> (i % 32)) & 1u) ? in[i] : minusInfinity;
  }
  __syncthreads();
  // Ids are distinct, so each entry's add is the only one on its token.
  const int32_t *bias = a.bias + b * 2 * kSampleBiasEntries;
  for (int e = threadIdx.x; e < p.biasCount; e += blockDim.x) {
    const int32_t id = bias[2 * e];
    if (id >= first && id < last) {
      out[id] = __fadd_rn(out[id], __int_as_float(bias[2 * e + 1]));
    }
  }
  __syncthreads();
  const int32_t slot = a.ctx.slots[b];
  if (slot < 0) {
    return;
  }
  const uint32_t *counts = a.counts + static_cast<int64_t>(slot) * a.vocab;
  for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x) {
    const uint32_t c = counts[i];
    if (c != 0u) {
      out[i] = penalizedLogit(out[i], c, p);
    }
  }
}

namespace sample_detail {

constexpr int kWarps = kSampleThreads / 32;

/// One row's slice in this block, and the state every block of the cluster keeps alike.
struct Row {
  const float *x; // the row (processed or raw logits)
  int64_t first, last;
  float top, invTemperature; // 1 / T
  SampleShared *sh;
  uint32_t round; // cluster rounds so far: selects the double buffers
};

__device__ __forceinline__ uint64_t weightOf(const Row &row, float x) {
  return sampleWeight(sampleExp(sampleDistance(x, row.top, row.invTemperature)));
}

/// f(key, value) for every token of this block's slice; four loads in flight per thread.
template <typename F> __device__ __forceinline__ void forEachKey(const Row &row, F f) {
  const int64_t stride = blockDim.x;
  int64_t i = row.first + threadIdx.x;
  for (; i + 3 * stride < row.last; i += 4 * stride) {
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      v[u] = row.x[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      f(orderKey(v[u], i + u * stride), v[u]);
    }
  }
  for (; i < row.last; i += stride) {
    f(orderKey(row.x[i], i), row.x[i]);
  }
}

/// The cluster-wide max (isMax) or sum of every thread's `v`; every thread gets it.
__device__ uint64_t clusterReduce(Row &row, uint64_t v, bool isMax) {
  SampleShared &sh = *row.sh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    v = isMax ? (o > v ? o : v) : v + o;
  }
  if (lane == 0) {
    sh.partial[warp] = v;
  }
  __syncthreads();
  const uint32_t buffer = row.round & 1u;
  if (threadIdx.x == 0) {
    uint64_t b = sh.partial[0];
    for (int w = 1; w < kWarps; ++w) {
      b = isMax ? (sh.partial[w] > b ? sh.partial[w] : b) : b + sh.partial[w];
    }
    sh.blockValue[buffer] = b;
  }
  ptx::clusterSync();
  if (threadIdx.x == 0) {
    const uint32_t address = ptx::sharedAddress(&sh.blockValue[buffer]);
    uint64_t r = ptx::loadClusterSharedU64(address, 0);
    for (unsigned c = 1; c < kSampleCluster; ++c) {
      const uint64_t o = ptx::loadClusterSharedU64(address, c);
      r = isMax ? (o > r ? o : r) : r + o;
    }
    sh.value = r;
  }
  __syncthreads();
  ++row.round;
  return sh.value;
}

/// What a select found: the key, the count or weight of the keys above it in the order, and the
/// count or weight of its whole domain (the first histogram's).
struct Selected {
  uint64_t key;
  uint64_t above;
  uint64_t total;
};

/// How a select's target follows from its domain's total: a fixed target (top-k, the logprobs'
/// k-th), floor(top_p · W) (the top-p cut), or the draw's D + 1 with D = floor(u · M).
struct Target {
  enum Kind { Fixed, Fraction, Draw } kind;
  uint64_t value;  // Fixed: the target; Draw: the draw's 53 bits
  double fraction; // Fraction: top_p
  __device__ uint64_t of(uint64_t total) const {
    switch (kind) {
    case Fraction:
      return static_cast<uint64_t>(fraction * static_cast<double>(total));
    case Draw:
      return drawTarget(value, total) + 1;
    default:
      return value;
    }
  }
};

/// The first key in the order among keys >= lo at which the running count (byWeight false) or
/// running weight reaches the target (the top key for a target of 0; the last key when the
/// weight runs out first). A radix descent from the top byte: each pass one histogram of the slice,
/// summed over the cluster; the first one's total sets the target. Each warp counts into its own
/// histogram: a row's logits share their top bits, so a block-wide one queues its atomics on a
/// few bins (aggregating a warp's lanes per bin first, with match_any and redux, measured slower).
__device__ Selected selectKey(Row &row, uint64_t lo, bool byWeight, Target goal, uint64_t topKey) {
  SampleShared &sh = *row.sh;
  const int lane = threadIdx.x & 31;
  uint64_t prefix = 0, remaining = 0, above = 0, total = 0;
  for (int digit = 7; digit >= 0; --digit) {
    const int shift = 8 * digit;
    const int warp = threadIdx.x >> 5;
    for (int b = lane; b < kSampleBins; b += 32) {
      sh.warpCount[warp][b] = 0u;
      sh.warpMass[warp][b] = 0u;
    }
    __syncwarp();
    forEachKey(row, [&](uint64_t key, float x) {
      if (key < lo || (digit < 7 && (key >> (shift + 8)) != prefix)) {
        return;
      }
      const uint32_t b = static_cast<uint32_t>(key >> shift) & 0xFFu;
      atomicAdd(&sh.warpCount[warp][b], 1u);
      if (byWeight) {
        atomicAdd(reinterpret_cast<unsigned long long *>(&sh.warpMass[warp][b]),
                  static_cast<unsigned long long>(weightOf(row, x)));
      }
    });
    __syncthreads();
    const uint32_t buffer = row.round & 1u;
    for (int b = threadIdx.x; b < kSampleBins; b += blockDim.x) {
      uint32_t c = 0;
      uint64_t m = 0;
      for (int w = 0; w < kWarps; ++w) {
        c += sh.warpCount[w][b];
        m += sh.warpMass[w][b];
      }
      sh.blockCount[buffer][b] = c;
      sh.blockMass[buffer][b] = m;
    }
    ptx::clusterSync();
    for (int b = threadIdx.x; b < kSampleBins; b += blockDim.x) {
      const uint32_t ca = ptx::sharedAddress(&sh.blockCount[buffer][b]);
      const uint32_t ma = ptx::sharedAddress(&sh.blockMass[buffer][b]);
      uint32_t c = 0;
      uint64_t m = 0;
      for (unsigned r = 0; r < kSampleCluster; ++r) {
        c += ptx::loadClusterSharedU32(ca, r);
        m += ptx::loadClusterSharedU64(ma, r);
      }
      sh.rowCount[b] = c;
      sh.rowMass[b] = m;
    }
    __syncthreads();
    ++row.round;
    if (digit == 7) {
      for (int b = 0; b < kSampleBins; ++b) {
        total += byWeight ? sh.rowMass[b] : sh.rowCount[b];
      }
      remaining = goal.of(total);
      if (remaining == 0) {
        return {topKey, 0, total};
      }
    }
    if (threadIdx.x < 32) {
      // Lane L holds bins 255 - 8L down to 248 - 8L: the order from the top.
      uint64_t v[8];
      uint32_t c[8];
      uint64_t laneTotal = 0;
      uint32_t nonEmpty = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int b = 255 - 8 * lane - j;
        c[j] = sh.rowCount[b];
        v[j] = byWeight ? sh.rowMass[b] : c[j];
        laneTotal += v[j];
        nonEmpty |= c[j] != 0u ? 1u << j : 0u;
      }
      uint64_t inclusive = laneTotal;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const uint64_t t = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
        if (lane >= offset) {
          inclusive += t;
        }
      }
      const uint64_t exclusive = inclusive - laneTotal;
      const uint32_t reached =
          __ballot_sync(0xFFFFFFFFu, exclusive < remaining && remaining <= inclusive);
      // None reaches (the weight ran out): the last non-empty bin.
      const uint32_t filled = __ballot_sync(0xFFFFFFFFu, nonEmpty != 0u);
      const int owner = reached != 0u ? __ffs(reached) - 1 : 31 - __clz(filled);
      if (lane == owner) {
        int pick = 0;
        uint64_t before = exclusive;
        if (reached != 0u) {
          for (int j = 0; j < 8; ++j) {
            if (c[j] != 0u && before + v[j] >= remaining) {
              pick = j;
              break;
            }
            before += v[j];
          }
        } else {
          for (int j = 0; j < 8; ++j) {
            pick = c[j] != 0u ? j : pick;
          }
          for (int j = 0; j < pick; ++j) {
            before += v[j];
          }
        }
        sh.bin = static_cast<uint32_t>(255 - 8 * lane - pick);
        sh.above = before;
        sh.binCount = c[pick];
      }
    }
    __syncthreads();
    const uint64_t bin = sh.bin;
    remaining -= sh.above < remaining ? sh.above : remaining;
    above += sh.above;
    prefix = (prefix << 8) | bin;
    if (digit == 0) {
      return {prefix, above, total};
    }
    if (sh.binCount == 1u) {
      // The bin's one key: the largest (the only) key of the domain under the prefix.
      uint64_t best = 0;
      forEachKey(row, [&](uint64_t key, float) {
        if (key >= lo && (key >> shift) == prefix && key > best) {
          best = key;
        }
      });
      return {clusterReduce(row, best, true), above, total};
    }
  }
  return {prefix, above, total}; // not reached
}

} // namespace sample_detail

__global__ void __cluster_dims__(kSampleCluster, 1, 1) __launch_bounds__(kSampleThreads)
    sampleKernel(SampleGpuArgs a) {
  using namespace sample_detail;
  extern __shared__ __align__(16) uint8_t smem[];
  SampleShared &sh = *reinterpret_cast<SampleShared *>(smem);
  constexpr int kOut = 1 + kSampleTopLogprobs;
  const int64_t r = blockIdx.x / kSampleCluster;
  const unsigned rank = ptx::clusterRank();
  const bool writer = rank == 0;
  int32_t *ids = a.ids + r * kOut;
  float *logprobs = a.logprobs + r * kOut;
  const int64_t position = a.ctx.positions[r];
  if (position < 0) {
    // Every block of the cluster leaves here alike: none reads another's shared memory.
    for (int j = threadIdx.x; writer && j < kOut; j += blockDim.x) {
      ids[j] = j == 0 ? 0 : -1; // padding row
      logprobs[j] = 0.0f;
    }
    return;
  }
  const SampleWords p = a.params[r / a.ctx.rowsPerSequence];
  const int64_t slice = (a.vocab + kSampleCluster - 1) / kSampleCluster;
  Row row;
  row.x = (sampleProcesses(p) ? a.processed : a.logits) + r * a.vocab;
  row.first = min(static_cast<int64_t>(rank) * slice, a.vocab);
  row.last = min(row.first + slice, a.vocab);
  row.sh = &sh;
  row.round = 0;
  const bool greedy = a.greedy || !(p.temperature > 0.0f);
  row.invTemperature = inverseTemperature(greedy ? 1.0f : p.temperature);

  // The top key: greedy's token, and l_0 for the weights.
  uint64_t best = 0;
  forEachKey(row, [&](uint64_t key, float) { best = key > best ? key : best; });
  const uint64_t topKey = clusterReduce(row, best, true);
  row.top = keyValue(topKey);
  uint64_t pick = topKey;

  if (!greedy) {
    // Top-k: the k-th key bounds the order from below.
    uint64_t lo = 0;
    if (p.topK > 0 && p.topK < a.vocab) {
      lo =
          selectKey(row, 0, false, {Target::Fixed, static_cast<uint64_t>(p.topK), 0.0}, topKey).key;
    }
    if (p.topP < 1.0f) {
      // The shortest prefix whose weight reaches floor(top_p · W): at least the top token.
      const Selected cut =
          selectKey(row, lo, true, {Target::Fraction, 0, static_cast<double>(p.topP)}, topKey);
      lo = cut.key;
    }
    if (p.minP > 0.0f) {
      // The first token after the top whose exp falls below min_p ends the kept prefix.
      uint64_t failing = 0;
      forEachKey(row, [&](uint64_t key, float x) {
        if (key >= lo && key != topKey &&
            !(sampleExp(sampleDistance(x, row.top, row.invTemperature)) >= p.minP) &&
            key > failing) {
          failing = key;
        }
      });
      const uint64_t firstFailing = clusterReduce(row, failing, true);
      lo = firstFailing != 0 ? firstFailing + 1 : lo;
    }
    // The draw: D = floor(u · M), M the kept weight (the select's first total), and the first
    // token whose running weight exceeds D; the top token when M is 0.
    const uint64_t seed = static_cast<uint64_t>(p.seedLo) | (static_cast<uint64_t>(p.seedHi) << 32);
    const Selected drawn =
        selectKey(row, lo, true, {Target::Draw, philoxBits53(seed, position + 1), 0.0}, topKey);
    pick = drawn.total != 0 ? drawn.key : topKey;
  }

  if (p.logprobs < 0) {
    ptx::clusterSync(); // no block leaves while another may still read its shared memory
    for (int j = threadIdx.x; writer && j < kOut; j += blockDim.x) {
      ids[j] = j == 0 ? keyId(pick) : -1;
      logprobs[j] = 0.0f;
    }
    return;
  }
  // Logprobs of the distribution sampled from, before its truncation: each token's distance below
  // the top over T less log Σ e, the sum over the whole row's weights.
  uint64_t part = 0;
  forEachKey(row, [&](uint64_t, float x) { part += weightOf(row, x); });
  const uint64_t all = clusterReduce(row, part, false);
  const double lse = log(static_cast<double>(all)) - kSampleWeightBits * 0.6931471805599453;
  auto logprob = [&](float x) {
    return static_cast<float>(
        __dsub_rn(static_cast<double>(sampleDistance(x, row.top, row.invTemperature)), lse));
  };
  const int k = static_cast<int>(min(static_cast<int64_t>(p.logprobs), a.vocab));
  if (threadIdx.x == 0) {
    sh.listCount = 0;
  }
  __syncthreads();
  if (k > 0) {
    const uint64_t kth =
        selectKey(row, 0, false, {Target::Fixed, static_cast<uint64_t>(k), 0.0}, topKey).key;
    forEachKey(row, [&](uint64_t key, float) {
      if (key >= kth) {
        sh.list[atomicAdd(&sh.listCount, 1u)] = key;
      }
    });
  }
  ptx::clusterSync();
  if (writer && threadIdx.x == 0) {
    // The k keys of the whole row, gathered from every block and sorted (k <= 20).
    uint64_t top[kSampleTopLogprobs];
    int count = 0;
    for (unsigned c = 0; c < kSampleCluster; ++c) {
      const uint32_t n = ptx::loadClusterSharedU32(ptx::sharedAddress(&sh.listCount), c);
      for (uint32_t e = 0; e < n && count < kSampleTopLogprobs; ++e) {
        uint64_t key = ptx::loadClusterSharedU64(ptx::sharedAddress(&sh.list[e]), c);
        int at = count++;
        while (at > 0 && top[at - 1] < key) {
          top[at] = top[at - 1];
          --at;
        }
        top[at] = key;
      }
    }
    ids[0] = keyId(pick);
    logprobs[0] = logprob(keyValue(pick));
    for (int j = 1; j < kOut; ++j) {
      ids[j] = j <= count ? keyId(top[j - 1]) : -1;
      logprobs[j] = j <= count ? logprob(keyValue(top[j - 1])) : 0.0f;
    }
  }
  ptx::clusterSync(); // block 0 has read every block's list
}

} // namespace glm::kernels
