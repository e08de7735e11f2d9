// moe_experts: the routed experts' clamped-SwiGLU MLPs and their weighted sum, as decode kernels
// (each expert's weights streamed once per step) and grouped prefill kernels (contract in
// moe_experts_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/common/Ptx.cuh"
#include "kernels/moe_experts/moe_experts_gpu.h"

namespace glm::kernels {

namespace moe_experts_detail {

using kernels::load8; // Device.cuh's, beside the ragged overload below
/// The same for any alignment and a ragged end: elements at or past `end` read as zero.
template <typename E>
__device__ __forceinline__ void load8(const E *p, int64_t at, int64_t end, bool vec,
                                      float (&v)[8]) {
  if (vec && at + 8 <= end) {
    load8(p + at, v);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[j] = at + j < end ? toFloat(p[at + j]) : 0.0f;
    }
  }
}

/// Eight weights as loaded: one 16-byte word of bf16, two of f32. Decode kernels issue a batch of
/// these before converting any, so that many loads are in flight per thread.
template <typename W> struct Raw8 {
  uint4 q[sizeof(W) / 2];
};
template <typename W> __device__ __forceinline__ void loadRaw8(const W *p, Raw8<W> &r) {
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(W) / 2); ++i) {
    r.q[i] = __ldg(reinterpret_cast<const uint4 *>(p) + i);
  }
}
__device__ __forceinline__ void widen8(const Raw8<Bf16> &r, float (&v)[8]) {
  const uint32_t w[4] = {r.q[0].x, r.q[0].y, r.q[0].z, r.q[0].w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}
__device__ __forceinline__ void widen8(const Raw8<float> &r, float (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    v[4 * i] = __uint_as_float(r.q[i].x);
    v[4 * i + 1] = __uint_as_float(r.q[i].y);
    v[4 * i + 2] = __uint_as_float(r.q[i].z);
    v[4 * i + 3] = __uint_as_float(r.q[i].w);
  }
}

/// The decode kernels' blocks work for one expert: the expert of slot blockIdx.y, served by the
/// block of its first slot. The prologue caches the step's expert ids in shared memory, returns
/// false for a slot of another rank's expert or a later slot of an expert, and `nextGroup`
/// gathers the expert's slots, kDecodeGroup at a time, in slot order.
struct DecodeSlots {
  static constexpr int kCache = 1024;
  int32_t ids[kCache];
  int64_t group[kMoeDecodeGroup];
  int64_t resume;
  int count;
  int duplicate;
};

__device__ __forceinline__ int32_t idAt(const MoeExpertsGpuArgs &a, const DecodeSlots &sh,
                                        int64_t j) {
  return j < DecodeSlots::kCache ? sh.ids[j] : a.expertIds[j];
}

__device__ __forceinline__ bool decodePrologue(const MoeExpertsGpuArgs &a, DecodeSlots &sh,
                                               int64_t slot) {
  const int64_t slots = a.tokens * a.topK;
  for (int64_t j = threadIdx.x; j < slots && j < DecodeSlots::kCache; j += blockDim.x) {
    sh.ids[j] = a.expertIds[j];
  }
  if (threadIdx.x == 0) {
    sh.duplicate = 0;
  }
  __syncthreads();
  const int32_t id = idAt(a, sh, slot);
  for (int64_t j = threadIdx.x; j < slot; j += blockDim.x) {
    if (idAt(a, sh, j) == id) {
      sh.duplicate = 1;
    }
  }
  __syncthreads();
  return sh.duplicate == 0;
}

/// Warp 0 gathers the next slots of blockIdx.y's expert from `next` on; then the block syncs.
/// Returns how many (0: done).
__device__ __forceinline__ int nextGroup(const MoeExpertsGpuArgs &a, DecodeSlots &sh,
                                         int64_t &next) {
  constexpr int kGroup = kMoeDecodeGroup;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t slots = a.tokens * a.topK;
  const int32_t id = idAt(a, sh, blockIdx.y);
  __syncthreads(); // the previous group is no longer read
  if (warp == 0) {
    int count = 0;
    int64_t pos = next;
    while (count < kGroup && pos < slots) {
      const int64_t j = pos + lane;
      const bool match = j < slots && idAt(a, sh, j) == id;
      const unsigned ballot = __ballot_sync(0xFFFFFFFFu, match);
      const int found = __popc(ballot);
      const int take = found < kGroup - count ? found : kGroup - count;
      const int rank = __popc(ballot & ((1u << lane) - 1u));
      if (match && rank < take) {
        sh.group[count + rank] = j;
      }
      if (take < found) {
        // Resume at the first match not taken.
        const unsigned rest = __ballot_sync(0xFFFFFFFFu, match && rank == take);
        pos += __ffs(rest) - 1;
      } else {
        pos += 32;
      }
      count += take;
    }
    if (lane == 0) {
      sh.count = count;
      sh.resume = pos;
    }
  }
  __syncthreads();
  next = sh.resume;
  return sh.count;
}

/// The clamped SwiGLU of one (gate, up) pair, rounded to T where HF's bf16 forward rounds: the
/// projections, silu(a) (torch's x / (1 + e^-x) in f32), and the product. Comparisons rather than
/// fminf/fmaxf, so that a NaN passes the clamps as torch.clamp's does (as swiglu.cuh).
template <typename T> __device__ __forceinline__ float swigluAct(float g, float u, float limit) {
  g = roundTo<T>(g);
  u = roundTo<T>(u);
  const float x = g > limit ? limit : g;
  const float y = u > limit ? limit : (u < -limit ? -limit : u);
  const float silu = roundTo<T>(x / (1.0f + expf(-x)));
  return roundTo<T>(silu * y);
}

/// This rank's index of slot s's expert, or -1 when another rank owns it.
__device__ __forceinline__ int localExpert(const MoeExpertsGpuArgs &a, int64_t s) {
  const int64_t e = static_cast<int64_t>(a.expertIds[s]) - a.firstExpert;
  return e >= 0 && e < a.experts ? static_cast<int>(e) : -1;
}

/// Two bf16 values packed as one 32-bit store.
__device__ __forceinline__ void storeBf16x2(Bf16 *p, float lo, float hi) {
  const uint32_t v = static_cast<uint32_t>(fromFloat<Bf16>(lo).bits) |
                     (static_cast<uint32_t>(fromFloat<Bf16>(hi).bits) << 16);
  *reinterpret_cast<uint32_t *>(p) = v;
}

/// This lane's share of R × kMoeDecodeGroup dot products over [0, n): acc[r][g] += rows[r] ·
/// vecs[g] for the first `count` vectors (warpSum completes them). The weight rows stream in
/// 16-byte loads, kUnroll per row in flight before any is used, which is what keeps a decode step's
/// weight reads at the copy bandwidth; n % 8 != 0 falls back to bounds-checked loads.
template <int R, int kUnroll, typename T, typename W>
__device__ __forceinline__ void warpRowDots(const W *const (&rows)[R],
                                            const T *const (&vecs)[kMoeDecodeGroup], int count,
                                            int64_t n, int lane, float (&acc)[R][kMoeDecodeGroup]) {
  if (n % 8 == 0) {
    for (int64_t c0 = lane * 8; c0 < n; c0 += 256 * kUnroll) {
      Raw8<W> raw[kUnroll][R];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 256;
        if (c < n) {
#pragma unroll
          for (int r = 0; r < R; ++r) {
            loadRaw8(rows[r] + c, raw[u][r]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 256;
        if (c < n) {
#pragma unroll
          for (int g = 0; g < kMoeDecodeGroup; ++g) {
            if (g < count) {
              float xv[8];
              load8(vecs[g] + c, xv);
#pragma unroll
              for (int r = 0; r < R; ++r) {
                float wv[8];
                widen8(raw[u][r], wv);
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                  acc[r][g] = fmaf(wv[j], xv[j], acc[r][g]);
                }
              }
            }
          }
        }
      }
    }
    return;
  }
  for (int64_t c = lane * 8; c < n; c += 256) {
    float wv[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      load8(rows[r], c, n, false, wv[r]);
    }
#pragma unroll
    for (int g = 0; g < kMoeDecodeGroup; ++g) {
      if (g < count) {
        float xv[8];
        load8(vecs[g], c, n, false, xv);
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            acc[r][g] = fmaf(wv[r][j], xv[j], acc[r][g]);
          }
        }
      }
    }
  }
}

} // namespace moe_experts_detail

