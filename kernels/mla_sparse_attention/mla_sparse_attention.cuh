// mla_sparse_attention: NoPE MLA over the indexer's selection on the GPU, in absorbed form:
// absorb, attend and output kernels (contract in mla_sparse_attention_gpu.h).
#pragma once

#include "kernels/common/DenseFormats.h"
#include "kernels/common/Device.cuh"
#include "kernels/common/Ptx.cuh"
#include "kernels/mla_sparse_attention/mla_sparse_attention_gpu.h"

namespace glm::kernels {
namespace mla_detail {

/// f32 -> fp8 e4m3fn as the host's floatToFp8E4m3: round to nearest even, finite values beyond
/// 448 saturate, NaN and infinities become NaN.
__device__ __forceinline__ Fp8E4m3 toFp8(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t mag = u & 0x7FFFFFFFu;
  if (mag >= 0x7F800000u) {
    return Fp8E4m3{static_cast<uint8_t>(sign | 0x7Fu)};
  }
  const float a = __uint_as_float(mag);
  if (a >= 448.0f) {
    return Fp8E4m3{static_cast<uint8_t>(sign | 0x7Eu)};
  }
  if (a < 0.015625f) { // subnormal: a multiple of 2^-9 (8 is the smallest normal's code)
    return Fp8E4m3{static_cast<uint8_t>(sign | __float2int_rn(a * 512.0f))};
  }
  int exponent = static_cast<int>(mag >> 23) - 127; // -6 .. 8
  uint32_t m = (mag >> 20) & 7u;
  const uint32_t rest = mag & 0xFFFFFu;
  if (rest > 0x80000u || (rest == 0x80000u && (m & 1u))) {
    ++m;
  }
  if (m == 8u) {
    m = 0u;
    ++exponent;
  }
  const uint32_t code = (static_cast<uint32_t>(exponent + 7) << 3) | m;
  return Fp8E4m3{static_cast<uint8_t>(sign | (code > 0x7Eu ? 0x7Eu : code))};
}

template <typename S> __device__ __forceinline__ S toState(float v) { return fromFloat<S>(v); }
template <> __device__ __forceinline__ Fp8E4m3 toState<Fp8E4m3>(float v) { return toFp8(v); }

/// 4 consecutive elements (16-byte aligned groups of the row) widened to f32.
__device__ __forceinline__ void load4(const float *p, float (&v)[4]) {
  const float4 x = *reinterpret_cast<const float4 *>(p);
  v[0] = x.x;
  v[1] = x.y;
  v[2] = x.z;
  v[3] = x.w;
}
__device__ __forceinline__ void load4(const Bf16 *p, float (&v)[4]) {
  const uint2 x = *reinterpret_cast<const uint2 *>(p);
  v[0] = __uint_as_float(x.x << 16);
  v[1] = __uint_as_float(x.x & 0xFFFF0000u);
  v[2] = __uint_as_float(x.y << 16);
  v[3] = __uint_as_float(x.y & 0xFFFF0000u);
}
__device__ __forceinline__ void load4(const Fp8E4m3 *p, float (&v)[4]) {
  const uint32_t x = *reinterpret_cast<const uint32_t *>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = toFloat(Fp8E4m3{static_cast<uint8_t>(x >> (8 * i))});
  }
}

/// An f16 (the low 16 bits of `h`) widened to f32, exactly.
__device__ __forceinline__ float f16ToF32(uint32_t h) {
  float f;
  asm("{.reg .b16 t;\ncvt.u16.u32 t, %1;\ncvt.f32.f16 %0, t;\n}" : "=f"(f) : "r"(h));
  return f;
}

/// The Q4 code in the low four bits of `bits` (the rest ignored) as an f32, exactly: 2^23 + q
/// minus 2^23.
__device__ __forceinline__ float q4CodeF32(uint32_t bits) {
  return __uint_as_float(0x4B000000u | (bits & 0xFu)) - 8388608.0f;
}

/// 8 consecutive weights of one kv_b row (columns col .. col + 8, col a multiple of 8) as one load
/// brings them: plain weights already widened, Q4 the 8 codes (4 bytes) and their group's
/// (scale, minimum), fp8 the 8 values and their block's scaleInv. widenKv makes the f32 weights.
template <typename W> struct KvRaw {
  float v[8];
};
template <> struct KvRaw<MlaQ4Groups> {
  uint32_t codes, group;
};
template <> struct KvRaw<Fp8E4m3> {
  uint2 values;
  float scaleInv;
};

template <typename W>
__device__ __forceinline__ KvRaw<W> loadKv(const MlaSparseAttentionGpuArgs &a, int64_t row,
                                           int col) {
  KvRaw<W> raw;
  load8(static_cast<const W *>(a.kvB) + row * a.rank + col, raw.v);
  return raw;
}
template <>
__device__ __forceinline__ KvRaw<MlaQ4Groups>
loadKv<MlaQ4Groups>(const MlaSparseAttentionGpuArgs &a, int64_t row, int col) {
  KvRaw<MlaQ4Groups> raw;
  raw.codes = *reinterpret_cast<const uint32_t *>(static_cast<const uint8_t *>(a.kvB) +
                                                  row * (a.rank / 2) + col / 2);
  raw.group = a.kvBGroups[row * (a.rank / kQ4Group) + col / kQ4Group];
  return raw;
}
template <>
__device__ __forceinline__ KvRaw<Fp8E4m3> loadKv<Fp8E4m3>(const MlaSparseAttentionGpuArgs &a,
                                                          int64_t row, int col) {
  KvRaw<Fp8E4m3> raw;
  raw.values =
      *reinterpret_cast<const uint2 *>(static_cast<const uint8_t *>(a.kvB) + row * a.rank + col);
  raw.scaleInv = a.kvBScaleInv[(row / kFp8Block) * fp8BlocksOf(a.rank) + col / kFp8Block];
  return raw;
}

/// The f32 weights of a raw load, exactly as WeightView widens them: Q4 fmaf(scale, q, minimum)
/// (scale · q is exact in f32, so this is the format's product-then-sum), fp8 value · scaleInv
/// rounded once.
template <typename W> __device__ __forceinline__ void widenKv(const KvRaw<W> &raw, float (&w)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    w[e] = raw.v[e];
  }
}
template <>
__device__ __forceinline__ void widenKv<MlaQ4Groups>(const KvRaw<MlaQ4Groups> &raw, float (&w)[8]) {
  const float scale = f16ToF32(raw.group & 0xFFFFu), minimum = f16ToF32(raw.group >> 16);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    w[e] = fmaf(scale, q4CodeF32(raw.codes >> (4 * e)), minimum); // nibble e: column col + e
  }
}
template <>
__device__ __forceinline__ void widenKv<Fp8E4m3>(const KvRaw<Fp8E4m3> &raw, float (&w)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t word = e < 4 ? raw.values.x : raw.values.y;
    w[e] = __fmul_rn(toFloat(Fp8E4m3{static_cast<uint8_t>(word >> (8 * (e % 4)))}), raw.scaleInv);
  }
}