// ===== decode
// =====================================================================================

/// Gate and up rows of one expert against the tokens that chose it; h into `act`.
template <typename T, typename W>
__global__ void __launch_bounds__(256, 2) moeExpertsGateUpKernel(MoeExpertsGpuArgs a) {
  using namespace moe_experts_detail;
  constexpr int kGroup = kMoeDecodeGroup;
  // 12 (bf16) or 8 (f32) loads of 16 bytes in flight per thread, within 128 registers.
  constexpr int kUnroll = sizeof(W) == 2 ? 3 : 1;
  __shared__ DecodeSlots sh;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e = localExpert(a, blockIdx.y);
  if (e < 0 || !decodePrologue(a, sh, blockIdx.y)) {
    return;
  }
  const int64_t hidden = a.hidden, inter = a.inter;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMoeGateUpRows + warp * 2;
  const T *x = static_cast<const T *>(a.x);
  const W *gate = static_cast<const W *>(a.gate) + static_cast<int64_t>(e) * inter * hidden;
  const W *up = static_cast<const W *>(a.up) + static_cast<int64_t>(e) * inter * hidden;
  T *act = static_cast<T *>(a.act);
  // Rows past inter read row 0 (harmless) and are never stored.
  const W *rows[4] = {gate + (row0 < inter ? row0 : 0) * hidden,
                      up + (row0 < inter ? row0 : 0) * hidden,
                      gate + (row0 + 1 < inter ? row0 + 1 : 0) * hidden,
                      up + (row0 + 1 < inter ? row0 + 1 : 0) * hidden};
  int64_t next = blockIdx.y;
  for (;;) {
    const int count = nextGroup(a, sh, next);
    if (count == 0) {
      break;
    }
    int64_t slotOf[kGroup], tokenOf[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      slotOf[g] = g < count ? sh.group[g] : 0;
      tokenOf[g] = slotOf[g] / a.topK;
    }
    float acc[4][kGroup];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        acc[r][g] = 0.0f;
      }
    }
    const T *xs[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      xs[g] = x + tokenOf[g] * hidden;
    }
    warpRowDots<4, kUnroll>(rows, xs, count, hidden, lane, acc);
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      if (g < count) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          acc[r][g] = warpSum(acc[r][g]);
        }
        if (lane < 2 && row0 + lane < inter) {
          const float gv = lane == 0 ? acc[0][g] : acc[2][g];
          const float uv = lane == 0 ? acc[1][g] : acc[3][g];
          act[slotOf[g] * inter + row0 + lane] = fromFloat<T>(swigluAct<T>(gv, uv, a.limit));
        }
      }
    }
  }
}

/// Down rows of one expert against the slots that chose it: each slot's bf16(w · bf16(y)) (or its
/// f32 value) into contrib; moeExpertsCombineKernel sums them per token in expert order.
template <typename T, typename W>
__global__ void __launch_bounds__(256, 2) moeExpertsDownKernel(MoeExpertsGpuArgs a) {
  using namespace moe_experts_detail;
  constexpr int kGroup = kMoeDecodeGroup;
  constexpr int kUnroll = sizeof(W) == 2 ? 8 : 4; // 16 loads of 16 bytes in flight per thread
  constexpr int kRowsPerWarp = kMoeDownRows / 8;
  __shared__ DecodeSlots sh;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e = localExpert(a, blockIdx.y);
  if (e < 0 || !decodePrologue(a, sh, blockIdx.y)) {
    return;
  }
  const int64_t hidden = a.hidden, inter = a.inter;
  const T *act = static_cast<const T *>(a.act);
  const T *routeWeights = static_cast<const T *>(a.expertWeights);
  T *contrib = static_cast<T *>(a.contrib);
  const W *down = static_cast<const W *>(a.down) + static_cast<int64_t>(e) * hidden * inter;
  int64_t next = blockIdx.y;
  for (;;) {
    const int count = nextGroup(a, sh, next);
    if (count == 0) {
      break;
    }
    int64_t slotOf[kGroup];
    float w[kGroup];
    const T *hs[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      slotOf[g] = g < count ? sh.group[g] : 0;
      w[g] = toFloat(routeWeights[slotOf[g]]);
      hs[g] = act + slotOf[g] * inter;
    }
#pragma unroll
    for (int pair = 0; pair < kRowsPerWarp / 2; ++pair) {
      const int64_t row0 =
          static_cast<int64_t>(blockIdx.x) * kMoeDownRows + warp * kRowsPerWarp + pair * 2;
      if (row0 >= hidden) {
        break;
      }
      const int nRows = row0 + 1 < hidden ? 2 : 1;
      const W *rows[2] = {down + row0 * inter, down + (row0 + nRows - 1) * inter};
      float acc[2][kGroup];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          acc[r][g] = 0.0f;
        }
      }
      warpRowDots<2, kUnroll>(rows, hs, count, inter, lane, acc);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (g < count) {
          const float y0 = warpSum(acc[0][g]);
          const float y1 = warpSum(acc[1][g]);
          if (lane < nRows) {
            const float c = roundTo<T>(w[g] * roundTo<T>(lane == 0 ? y0 : y1));
            contrib[slotOf[g] * hidden + row0 + lane] = fromFloat<T>(c);
          }
        }
      }
    }
  }
}