/// Weight rows an absorb thread loads before their products: 4 for plain weights (16- or 32-byte
/// loads), 8 for encoded ones (4- or 8-byte loads, so that as many bytes are in flight).
template <typename W> struct KvAhead {
  static constexpr int value = sizeof(W) >= 2 ? 4 : 8;
};

__device__ __forceinline__ float *absorbed(const MlaSparseAttentionGpuArgs &a, int64_t r, int h) {
  return static_cast<float *>(a.workspace) + (r * a.heads + h) * a.rank;
}

/// Chunk c's partial of row r, head h: Σ_j e^(s_j − max) c_j [rank], then max and sum.
__device__ __forceinline__ float *partial(const MlaSparseAttentionGpuArgs &a, int64_t r, int c,
                                          int h) {
  return static_cast<float *>(a.workspace) + static_cast<int64_t>(a.rows) * a.heads * a.rank +
         ((r * a.chunks + c) * a.heads + h) * static_cast<int64_t>(a.rank + 2);
}

__device__ __forceinline__ float negInf() { return -__int_as_float(0x7F800000); }

template <typename S> struct IsBf16 {
  static constexpr bool value = false;
};
template <> struct IsBf16<Bf16> {
  static constexpr bool value = true;
};

using ptx::sharedAddress;

/// The B fragment (k16 x n8) of rows [row0, row0 + 16) of a row-major [k][n] bf16 tile in shared
/// memory, columns [col0, col0 + 8): ldmatrix transposes 8x8 blocks on the way.
__device__ __forceinline__ void loadTransposed(const uint16_t *rowAddress, uint32_t &b0,
                                               uint32_t &b1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(b0), "=r"(b1)
               : "r"(sharedAddress(rowAddress))
               : "memory");
}

__device__ __forceinline__ uint32_t shared32(const uint16_t *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  return static_cast<uint32_t>(fromFloat<Bf16>(lo).bits) |
         (static_cast<uint32_t>(fromFloat<Bf16>(hi).bits) << 16);
}

/// 8 latents of a state row as bf16 (exact for bf16 and fp8 e4m3 states).
__device__ __forceinline__ uint4 stateAsBf16(const Bf16 *p) {
  return *reinterpret_cast<const uint4 *>(p);
}
__device__ __forceinline__ uint4 stateAsBf16(const Fp8E4m3 *p) {
  const uint2 x = *reinterpret_cast<const uint2 *>(p);
  float v[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = toFloat(Fp8E4m3{static_cast<uint8_t>(x.x >> (8 * i))});
    v[4 + i] = toFloat(Fp8E4m3{static_cast<uint8_t>(x.y >> (8 * i))});
  }
  return {packBf16(v[0], v[1]), packBf16(v[2], v[3]), packBf16(v[4], v[5]), packBf16(v[6], v[7])};
}

/// 8 latents of this step's own (bf16) row as the state of type S will hold them.
template <typename S> __device__ __forceinline__ uint4 ownAsBf16(const Bf16 *p) {
  uint4 x = *reinterpret_cast<const uint4 *>(p);
  if constexpr (!IsBf16<S>::value) {
    uint32_t words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float lo = toFloat(toState<S>(__uint_as_float(words[i] << 16)));
      const float hi = toFloat(toState<S>(__uint_as_float(words[i] & 0xFFFF0000u)));
      words[i] = packBf16(lo, hi);
    }
    x = {words[0], words[1], words[2], words[3]};
  }
  return x;
}
} // namespace mla_detail

/// Kernel 1: q̃[r][h] = Wk_hᵀ q[r][h] for 8 rows, one head and 64 latent columns per block; the
/// blocks of x = 0 append their rows' latents.
template <typename T, typename S, typename W>
__global__ void __launch_bounds__(256, 2) mlaAbsorbKernel(MlaSparseAttentionGpuArgs a) {
  __shared__ float qs[8][kMlaMaxRank];
  __shared__ float red[8][8][65];
  const int dqk = a.qkHeadDim, rank = a.rank;
  const int colTiles = (rank + 63) / 64;
  const int h = blockIdx.x / colTiles, c0 = (blockIdx.x % colTiles) * 64;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 8;
  const int rowsHere = a.rows - r0 < 8 ? static_cast<int>(a.rows - r0) : 8;
  const T *q = static_cast<const T *>(a.q);
  if (blockIdx.x == 0) {
    const T *latent = static_cast<const T *>(a.latent);
    for (int i = threadIdx.x; i < rowsHere * rank; i += blockDim.x) {
      const int64_t r = r0 + i / rank;
      const int32_t pos = a.ctx.positions[r];
      if (pos >= 0) {
        S *row = reinterpret_cast<S *>(pagedRow(a.latents, a.ctx, r / a.ctx.rowsPerSequence, pos));
        row[i % rank] = mla_detail::toState<S>(toFloat(latent[r * rank + i % rank]));
      }
    }
  }
  for (int i = threadIdx.x; i < 8 * dqk; i += blockDim.x) {
    const int rr = i / dqk, e = i % dqk;
    qs[rr][e] = rr < rowsHere ? toFloat(q[((r0 + rr) * a.heads + h) * dqk + e]) : 0.0f;
  }
  __syncthreads();
  // Thread (rg, cg): weight rows e ≡ rg (mod 32), columns c0 + cg·8 .. + 8.
  const int cg = threadIdx.x & 7, rg = threadIdx.x >> 3;
  const int col = c0 + cg * 8;
  const int64_t wkRow0 = static_cast<int64_t>(h) * (dqk + a.vHeadDim); // Wk_h's first kv_b row
  float acc[8][8];
#pragma unroll
  for (int rr = 0; rr < 8; ++rr) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      acc[rr][j] = 0.0f;
    }
  }
  if (col < rank) {
    // kAhead weight rows' loads in flight before their products.
    constexpr int kAhead = mla_detail::KvAhead<W>::value;
    for (int e0 = rg; e0 < dqk; e0 += kAhead * 32) {
      mla_detail::KvRaw<W> raw[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int e = e0 + 32 * u;
        if (e < dqk) {
          raw[u] = mla_detail::loadKv<W>(a, wkRow0 + e, col);
        }
      }
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int e = e0 + 32 * u;
        if (e < dqk) {
          float w[8];
          mla_detail::widenKv<W>(raw[u], w);
#pragma unroll
          for (int rr = 0; rr < 8; ++rr) {
            if (rr < rowsHere) {
              const float qv = qs[rr][e];
#pragma unroll
              for (int j = 0; j < 8; ++j) {
                acc[rr][j] = fmaf(qv, w[j], acc[rr][j]);
              }
            }
          }
        }
      }
    }
  }
  // Lanes cg, cg + 8, cg + 16, cg + 24 of a warp share columns; then the 8 warps, in order.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int rr = 0; rr < 8; ++rr) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float v = acc[rr][j];
      v += __shfl_xor_sync(0xFFFFFFFFu, v, 8);
      v += __shfl_xor_sync(0xFFFFFFFFu, v, 16);
      if (lane < 8) {
        red[warp][rr][cg * 8 + j] = v;
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rowsHere * 64; i += blockDim.x) {
    const int rr = i / 64, c = i % 64;
    if (c0 + c < rank) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        sum += red[w][rr][c];
      }
      mla_detail::absorbed(a, r0 + rr, h)[c0 + c] = sum;
    }
  }
}