// ===== prefill ==================================================================================

/// Each local expert's slots in slot order: lists[e][0, counts[e]).
__global__ void moeExpertsRouteKernel(MoeExpertsGpuArgs a) {
  __shared__ int warpCounts[32];
  __shared__ int total;
  const int e = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int64_t slots = a.tokens * a.topK;
  int32_t *list = a.lists + static_cast<int64_t>(e) * a.tokens;
  if (threadIdx.x == 0) {
    total = 0;
  }
  __syncthreads();
  for (int64_t base = 0; base < slots; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    const bool match = j < slots && moe_experts_detail::localExpert(a, j) == e;
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, match);
    if (lane == 0) {
      warpCounts[warp] = __popc(ballot);
    }
    __syncthreads();
    int before = total;
    for (int w = 0; w < warp; ++w) {
      before += warpCounts[w];
    }
    const int at = before + __popc(ballot & ((1u << lane) - 1u));
    // A token selects an expert at most once, so a list holds at most `tokens` slots.
    if (match && at < a.tokens) {
      list[at] = static_cast<int32_t>(j);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < warps; ++w) {
        total += warpCounts[w];
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    a.counts[e] = total < a.tokens ? total : static_cast<int>(a.tokens);
  }
}

/// f32 FMA gate/up over a 64-slot x 32-row tile of one expert: x rows gathered by slot, both
/// projections per block so that the activation is applied in the epilogue.
template <typename T, typename W>
__global__ void moeExpertsGroupedGateUpKernel(MoeExpertsGpuArgs a) {
  using namespace moe_experts_detail;
  constexpr int kM = kMoeTileM, kN = kMoeSimtTileN, kK = 16;
  __shared__ float as[kK][kM + 4];
  __shared__ float bs[kK][2 * kN + 4]; // columns [0, kN) gate rows, [kN, 2 kN) up rows
  __shared__ int64_t tokenOf[kM];
  __shared__ int64_t slotOf[kM];
  const int e = blockIdx.z;
  const int count = a.counts[e];
  const int m0 = blockIdx.y * kM;
  if (m0 >= count) {
    return;
  }
  const int64_t hidden = a.hidden, inter = a.inter;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kN;
  const T *x = static_cast<const T *>(a.x);
  const W *gate = static_cast<const W *>(a.gate) + static_cast<int64_t>(e) * inter * hidden;
  const W *up = static_cast<const W *>(a.up) + static_cast<int64_t>(e) * inter * hidden;
  for (int m = threadIdx.x; m < kM; m += blockDim.x) {
    const int64_t s = m0 + m < count ? a.lists[static_cast<int64_t>(e) * a.tokens + m0 + m] : -1;
    slotOf[m] = s;
    tokenOf[m] = s >= 0 ? s / a.topK : -1;
  }
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16; // 4 slots x (2 gate + 2 up) each
  float accG[4][2] = {}, accU[4][2] = {};
  for (int64_t k0 = 0; k0 < hidden; k0 += kK) {
    __syncthreads();
    for (int i = threadIdx.x; i < kM * kK; i += blockDim.x) {
      const int m = i / kK, k = i % kK;
      const int64_t t = tokenOf[m];
      as[k][m] = t >= 0 && k0 + k < hidden ? toFloat(x[t * hidden + k0 + k]) : 0.0f;
    }
    for (int i = threadIdx.x; i < 2 * kN * kK; i += blockDim.x) {
      const int n = i / kK, k = i % kK;
      const int64_t row = n0 + (n % kN);
      const W *src = n < kN ? gate : up;
      bs[k][n] = row < inter && k0 + k < hidden ? toFloat(src[row * hidden + k0 + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      float xv[4], gv[2], uv[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        xv[i] = as[k][ty * 4 + i];
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        gv[j] = bs[k][tx * 2 + j];
        uv[j] = bs[k][kN + tx * 2 + j];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          accG[i][j] = fmaf(xv[i], gv[j], accG[i][j]);
          accU[i][j] = fmaf(xv[i], uv[j], accU[i][j]);
        }
      }
    }
  }
  T *act = static_cast<T *>(a.act);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t s = slotOf[ty * 4 + i];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t row = n0 + tx * 2 + j;
      if (s >= 0 && row < inter) {
        act[s * inter + row] = fromFloat<T>(swigluAct<T>(accG[i][j], accU[i][j], a.limit));
      }
    }
  }
}

/// f32 FMA down projection over a 64-slot x 64-row tile of one expert; each slot's w · y into
/// contrib.
template <typename T, typename W> __global__ void moeExpertsGroupedDownKernel(MoeExpertsGpuArgs a) {
  using namespace moe_experts_detail;
  constexpr int kM = kMoeTileM, kN = kMoeSimtDownTileN, kK = 16;
  __shared__ float as[kK][kM + 4];
  __shared__ float bs[kK][kN + 4];
  __shared__ int64_t slotOf[kM];
  const int e = blockIdx.z;
  const int count = a.counts[e];
  const int m0 = blockIdx.y * kM;
  if (m0 >= count) {
    return;
  }
  const int64_t hidden = a.hidden, inter = a.inter;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kN;
  const T *act = static_cast<const T *>(a.act);
  const W *down = static_cast<const W *>(a.down) + static_cast<int64_t>(e) * hidden * inter;
  for (int m = threadIdx.x; m < kM; m += blockDim.x) {
    slotOf[m] = m0 + m < count ? a.lists[static_cast<int64_t>(e) * a.tokens + m0 + m] : -1;
  }
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16; // 4 slots x 4 rows each
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < inter; k0 += kK) {
    __syncthreads();
    for (int i = threadIdx.x; i < kM * kK; i += blockDim.x) {
      const int m = i / kK, k = i % kK;
      const int64_t s = slotOf[m];
      as[k][m] = s >= 0 && k0 + k < inter ? toFloat(act[s * inter + k0 + k]) : 0.0f;
    }
    for (int i = threadIdx.x; i < kN * kK; i += blockDim.x) {
      const int n = i / kK, k = i % kK;
      const int64_t row = n0 + n;
      bs[k][n] = row < hidden && k0 + k < inter ? toFloat(down[row * inter + k0 + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      float hv[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        hv[i] = as[k][ty * 4 + i];
        wv[i] = bs[k][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j] = fmaf(hv[i], wv[j], acc[i][j]);
        }
      }
    }
  }
  T *contrib = static_cast<T *>(a.contrib);
  const T *routeWeights = static_cast<const T *>(a.expertWeights);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t s = slotOf[ty * 4 + i];
    if (s < 0) {
      continue;
    }
    const float w = toFloat(routeWeights[s]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = n0 + tx * 4 + j;
      if (row < hidden) {
        contrib[s * hidden + row] = fromFloat<T>(roundTo<T>(w * roundTo<T>(acc[i][j])));
      }
    }
  }
}