/// Kernel 2: 4 heads of one row over one chunk of its slots. Lane l holds latent elements
/// 128i + 4l .. + 4 (i < 4) of q̃ (pre-scaled) and of each token it reads.
template <typename T, typename S> __global__ void mlaAttendKernel(MlaSparseAttentionGpuArgs a) {
  __shared__ float mix[4][kMlaMaxRank];
  __shared__ float warpMax[8][4], warpSumOf[8][4], headMax[4], headTotal[4];
  const int64_t r = blockIdx.z;
  const int h0 = blockIdx.y * 4, chunk = blockIdx.x;
  const int rank = a.rank;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = a.ctx.positions[r];
  const int64_t b = r / a.ctx.rowsPerSequence;
  const int64_t start = a.ctx.positions[b * a.ctx.rowsPerSequence]; // the sequence's length
  const int perChunk = (a.width + a.chunks - 1) / a.chunks;
  const int s0 = chunk * perChunk;
  const int s1 = s0 + perChunk < a.width ? s0 + perChunk : a.width;

  float qv[4][16];
#pragma unroll
  for (int hh = 0; hh < 4; ++hh) {
    const bool headOk = h0 + hh < a.heads;
    const float *src = headOk ? mla_detail::absorbed(a, r, h0 + hh) : nullptr;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int k = 128 * i + 4 * lane;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        qv[hh][4 * i + e] = (headOk && k < rank) ? src[k + e] * a.scale : 0.0f;
      }
    }
  }
  float m[4], l[4], acc[4][16];
#pragma unroll
  for (int hh = 0; hh < 4; ++hh) {
    m[hh] = mla_detail::negInf();
    l[hh] = 0.0f;
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      acc[hh][e] = 0.0f;
    }
  }
  const int32_t *sel = a.selected + r * a.width;
  const T *latentIn = static_cast<const T *>(a.latent);
  for (int s = s0 + warp; s < s1 && t >= 0; s += 8) {
    const int64_t j = sel[s];
    if (j < 0 || j > t) {
      continue; // warp-uniform
    }
    float c[16];
    if (j < start) {
      const S *row = reinterpret_cast<const S *>(pagedRow(a.latents, a.ctx, b, j));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int k = 128 * i + 4 * lane;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (k < rank) {
          mla_detail::load4(row + k, v);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          c[4 * i + e] = v[e];
        }
      }
    } else {
      // This step's own row: the value the pages now hold.
      const T *row = latentIn + (b * a.ctx.rowsPerSequence + (j - start)) * rank;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int k = 128 * i + 4 * lane;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          c[4 * i + e] = k < rank ? toFloat(mla_detail::toState<S>(toFloat(row[k + e]))) : 0.0f;
        }
      }
    }
#pragma unroll
    for (int hh = 0; hh < 4; ++hh) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        dot = fmaf(qv[hh][e], c[e], dot);
      }
      const float score = warpSum(dot);
      if (score > m[hh]) {
        const float correction = expf(m[hh] - score); // 0 while m is -inf
        l[hh] *= correction;
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          acc[hh][e] *= correction;
        }
        m[hh] = score;
      }
      const float p = expf(score - m[hh]);
      l[hh] += p;
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        acc[hh][e] = fmaf(p, c[e], acc[hh][e]);
      }
    }
  }
  // Merge the warps' softmax states, warp by warp in a fixed order (deterministic sums).
  if (lane == 0) {
#pragma unroll
    for (int hh = 0; hh < 4; ++hh) {
      warpMax[warp][hh] = m[hh];
      warpSumOf[warp][hh] = l[hh];
    }
  }
  __syncthreads();
  float factor[4];
#pragma unroll
  for (int hh = 0; hh < 4; ++hh) {
    float peak = mla_detail::negInf();
    for (int w = 0; w < 8; ++w) {
      peak = fmaxf(peak, warpMax[w][hh]);
    }
    factor[hh] = m[hh] == mla_detail::negInf() ? 0.0f : expf(m[hh] - peak);
    float sum = 0.0f;
    for (int w = 0; w < 8; ++w) {
      sum += warpMax[w][hh] == mla_detail::negInf()
                 ? 0.0f
                 : warpSumOf[w][hh] * expf(warpMax[w][hh] - peak);
    }
    if (threadIdx.x == 0) {
      headMax[hh] = peak;
      headTotal[hh] = sum;
    }
  }
  for (int w = 0; w < 8; ++w) {
    if (warp == w) {
#pragma unroll
      for (int hh = 0; hh < 4; ++hh) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int k = 128 * i + 4 * lane;
          if (k < rank) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float v = acc[hh][4 * i + e] * factor[hh];
              mix[hh][k + e] = w == 0 ? v : mix[hh][k + e] + v;
            }
          }
        }
      }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < 4 * rank; i += blockDim.x) {
    const int hh = i / rank, k = i % rank;
    if (h0 + hh >= a.heads) {
      continue;
    }
    if (a.chunks == 1) {
      // Every read of q̃ for these heads happened before the merge's barriers.
      mla_detail::absorbed(a, r, h0 + hh)[k] =
          headTotal[hh] > 0.0f ? mix[hh][k] / headTotal[hh] : 0.0f;
    } else {
      float *dst = mla_detail::partial(a, r, chunk, h0 + hh);
      dst[k] = mix[hh][k];
      if (k == 0) {
        dst[rank] = headMax[hh];
        dst[rank + 1] = headTotal[hh];
      }
    }
  }
}