/// Tensor-core gate/up (T = W = Bf16): a 64-slot x 128-row tile of one expert, both projections,
/// 8 warps of 32 slots x 32 rows (x2), a 3-stage cp.async pipeline of 32-column slices.
__global__ void moeExpertsMmaGateUpKernel(MoeExpertsGpuArgs a) {
  using namespace moe_experts_detail;
  constexpr int kM = kMoeTileM, kN = kMoeMmaTileN, kK = kMoeMmaTileK, kStages = kMoeMmaStages;
  constexpr int kRow = kMoeMmaRowBytes;
  constexpr int kStageBytes = (kM + 2 * kN) * kRow; // x rows, then gate rows, then up rows
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int64_t tokenOf[kM];
  __shared__ int64_t slotOf[kM];
  const int e = blockIdx.z;
  const int count = a.counts[e];
  const int m0 = blockIdx.y * kM;
  if (m0 >= count) {
    return;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t hidden = a.hidden, inter = a.inter;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kN;
  const Bf16 *x = static_cast<const Bf16 *>(a.x);
  const Bf16 *gate = static_cast<const Bf16 *>(a.gate) + static_cast<int64_t>(e) * inter * hidden;
  const Bf16 *up = static_cast<const Bf16 *>(a.up) + static_cast<int64_t>(e) * inter * hidden;
  for (int m = threadIdx.x; m < kM; m += blockDim.x) {
    const int64_t s = m0 + m < count ? a.lists[static_cast<int64_t>(e) * a.tokens + m0 + m] : -1;
    slotOf[m] = s;
    tokenOf[m] = s >= 0 ? s / a.topK : -1;
  }
  __syncthreads();
  const int kTiles = static_cast<int>(hidden / kK);
  auto load = [&](int stage, int kt) {
    uint8_t *base = smem + stage * kStageBytes;
    const int64_t k0 = static_cast<int64_t>(kt) * kK;
    // x: 64 rows x 4 chunks of 16 bytes, one per thread.
    {
      const int r = threadIdx.x >> 2, c = threadIdx.x & 3;
      const int64_t t = tokenOf[r];
      const Bf16 *src = t >= 0 ? x + t * hidden + k0 + c * 8 : x;
      ptx::cpAsync16(ptx::sharedAddress(base + r * kRow + c * 16), src, t >= 0 ? 16 : 0);
    }
    // gate and up: 256 rows x 4 chunks, four per thread.
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int i = threadIdx.x + q * 256;
      const int r = i >> 2, c = i & 3;
      const int64_t row = n0 + (r % kN);
      const Bf16 *matrix = r < kN ? gate : up;
      const bool valid = row < inter;
      const Bf16 *src = valid ? matrix + row * hidden + k0 + c * 8 : matrix;
      ptx::cpAsync16(ptx::sharedAddress(base + (kM + r) * kRow + c * 16), src, valid ? 16 : 0);
    }
  };
  const int wm = warp >> 2, wn = warp & 3; // 2 x 4 warps: 32 slots x 32 rows each
  float accG[2][4][4] = {}, accU[2][4][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kTiles) {
      load(s, s);
    }
    ptx::cpAsyncCommit();
  }
  for (int kt = 0; kt < kTiles; ++kt) {
    ptx::cpAsyncWait<kStages - 2>();
    __syncthreads();
    const uint8_t *base = smem + (kt % kStages) * kStageBytes;
#pragma unroll
    for (int kk = 0; kk < kK; kk += 16) {
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int r = wm * 32 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ptx::ldmatrixX4(af[mt], ptx::sharedAddress(base + r * kRow + (kk + (lane >> 4) * 8) * 2));
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) { // gate rows, then up rows
        uint32_t bf[2][4];
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
          const int r = kM + half * kN + wn * 32 + nb * 16 + (lane & 7) + (lane >> 4) * 8;
          ptx::ldmatrixX4(bf[nb],
                          ptx::sharedAddress(base + r * kRow + (kk + ((lane >> 3) & 1) * 8) * 2));
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const uint32_t b0 = bf[nt >> 1][(nt & 1) * 2], b1 = bf[nt >> 1][(nt & 1) * 2 + 1];
            ptx::mmaBf16(half == 0 ? accG[mt][nt] : accU[mt][nt], af[mt][0], af[mt][1], af[mt][2],
                         af[mt][3], b0, b1);
          }
        }
      }
    }
    const int next = kt + kStages - 1;
    if (next < kTiles) {
      load(next % kStages, next);
    }
    ptx::cpAsyncCommit();
  }
  ptx::cpAsyncWait<0>();
  Bf16 *act = static_cast<Bf16 *>(a.act);
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = wm * 32 + mt * 16 + g + half * 8;
      const int64_t s = slotOf[m];
      if (s < 0) {
        continue;
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int64_t row = n0 + wn * 32 + nt * 8 + tq * 2;
        if (row < inter) { // inter is even (a multiple of 32): row + 1 < inter too
          const float h0 = swigluAct<Bf16>(accG[mt][nt][half * 2], accU[mt][nt][half * 2], a.limit);
          const float h1 =
              swigluAct<Bf16>(accG[mt][nt][half * 2 + 1], accU[mt][nt][half * 2 + 1], a.limit);
          storeBf16x2(act + s * inter + row, h0, h1);
        }
      }
    }
  }
}