/// Kernel 2, tensor-core form (bf16 or fp8 state; heads a multiple of 16, rank a multiple of 32):
/// 16 heads of one row over one chunk of its slots, 4 warps, 32 slots per tile. The tile's latents
/// are staged in shared memory as bf16 (exact for both states). Scores = q̃ · cᵀ with q̃ split into
/// bf16 hi + lo (two mma, f32-accurate): warp w takes tokens 8w .. 8w + 7. The online softmax runs
/// per head over tiles; P (hi + lo) · C accumulates in f32, warp w owning latent columns
/// [w·rank/4, (w + 1)·rank/4). Same outputs as mlaAttendKernel.
template <typename T, typename S>
__global__ void __launch_bounds__(128) mlaAttendMmaKernel(MlaSparseAttentionGpuArgs a) {
  extern __shared__ __align__(16) uint8_t mlaShared[];
  __shared__ int32_t tokenPos[32];
  __shared__ float warpMax[4][16], warpSumOf[4][16], runMax[16], runSum[16];
  const int rank = a.rank, stride = rank + 8; // padded rows: fragment loads hit distinct banks
  uint16_t *qHi = reinterpret_cast<uint16_t *>(mlaShared);
  uint16_t *qLo = qHi + 16 * stride;
  uint16_t *tile = qLo + 16 * stride; // [32 tokens][stride]
  uint16_t *pHi = tile + 32 * stride; // [16 heads][40]
  uint16_t *pLo = pHi + 16 * 40;
  const int64_t r = blockIdx.z;
  const int h0 = blockIdx.y * 16, chunk = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qd = lane & 3;
  const int64_t t = a.ctx.positions[r];
  const int64_t R = a.ctx.rowsPerSequence, b = r / R;
  const int64_t start = a.ctx.positions[b * R];
  const int perChunk = ((a.width + a.chunks - 1) / a.chunks + 31) / 32 * 32;
  const int s0 = chunk * perChunk;
  const int s1 = s0 + perChunk < a.width ? s0 + perChunk : a.width;
  const float negInf = mla_detail::negInf();

  for (int i = threadIdx.x; i < 16 * rank; i += blockDim.x) {
    const int hh = i / rank, k = i % rank;
    const float v = mla_detail::absorbed(a, r, h0 + hh)[k] * a.scale;
    const Bf16 hi = fromFloat<Bf16>(v);
    qHi[hh * stride + k] = hi.bits;
    qLo[hh * stride + k] = fromFloat<Bf16>(v - toFloat(hi)).bits;
  }
  if (threadIdx.x < 16) {
    runMax[threadIdx.x] = negInf;
    runSum[threadIdx.x] = 0.0f;
  }
  const int colsPerWarp = rank / 4, nTiles = colsPerWarp / 8;
  float acc[16][4];
#pragma unroll
  for (int nt = 0; nt < 16; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc[nt][e] = 0.0f;
    }
  }
  const Bf16 *latentIn = static_cast<const Bf16 *>(a.latent);
  for (int base = s0; base < s1; base += 32) {
    __syncthreads(); // the previous tile's readers are done; the staging above is visible
    if (threadIdx.x < 32) {
      const int s = base + threadIdx.x;
      const int64_t j = (s < s1 && t >= 0) ? a.selected[r * a.width + s] : -1;
      tokenPos[threadIdx.x] = (j >= 0 && j <= t) ? static_cast<int32_t>(j) : -1;
    }
    __syncthreads();
    const int unitsPerRow = rank / 8;
    for (int u = threadIdx.x; u < 32 * unitsPerRow; u += blockDim.x) {
      const int row = u / unitsPerRow, k = (u % unitsPerRow) * 8;
      const int64_t j = tokenPos[row];
      uint4 v = {0u, 0u, 0u, 0u};
      if (j >= 0 && j < start) {
        v = mla_detail::stateAsBf16(reinterpret_cast<const S *>(pagedRow(a.latents, a.ctx, b, j)) +
                                    k);
      } else if (j >= 0) {
        v = mla_detail::ownAsBf16<S>(latentIn + (b * R + (j - start)) * rank + k);
      }
      *reinterpret_cast<uint4 *>(tile + row * stride + k) = v;
    }
    __syncthreads();
    // Scores of tokens 8w + g (B columns) against heads g, g + 8 (A rows).
    float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint16_t *crow = tile + (warp * 8 + g) * stride + 2 * qd;
    const uint16_t *hiRow = qHi + g * stride + 2 * qd, *loRow = qLo + g * stride + 2 * qd;
    for (int k0 = 0; k0 < rank; k0 += 16) {
      const uint32_t b0 = mla_detail::shared32(crow + k0), b1 = mla_detail::shared32(crow + k0 + 8);
      ptx::mmaBf16(sc, mla_detail::shared32(hiRow + k0),
                   mla_detail::shared32(hiRow + 8 * stride + k0),
                   mla_detail::shared32(hiRow + k0 + 8),
                   mla_detail::shared32(hiRow + 8 * stride + k0 + 8), b0, b1);
      ptx::mmaBf16(sc, mla_detail::shared32(loRow + k0),
                   mla_detail::shared32(loRow + 8 * stride + k0),
                   mla_detail::shared32(loRow + k0 + 8),
                   mla_detail::shared32(loRow + 8 * stride + k0 + 8), b0, b1);
    }
    // sc[0..1]: head g, tokens 8w + 2qd + {0, 1}; sc[2..3]: head g + 8.
    if (tokenPos[warp * 8 + 2 * qd] < 0) {
      sc[0] = negInf;
      sc[2] = negInf;
    }
    if (tokenPos[warp * 8 + 2 * qd + 1] < 0) {
      sc[1] = negInf;
      sc[3] = negInf;
    }
    float mg = fmaxf(sc[0], sc[1]), mg8 = fmaxf(sc[2], sc[3]);
    mg = fmaxf(mg, __shfl_xor_sync(0xFFFFFFFFu, mg, 1));
    mg = fmaxf(mg, __shfl_xor_sync(0xFFFFFFFFu, mg, 2));
    mg8 = fmaxf(mg8, __shfl_xor_sync(0xFFFFFFFFu, mg8, 1));
    mg8 = fmaxf(mg8, __shfl_xor_sync(0xFFFFFFFFu, mg8, 2));
    if (qd == 0) {
      warpMax[warp][g] = mg;
      warpMax[warp][g + 8] = mg8;
    }
    __syncthreads();
    // The heads' new running maxima, the rescale of what was accumulated, and P against them.
    float newMax[2], factor[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int hh = g + 8 * half;
      float m = runMax[hh];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        m = fmaxf(m, warpMax[w][hh]);
      }
      newMax[half] = m;
      factor[half] = m == negInf ? 1.0f : expf(runMax[hh] - m);
    }
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float m = newMax[e / 2];
      p[e] = m == negInf ? 0.0f : expf(sc[e] - m);
    }
    float sg = p[0] + p[1], sg8 = p[2] + p[3];
    sg += __shfl_xor_sync(0xFFFFFFFFu, sg, 1);
    sg += __shfl_xor_sync(0xFFFFFFFFu, sg, 2);
    sg8 += __shfl_xor_sync(0xFFFFFFFFu, sg8, 1);
    sg8 += __shfl_xor_sync(0xFFFFFFFFu, sg8, 2);
    if (qd == 0) {
      warpSumOf[warp][g] = sg;
      warpSumOf[warp][g + 8] = sg8;
    }
    const int col = warp * 8 + 2 * qd;
    const float hi0 = roundTo<Bf16>(p[0]), hi1 = roundTo<Bf16>(p[1]);
    const float hi2 = roundTo<Bf16>(p[2]), hi3 = roundTo<Bf16>(p[3]);
    *reinterpret_cast<uint32_t *>(pHi + g * 40 + col) = mla_detail::packBf16(hi0, hi1);
    *reinterpret_cast<uint32_t *>(pHi + (g + 8) * 40 + col) = mla_detail::packBf16(hi2, hi3);
    *reinterpret_cast<uint32_t *>(pLo + g * 40 + col) =
        mla_detail::packBf16(p[0] - hi0, p[1] - hi1);
    *reinterpret_cast<uint32_t *>(pLo + (g + 8) * 40 + col) =
        mla_detail::packBf16(p[2] - hi2, p[3] - hi3);
    __syncthreads();
    if (threadIdx.x < 16) {
      const int hh = threadIdx.x;
      float m = runMax[hh], sum = 0.0f;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        m = fmaxf(m, warpMax[w][hh]);
        sum += warpSumOf[w][hh];
      }
      const float f = m == negInf ? 1.0f : expf(runMax[hh] - m);
      runSum[hh] = runSum[hh] * f + sum;
      runMax[hh] = m;
    }
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
      acc[nt][0] *= factor[0];
      acc[nt][1] *= factor[0];
      acc[nt][2] *= factor[1];
      acc[nt][3] *= factor[1];
    }
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const int kb = ks * 16 + 2 * qd;
      const uint32_t ah0 = mla_detail::shared32(pHi + g * 40 + kb);
      const uint32_t ah1 = mla_detail::shared32(pHi + (g + 8) * 40 + kb);
      const uint32_t ah2 = mla_detail::shared32(pHi + g * 40 + kb + 8);
      const uint32_t ah3 = mla_detail::shared32(pHi + (g + 8) * 40 + kb + 8);
      const uint32_t al0 = mla_detail::shared32(pLo + g * 40 + kb);
      const uint32_t al1 = mla_detail::shared32(pLo + (g + 8) * 40 + kb);
      const uint32_t al2 = mla_detail::shared32(pLo + g * 40 + kb + 8);
      const uint32_t al3 = mla_detail::shared32(pLo + (g + 8) * 40 + kb + 8);
      const uint16_t *rows = tile + (ks * 16 + (lane & 15)) * stride + warp * colsPerWarp;
#pragma unroll
      for (int nt = 0; nt < 16; ++nt) {
        if (nt < nTiles) {
          uint32_t b0, b1;
          mla_detail::loadTransposed(rows + nt * 8, b0, b1);
          ptx::mmaBf16(acc[nt], ah0, ah1, ah2, ah3, b0, b1);
          ptx::mmaBf16(acc[nt], al0, al1, al2, al3, b0, b1);
        }
      }
    }
  }
  __syncthreads(); // the running sums are final; every read of q̃ is done
#pragma unroll
  for (int nt = 0; nt < 16; ++nt) {
    if (nt < nTiles) {
      const int c = warp * colsPerWarp + nt * 8 + 2 * qd;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int hh = g + 8 * half;
        float v0 = acc[nt][2 * half], v1 = acc[nt][2 * half + 1];
        float *dst;
        if (a.chunks == 1) {
          const float sum = runSum[hh];
          v0 = sum > 0.0f ? v0 / sum : 0.0f;
          v1 = sum > 0.0f ? v1 / sum : 0.0f;
          dst = mla_detail::absorbed(a, r, h0 + hh);
        } else {
          dst = mla_detail::partial(a, r, chunk, h0 + hh);
        }
        dst[c] = v0;
        dst[c + 1] = v1;
      }
    }
  }
  if (a.chunks > 1 && threadIdx.x < 16) {
    float *dst = mla_detail::partial(a, r, chunk, h0 + threadIdx.x);
    dst[rank] = runMax[threadIdx.x];
    dst[rank + 1] = runSum[threadIdx.x];
  }
}