/// Tensor-core down projection (T = W = Bf16): a 64-slot x 128-row tile of one expert, 4 warps of
/// 32 slots x 64 rows; each slot's bf16(w · bf16(y)) into contrib.
__global__ void moeExpertsMmaDownKernel(MoeExpertsGpuArgs a) {
  using namespace moe_experts_detail;
  constexpr int kM = kMoeTileM, kN = kMoeMmaTileN, kK = kMoeMmaTileK, kStages = kMoeMmaStages;
  constexpr int kRow = kMoeMmaRowBytes;
  constexpr int kStageBytes = (kM + kN) * kRow;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int64_t slotOf[kM];
  const int e = blockIdx.z;
  const int count = a.counts[e];
  const int m0 = blockIdx.y * kM;
  if (m0 >= count) {
    return;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t hidden = a.hidden, inter = a.inter;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kN;
  const Bf16 *act = static_cast<const Bf16 *>(a.act);
  const Bf16 *down = static_cast<const Bf16 *>(a.down) + static_cast<int64_t>(e) * hidden * inter;
  for (int m = threadIdx.x; m < kM; m += blockDim.x) {
    slotOf[m] = m0 + m < count ? a.lists[static_cast<int64_t>(e) * a.tokens + m0 + m] : -1;
  }
  __syncthreads();
  const int kTiles = static_cast<int>(inter / kK);
  auto load = [&](int stage, int kt) {
    uint8_t *base = smem + stage * kStageBytes;
    const int64_t k0 = static_cast<int64_t>(kt) * kK;
#pragma unroll
    for (int q = 0; q < 2; ++q) { // h: 64 rows x 4 chunks
      const int i = threadIdx.x + q * 128;
      const int r = i >> 2, c = i & 3;
      const int64_t s = slotOf[r];
      const Bf16 *src = s >= 0 ? act + s * inter + k0 + c * 8 : act;
      ptx::cpAsync16(ptx::sharedAddress(base + r * kRow + c * 16), src, s >= 0 ? 16 : 0);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) { // down: 128 rows x 4 chunks
      const int i = threadIdx.x + q * 128;
      const int r = i >> 2, c = i & 3;
      const int64_t row = n0 + r;
      const bool valid = row < hidden;
      const Bf16 *src = valid ? down + row * inter + k0 + c * 8 : down;
      ptx::cpAsync16(ptx::sharedAddress(base + (kM + r) * kRow + c * 16), src, valid ? 16 : 0);
    }
  };
  const int wm = warp >> 1, wn = warp & 1; // 2 x 2 warps: 32 slots x 64 rows each
  float acc[2][8][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kTiles) {
      load(s, s);
    }
    ptx::cpAsyncCommit();
  }
  for (int kt = 0; kt < kTiles; ++kt) {
    ptx::cpAsyncWait<kStages - 2>();
    __syncthreads();
    const uint8_t *base = smem + (kt % kStages) * kStageBytes;
#pragma unroll
    for (int kk = 0; kk < kK; kk += 16) {
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int r = wm * 32 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ptx::ldmatrixX4(af[mt], ptx::sharedAddress(base + r * kRow + (kk + (lane >> 4) * 8) * 2));
      }
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        uint32_t bf[4];
        const int r = kM + wn * 64 + nb * 16 + (lane & 7) + (lane >> 4) * 8;
        ptx::ldmatrixX4(bf, ptx::sharedAddress(base + r * kRow + (kk + ((lane >> 3) & 1) * 8) * 2));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          ptx::mmaBf16(acc[mt][nb * 2], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[0], bf[1]);
          ptx::mmaBf16(acc[mt][nb * 2 + 1], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[2],
                       bf[3]);
        }
      }
    }
    const int next = kt + kStages - 1;
    if (next < kTiles) {
      load(next % kStages, next);
    }
    ptx::cpAsyncCommit();
  }
  ptx::cpAsyncWait<0>();
  Bf16 *contrib = static_cast<Bf16 *>(a.contrib);
  const Bf16 *routeWeights = static_cast<const Bf16 *>(a.expertWeights);
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = wm * 32 + mt * 16 + g + half * 8;
      const int64_t s = slotOf[m];
      if (s < 0) {
        continue;
      }
      const float w = toFloat(routeWeights[s]);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int64_t row = n0 + wn * 64 + nt * 8 + tq * 2;
        if (row < hidden) { // hidden is even (a multiple of 32)
          const float c0 = roundTo<Bf16>(w * roundTo<Bf16>(acc[mt][nt][half * 2]));
          const float c1 = roundTo<Bf16>(w * roundTo<Bf16>(acc[mt][nt][half * 2 + 1]));
          storeBf16x2(contrib + s * hidden + row, c0, c1);
        }
      }
    }
  }
}