/// Kernel 3: merge the chunks into ĉ = Σ_j a_j c_j for 8 rows of one head, then o = Wv_h ĉ for 32
/// of its value rows (a warp per value row, 4 rows each).
template <typename T, typename W> __global__ void mlaOutputKernel(MlaSparseAttentionGpuArgs a) {
  __shared__ float mixed[8][kMlaMaxRank];
  __shared__ float weightOf[8][kMlaMaxChunks];
  const int dqk = a.qkHeadDim, dv = a.vHeadDim, rank = a.rank;
  const int valueTiles = (dv + 31) / 32;
  const int h = blockIdx.x / valueTiles, e0 = (blockIdx.x % valueTiles) * 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 8;
  const int rowsHere = a.rows - r0 < 8 ? static_cast<int>(a.rows - r0) : 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (a.chunks == 1) {
    for (int i = threadIdx.x; i < rowsHere * rank; i += blockDim.x) {
      mixed[i / rank][i % rank] = mla_detail::absorbed(a, r0 + i / rank, h)[i % rank];
    }
  } else {
    // Chunk c of row rr weighs e^(max_c − max) / Σ_c' sum_c' e^(max_c' − max).
    if (threadIdx.x < rowsHere) {
      const int rr = threadIdx.x;
      float peak = mla_detail::negInf();
      for (int c = 0; c < a.chunks; ++c) {
        peak = fmaxf(peak, mla_detail::partial(a, r0 + rr, c, h)[rank]);
      }
      float total = 0.0f;
      for (int c = 0; c < a.chunks; ++c) {
        const float *p = mla_detail::partial(a, r0 + rr, c, h);
        const float f = p[rank] == mla_detail::negInf() ? 0.0f : expf(p[rank] - peak);
        weightOf[rr][c] = f;
        total += p[rank + 1] * f;
      }
      for (int c = 0; c < a.chunks; ++c) {
        weightOf[rr][c] = total > 0.0f ? weightOf[rr][c] / total : 0.0f;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < rowsHere * rank; i += blockDim.x) {
      const int rr = i / rank, k = i % rank;
      float v = 0.0f;
      for (int c = 0; c < a.chunks; ++c) {
        v = fmaf(weightOf[rr][c], mla_detail::partial(a, r0 + rr, c, h)[k], v);
      }
      mixed[rr][k] = v;
    }
  }
  __syncthreads();
  const int64_t wvRow0 = static_cast<int64_t>(h) * (dqk + dv) + dqk; // Wv_h's first kv_b row
  T *out = static_cast<T *>(a.out);
  // The warp's 4 value rows (at most 512 columns: 2 loads of 8 per lane each), all loaded before
  // their products.
  mla_detail::KvRaw<W> raw[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = e0 + warp * 4 + i;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int k = lane * 8 + 256 * half;
      if (e < dv && k < rank) {
        raw[i][half] = mla_detail::loadKv<W>(a, wvRow0 + e, k);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = e0 + warp * 4 + i;
    if (e >= dv) {
      break; // warp-uniform
    }
    float w[2][8];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (lane * 8 + 256 * half < rank) {
        mla_detail::widenKv<W>(raw[i][half], w[half]);
      }
    }
    for (int rr = 0; rr < rowsHere; ++rr) {
      float dot = 0.0f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int k = lane * 8 + 256 * half;
        if (k < rank) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            dot = fmaf(w[half][j], mixed[rr][k + j], dot);
          }
        }
      }
      dot = warpSum(dot);
      if (lane == 0) {
        out[(r0 + rr) * a.heads * dv + static_cast<int64_t>(h) * dv + e] = fromFloat<T>(dot);
      }
    }
  }
}

} // namespace glm::kernels