/// out[t] = Σ of the token's own contributions in increasing expert id (a running T sum). Grid
/// (tokens, hidden tiles): each block sorts its token's slots, each thread sums its columns.
template <typename T> __global__ void moeExpertsCombineKernel(MoeExpertsGpuArgs a) {
  __shared__ int64_t order[kMoeMaxTopK];
  __shared__ int count;
  const int64_t t = blockIdx.x;
  const int64_t hidden = a.hidden;
  if (threadIdx.x == 0) {
    // Insertion sort of the token's own slots by expert id (stable: ties keep k order).
    int n = 0;
    for (int64_t k = 0; k < a.topK && k < kMoeMaxTopK; ++k) {
      const int64_t s = t * a.topK + k;
      const int e = moe_experts_detail::localExpert(a, s);
      if (e < 0) {
        continue;
      }
      int at = n++;
      while (at > 0 && a.expertIds[order[at - 1]] > a.expertIds[s]) {
        order[at] = order[at - 1];
        --at;
      }
      order[at] = s;
    }
    count = n;
  }
  __syncthreads();
  const T *contrib = static_cast<const T *>(a.contrib);
  T *out = static_cast<T *>(a.out) + t * hidden;
  for (int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; d < hidden;
       d += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < count; ++i) {
      acc = roundTo<T>(acc + toFloat(contrib[order[i] * hidden + d]));
    }
    out[d] = fromFloat<T>(acc);
  }
}

} // namespace glm::kernels
