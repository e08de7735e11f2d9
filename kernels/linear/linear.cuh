// linear: y = x Wᵀ (+ b) on the GPU, streaming kernels for decode and tiled ones for prefill
// (contract, kernel choice and grid rules in linear_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/common/Ptx.cuh"
#include "kernels/linear/linear_gpu.h"

namespace glm::kernels {
namespace linear_detail {

using namespace ptx;

__device__ __forceinline__ bool aligned16(const void *p) {
  return (reinterpret_cast<uint64_t>(p) & 15u) == 0;
}

__device__ __forceinline__ float bf16Lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16Hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

/// Eight bf16 values [k, k + 8) of a row of `n` as four packed pairs; the 16-byte load when `vec`
/// (row and k 16-byte aligned, so the chunk is whole whenever k < n), else element loads; values
/// past n are zero.
template <bool Stream>
__device__ __forceinline__ U32x4 loadBf16x8(const uint16_t *row, int64_t k, int64_t n, bool vec) {
  if (vec) {
    if (k >= n) {
      return zero4();
    }
    return Stream ? loadStream(row + k) : loadShared16(row + k);
  }
  uint32_t v[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t lo = k + 2 * e < n ? row[k + 2 * e] : 0u;
    const uint32_t hi = k + 2 * e + 1 < n ? row[k + 2 * e + 1] : 0u;
    v[e] = lo | (hi << 16);
  }
  return U32x4{v[0], v[1], v[2], v[3]};
}

__device__ __forceinline__ float biasAt(const LinearGpuArgs &a, int64_t o) {
  if (a.bias == nullptr) {
    return 0.0f;
  }
  return a.biasBf16 ? toFloat(static_cast<const Bf16 *>(a.bias)[o])
                    : static_cast<const float *>(a.bias)[o];
}

/// Output (row, o) of y from its f32 sum: plus the bias, rounded to T; then, where the step has an
/// addend, plus its (row, o), rounded again (the add kernel's arithmetic; linear_gpu.h). Every
/// kernel's store goes through here.
template <typename T>
__device__ __forceinline__ T outputAt(const LinearGpuArgs &a, int64_t row, int64_t o, float sum) {
  const T y = fromFloat<T>(sum + biasAt(a, o));
  if (a.addend == nullptr) {
    return y;
  }
  return fromFloat<T>(toFloat(y) +
                      toFloat(static_cast<const T *>(a.addend)[row * a.outFeatures + o]));
}

/// A warp's m16n8k16 accumulators as partial[row][output] (kOuts outputs a row): fragment (m, n)
/// holds output 16m + g of row 8n + 2t in element 0, the next row in 1, and the same rows of
/// output 16m + g + 8 in 2 and 3; only the first `rowTiles` (1 or 2) tiles of 8 rows are stored.
template <int kMTiles, int kOuts>
__device__ __forceinline__ void storeDecodeFragments(float *partial,
                                                     const float (&acc)[kMTiles][2][4],
                                                     int rowTiles, int g, int t) {
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      if (n < rowTiles) {
        const int r = 8 * n + 2 * t, o = 16 * m + g;
        partial[r * kOuts + o] = acc[m][n][0];
        partial[(r + 1) * kOuts + o] = acc[m][n][1];
        partial[r * kOuts + o + 8] = acc[m][n][2];
        partial[(r + 1) * kOuts + o + 8] = acc[m][n][3];
      }
    }
  }
}

/// fp8 e4m3 byte `b` times 2^-120, exactly, as an f32 (possibly subnormal): the e4m3 bits moved
/// into f32's exponent and mantissa fields. Multiplying by 2^120 restores the value; NaN codes are
/// not special-cased (checkpoints hold none).
__device__ __forceinline__ float fp8Scaled(uint32_t b) {
  return __uint_as_float(((b & 0x7Fu) << 20) | ((b & 0x80u) << 24));
}

/// The fp8 weight's block scale for element (o, k).
__device__ __forceinline__ float fp8Scale(const LinearGpuArgs &a, int64_t o, int64_t k) {
  if (a.weightScaleInv == nullptr) {
    return 1.0f;
  }
  const int64_t blocksPerRow = (a.inFeatures + 127) / 128;
  return a.weightScaleInv[(o / 128) * blocksPerRow + k / 128];
}

template <typename W> struct IsQ4 {
  static constexpr bool value = false;
};
template <> struct IsQ4<Q4Groups> {
  static constexpr bool value = true;
};

/// An f16 (the low 16 bits of `h`) widened to f32, exactly.
__device__ __forceinline__ float f16ToF32(uint32_t h) {
  float f;
  asm("{.reg .b16 t;\ncvt.u16.u32 t, %1;\ncvt.f32.f16 %0, t;\n}" : "=f"(f) : "r"(h));
  return f;
}

/// Bytes of a and b picked by `sel` (PTX prmt: selector nibbles 0-3 pick a's bytes, 4-7 b's).
__device__ __forceinline__ uint32_t bytePerm(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

/// (scale, minimum) of Q4 group `group` of row o, as f32.
__device__ __forceinline__ void q4Params(const LinearGpuArgs &a, int64_t o, int64_t group,
                                         float &scale, float &minimum) {
  const uint32_t p = a.weightGroups[o * (a.inFeatures / kQ4Group) + group];
  scale = f16ToF32(p & 0xFFFFu);
  minimum = f16ToF32(p >> 16);
}

/// 2^23 + q for a code q in the low four bits of `bits` (the rest of its bits ignored), minus
/// 2^23: the code as an f32, exactly.
__device__ __forceinline__ float q4CodeF32(uint32_t bits) {
  return __uint_as_float(0x4B000000u | (bits & 0xFu)) - 8388608.0f;
}

/// Weight element (o, k) widened to f32 exactly as the reference widens it (fp8: value x scale,
/// one f32 rounding; Q4: scale x q is exact in f32, so fmaf(scale, q, minimum) is the format's
/// product-then-sum).
template <typename W>
__device__ __forceinline__ float weightAt(const LinearGpuArgs &a, int64_t o, int64_t k) {
  if constexpr (IsQ4<W>::value) {
    const uint8_t byte = static_cast<const uint8_t *>(a.weight)[o * (a.inFeatures / 2) + k / 2];
    float scale, minimum;
    q4Params(a, o, k / kQ4Group, scale, minimum);
    return fmaf(scale, q4CodeF32((k & 1) != 0 ? byte >> 4 : byte), minimum);
  } else {
    const W v = static_cast<const W *>(a.weight)[o * a.inFeatures + k];
    if constexpr (sizeof(W) == 1) {
      return __fmul_rn(toFloat(v), fp8Scale(a, o, k));
    } else {
      return toFloat(v);
    }
  }
}

/// The 16 / sizeof(W) weights of row o from k on, widened to f32 (zero past the row's end). Q4:
/// the 16 weights of half `half` of the 16-byte chunk `raw` whose first weight is k (always
/// whole: in is a multiple of 64).
template <typename W>
__device__ __forceinline__ void widenWeights(const LinearGpuArgs &a, int64_t o, int64_t k, bool vec,
                                             const U32x4 &raw, float *w, int half = 0) {
  if constexpr (IsQ4<W>::value) {
    float scale, minimum;
    q4Params(a, o, k / kQ4Group, scale, minimum);
    const uint32_t lo = half == 0 ? raw.x : raw.z, hi = half == 0 ? raw.y : raw.w;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      w[e] = fmaf(scale, q4CodeF32(lo >> (4 * e)), minimum);
      w[8 + e] = fmaf(scale, q4CodeF32(hi >> (4 * e)), minimum);
    }
    return;
  }
  constexpr int E = 16 / sizeof(W);
  if (!vec) {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      w[e] = k + e < a.inFeatures ? weightAt<W>(a, o, k + e) : 0.0f;
    }
    return;
  }
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (sizeof(W) == 4) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      w[e] = __uint_as_float(words[e]);
    }
  } else if constexpr (sizeof(W) == 2) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      w[2 * e] = bf16Lo(words[e]);
      w[2 * e + 1] = bf16Hi(words[e]);
    }
  } else {
    // The 16 values share one 128-wide block (vec: k is a multiple of 16).
    const float scale = fp8Scale(a, o, k);
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const float v = __fmul_rn(fp8Scaled(words[e / 4] >> (8 * (e % 4))), 0x1p120f);
      w[e] = __fmul_rn(v, scale);
    }
  }
}

/// E activations [k, k + E) of `row` (length n) widened to f32, zero past n.
template <typename T, int E>
__device__ __forceinline__ void loadActivations(const T *row, int64_t k, int64_t n, bool vec,
                                                float *x) {
  if (!vec) {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      x[e] = k + e < n ? toFloat(row[k + e]) : 0.0f;
    }
    return;
  }
  if (k >= n) {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      x[e] = 0.0f;
    }
    return;
  }
  constexpr int kBytes = E * static_cast<int>(sizeof(T));
  if constexpr (kBytes == 8) {
    uint32_t lo, hi;
    loadShared8(row + k, lo, hi);
    x[0] = bf16Lo(lo);
    x[1] = bf16Hi(lo);
    x[2] = bf16Lo(hi);
    x[3] = bf16Hi(hi);
  } else {
#pragma unroll
    for (int q = 0; q < kBytes / 16; ++q) {
      const U32x4 v = loadShared16(reinterpret_cast<const uint8_t *>(row + k) + 16 * q);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (sizeof(T) == 4) {
          x[4 * q + e] = __uint_as_float(words[e]);
        } else {
          x[8 * q + 2 * e] = bf16Lo(words[e]);
          x[8 * q + 2 * e + 1] = bf16Hi(words[e]);
        }
      }
    }
  }
}

/// One step of a warp's reduce-scatter of 2 * Half values per lane: a lane keeps the half its lane
/// bit selects and adds its partner's copy of that half.
template <int Half> __device__ __forceinline__ void butterflyStep(float *v, int lane) {
  const bool upper = (lane & Half) != 0;
#pragma unroll
  for (int j = 0; j < Half; ++j) {
    const float send = upper ? v[j] : v[j + Half];
    const float keep = upper ? v[j + Half] : v[j];
    v[j] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, Half);
  }
}

} // namespace linear_detail

// ---------------------------------------------------------------------------------------------
// Decode, bf16 x bf16: block = 16 kMTiles outputs x 16 rows, warps split K.
//
// Lane (g = lane / 4, t = lane % 4) owns weight rows o0 + g + 8i (i < 2 kMTiles) and activation
// rows r0 + g, r0 + 8 + g. Per step a warp covers 4 x kUnroll chunks of 8 k; lane t takes chunks
// 4j + t and loads, for each of its rows, the chunk's 16 bytes. mma.m16n8k16 wants, from lane
// (g, t), A elements (g, 2t..2t+1), (g + 8, 2t..2t+1), (g, 2t+8..2t+9), (g + 8, 2t+8..2t+9) and
// B elements (2t..2t+1, g), (2t+8..2t+9, g): reading the chunk's k 0-3 as logical k {2t, 2t+1,
// 2t+8, 2t+9} of one mma and k 4-7 as those of a second one is a permutation of K applied to both
// operands alike, so the product is unchanged and every load feeds the tensor cores directly.
// Activations are re-read per block (from L2), so wider blocks (kMTiles = 4) halve that traffic.
// ---------------------------------------------------------------------------------------------
template <typename T, typename W, int kMTiles = kLinearDecodeMTiles,
          int kUnroll = kLinearDecodeUnroll>
__global__ void __launch_bounds__(kLinearDecodeMaxWarps * 32)
    linearDecodeMmaKernel(LinearGpuArgs a) {
  static_assert(sizeof(T) == 2 && sizeof(W) == 2, "linearDecodeMmaKernel is bf16 x bf16");
  using namespace linear_detail;
  constexpr int kOuts = 16 * kMTiles, kWRows = 2 * kMTiles, kRows = kLinearDecodeRows;
  extern __shared__ float partial[]; // [warp][16 rows][kOuts outputs]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t in = a.inFeatures, out = a.outFeatures;
  const uint32_t rowGroups = static_cast<uint32_t>((a.rows + kRows - 1) / kRows);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x % rowGroups) * kRows;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x / rowGroups) * kOuts;
  const int64_t restRows = a.rows - r0;
  const int nRows = static_cast<int>(restRows < kRows ? restRows : kRows);
  const bool vec = in % 8 == 0 && aligned16(a.x) && aligned16(a.weight);

  const uint16_t *weight = static_cast<const uint16_t *>(a.weight);
  const uint16_t *x = static_cast<const uint16_t *>(a.x) + r0 * in;
  const uint16_t *wRow[kWRows];
  bool wValid[kWRows];
#pragma unroll
  for (int i = 0; i < kWRows; ++i) {
    const int64_t o = o0 + g + 8 * i;
    wValid[i] = o < out;
    wRow[i] = weight + (wValid[i] ? o : 0) * in;
  }
  const bool xValid0 = g < nRows, xValid1 = 8 + g < nRows;
  const uint16_t *xRow0 = x + (xValid0 ? g : 0) * in;
  const uint16_t *xRow1 = x + (xValid1 ? 8 + g : 0) * in;
  const bool twoRowTiles = nRows > 8;

  float acc[kMTiles][2][4] = {}; // [weight tile (16 outputs)][activation tile (8 rows)][fragment]
  const int64_t chunks = (in + 7) / 8;
  for (int64_t c0 = static_cast<int64_t>(warp) * 4 * kUnroll; c0 < chunks;
       c0 += static_cast<int64_t>(warps) * 4 * kUnroll) {
    U32x4 w[kUnroll][kWRows];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t k = (c0 + 4 * j + t) * 8;
#pragma unroll
      for (int i = 0; i < kWRows; ++i) {
        w[j][i] = wValid[i] ? loadBf16x8<true>(wRow[i], k, in, vec) : zero4();
      }
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t k = (c0 + 4 * j + t) * 8;
      const U32x4 x0 = xValid0 ? loadBf16x8<false>(xRow0, k, in, vec) : zero4();
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        const U32x4 &lo = w[j][2 * m], &hi = w[j][2 * m + 1];
        mmaBf16(acc[m][0], lo.x, hi.x, lo.y, hi.y, x0.x, x0.y);
        mmaBf16(acc[m][0], lo.z, hi.z, lo.w, hi.w, x0.z, x0.w);
      }
      if (twoRowTiles) {
        const U32x4 x1 = xValid1 ? loadBf16x8<false>(xRow1, k, in, vec) : zero4();
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          const U32x4 &lo = w[j][2 * m], &hi = w[j][2 * m + 1];
          mmaBf16(acc[m][1], lo.x, hi.x, lo.y, hi.y, x1.x, x1.y);
          mmaBf16(acc[m][1], lo.z, hi.z, lo.w, hi.w, x1.z, x1.w);
        }
      }
    }
  }

  storeDecodeFragments<kMTiles, kOuts>(partial + warp * kRows * kOuts, acc, twoRowTiles ? 2 : 1, g,
                                       t);
  __syncthreads();
  T *y = static_cast<T *>(a.y);
  for (int i = threadIdx.x; i < nRows * kOuts; i += blockDim.x) {
    const int r = i / kOuts, o = i % kOuts;
    if (o0 + o < out) {
      float sum = 0.0f;
      for (int v = 0; v < warps; ++v) {
        sum += partial[(v * kRows + r) * kOuts + o];
      }
      y[(r0 + r) * out + o0 + o] = outputAt<T>(a, r0 + r, o0 + o, sum);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decode, bf16 activations x quantized weights (Q4 groups, fp8 blocks): blocks of 16 kMTiles
// outputs x 16 rows whose warps split K in units (Q4: 128 k, two groups; fp8: 64 k, half a scale
// block), the codes decoded in registers to bf16 integers that the tensor cores multiply exactly,
// one f32 accumulator per group folded into the output's.
//
// Loads: each warp streams its units through a private ring of kStages shared-memory slots filled
// by cp.async, kStages - 1 units ahead of the one it multiplies: 16 bytes of codes per lane and
// weight row, the Q4 group parameters (8 bytes, a row's two groups, per lane), and the unit's
// activations of the block's rows (linearQuantSlotBytes), so that no load in the loop waits on
// memory (a profile of the first form, which read activations from global memory in the loop,
// had their loads the first stall). A slot is read back only after cp.async.wait_group and
// __syncwarp, and refilled only after the __syncwarp that ends its unit. Each copy's source,
// place and bound are worked out once before the loop, with few live registers (at 128 a thread
// ptxas recomputes what does not fit); the copies past a warp's last unit are of zero bytes rather
// than branched around. Two slots measured fastest (six were 30-40% slower): the kernel is bound
// by its warps' dependent decode / mma / fold chains and the instructions they issue, so the loop
// is instantiated per activation tile count and alignment (decodeQuantDispatch) to leave its body
// branch-free for the scheduler.
//
// Q4: lane (g, t) copies 16-byte chunk t of the unit's 64 bytes of row g + 8i (chunk c stored at
// c ^ (g & 2), which makes the reads below conflict-free) and reads back, for group G, the 8 bytes
// [32G + 8t, +8): 16 codes of that group, so an mma's four lanes read one group. A code word's
// nibbles s and s + 4 become a bf16 pair (128 + q: a shift and one LOP3 with the mask and
// 0x43004300 in registers), decoded once per (group, weight tile) and used by both activation
// tiles; the activations are paired alike (one PRMT per pair, per row, shared by all the block's
// outputs). Σx per group and row comes from one more mma against ones, so a group adds scale ·
// Σx·(128 + q) + (minimum - 128 scale) · Σx.
// fp8: lane t copies 16 bytes at 16t of the unit and reads them back as they are (the unit lies
// in one 128-wide scale block, whose scale the block's outputs share); bytes become bf16 by
// PRMT/LOP3 and one bf16x2 multiply by 2^120 (exact, subnormals included), and the block adds
// scaleInv · Σx·v.
//
// The warps' partial sums meet in shared memory (over the rings); linearDecodeQuantSplitKernel
// also splits K over the kSplit blocks of a thread-block cluster, which add their sums through
// distributed shared memory, for products with too few outputs to fill the SMs.
// ---------------------------------------------------------------------------------------------
namespace linear_detail {

/// fp8 e4m3 bytes b0, b1 (sel 0x1404) or b2, b3 (sel 0x3424) of `v` as a bf16 pair, exactly.
__device__ __forceinline__ uint32_t fp8Pair(uint32_t v, uint32_t sel) {
  const uint32_t f = bytePerm(v, 0u, sel);                            // each half: byte << 8
  const uint32_t bits = ((f >> 4) & 0x07F007F0u) | (f & 0x80008000u); // value x 2^-120
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(bits), "r"(0x7B807B80u), "r"(0x80008000u));
  return r;
}

/// 16 bytes of an fp8 row of `n` from k (zero past n) by element loads.
__device__ __forceinline__ U32x4 loadFp8x16Scalar(const uint8_t *row, int64_t k, int64_t n) {
  uint32_t v[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    v[e] = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int64_t kk = k + 4 * e + b;
      v[e] |= (kk < n ? static_cast<uint32_t>(row[kk]) : 0u) << (8 * b);
    }
  }
  return U32x4{v[0], v[1], v[2], v[3]};
}

/// 16 bytes of an fp8 row of `n` from k (zero past n), the 16-byte load when `vec`.
__device__ __forceinline__ U32x4 loadFp8x16(const uint8_t *row, int64_t k, int64_t n, bool vec) {
  if (vec) {
    return k < n ? loadStream(row + k) : zero4();
  }
  return loadFp8x16Scalar(row, k, n);
}

/// 16 bf16 activations [k, k + 16) of `row` (length n) as 8 packed pairs, zero past n.
__device__ __forceinline__ void loadBf16x16(const uint16_t *row, int64_t k, int64_t n, bool vec,
                                            bool valid, uint32_t (&x)[8]) {
  const U32x4 a = valid ? loadBf16x8<false>(row, k, n, vec) : zero4();
  const U32x4 b = valid ? loadBf16x8<false>(row, k + 8, n, vec) : zero4();
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
  x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

__device__ __forceinline__ void loadSharedU64(uint32_t address, uint32_t &a, uint32_t &b) {
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(a), "=r"(b) : "r"(address));
}
__device__ __forceinline__ U32x4 loadSharedU128(uint32_t address) {
  U32x4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address));
  return v;
}

/// (a & b) | c in one LOP3 (ptxas emits two when b and c are both immediates).
__device__ __forceinline__ uint32_t andOr(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

template <typename T, typename W, int kMTiles, int kStages, int kSplit, int kXTiles, bool kVecX>
__device__ __forceinline__ void decodeQuantBody(const LinearGpuArgs &a, int64_t tileBlock,
                                                unsigned rank) {
  static_assert(sizeof(T) == 2 && sizeof(W) == 1, "linearDecodeQuantKernel is bf16 x Q4 / fp8");
  static_assert(kStages >= 2, "a ring of two slots at least");
  constexpr bool kQ4 = IsQ4<W>::value;
  constexpr int kOuts = 16 * kMTiles, kWRows = 2 * kMTiles, kRows = kLinearDecodeRows;
  constexpr int kUnitK = kQ4 ? 128 : 64;
  constexpr int kCodeBytes = kWRows * 512;
  constexpr int kXOffset = kCodeBytes + (kQ4 ? kWRows * 64 : 0);     // a slot's activations
  constexpr int kXChunks = kUnitK / 8;                               // 16-byte chunks a row of them
  constexpr int kXCopies = kVecX ? (kRows * kXChunks + 31) / 32 : 0; // a lane's, at 16 rows
  constexpr uint32_t kOnes = 0x3F803F80u;                            // bf16 (1, 1)
  extern __shared__ __align__(16) unsigned char quantSmem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t in = a.inFeatures, out = a.outFeatures;
  const uint32_t rowGroups = static_cast<uint32_t>((a.rows + kRows - 1) / kRows);
  const int64_t r0 = (tileBlock % rowGroups) * kRows;
  const int64_t o0 = (tileBlock / rowGroups) * kOuts;
  const int64_t restRows = a.rows - r0;
  const int nRows = static_cast<int>(restRows < kRows ? restRows : kRows);
  const bool vecW = kQ4 || (in % 16 == 0 && aligned16(a.weight));
  const int64_t rowBytes = kQ4 ? in / 2 : in;
  const int64_t groupsPerRow = in / kQ4Group;
  const uint8_t *weight = static_cast<const uint8_t *>(a.weight);
  // The ring holds the block's activations where the launch gave it room (decodeQuantDispatch).
  const int slotBytes = linearQuantSlotBytes(kQ4, kMTiles, kVecX ? a.rows : 0);

  const uint16_t *x = static_cast<const uint16_t *>(a.x) + r0 * in;
  const bool xValid[2] = {g < nRows, 8 + g < nRows};
  const bool xAligned = in % 8 == 0 && aligned16(a.x); // outside the ring: 16-byte loads
  const uint16_t *xRow[2] = {x + (xValid[0] ? g : 0) * in, x + (xValid[1] ? 8 + g : 0) * in};
  const float *fp8Scales = a.weightScaleInv + (o0 / 128) * ((in + 127) / 128);

  // This block's units [uBegin, uEnd) (its share of K when the cluster splits it); warp w takes
  // units uBegin + w + warps j.
  const int64_t units = (in + kUnitK - 1) / kUnitK;
  const int64_t uBegin = units * rank / kSplit, uEnd = units * (rank + 1) / kSplit;
  const int64_t firstUnit = uBegin + warp;
  const int mine = firstUnit < uEnd ? static_cast<int>((uEnd - firstUnit + warps - 1) / warps) : 0;
  const uint32_t ring = sharedAddress(quantSmem) + warp * (kStages * slotBytes);
  const int64_t kFirst = firstUnit * kUnitK, kStep = static_cast<int64_t>(warps) * kUnitK;

  // What a lane copies into a slot, worked out once (few registers: at 128 a thread, ptxas
  // would recompute each address every unit): each source at the warp's first unit, which moves
  // by kStep elements a unit (K fits in 32 bits: config.json's ceilings, Config.cpp, keep every
  // linear's far under 2^31), its place in the slot and its bound on K.
  // Codes: lane (g, t) copies chunk t of weight row g + 8i (Q4: stored at chunk t ^ (g & 2),
  // fp8: at chunk 32i + lane). Q4 parameters: lane l copies the unit's two groups of the warp's
  // weight rows r = l + 32p, output o0 + r % 8 + 8 (r / 8), to 8r. Activations (rows 16-byte
  // aligned): chunk c = lane + 32p of the unit's rows, row c / kXChunks, stored at chunk c %
  // kXChunks ^ (row & 1), which makes the reads below conflict-free.
  const int kFirst32 = static_cast<int>(kFirst), kStep32 = static_cast<int>(kStep);
  const int in32 = static_cast<int>(in);
  const int64_t wRowStride = 8 * rowBytes; // between weight rows g + 8i and g + 8(i + 1)
  const uint8_t *wSrc = weight + (o0 + g) * rowBytes + (kQ4 ? kFirst / 2 : kFirst) + 16 * t;
  uint32_t wOk = 0; // bit i: weight row g + 8i exists
#pragma unroll
  for (int i = 0; i < kWRows; ++i) {
    wOk |= (o0 + g + 8 * i < out ? 1u : 0u) << i;
  }
  constexpr int kParamCopies = kQ4 ? kWRows / 4 : 0; // rows lane + 32p
  const int64_t pRow = o0 + (lane & 7) + 8 * (lane >> 3);
  uint32_t pOk = 0; // bit p: row lane + 32p exists
#pragma unroll
  for (int p = 0; p < kParamCopies; ++p) {
    pOk |= (pRow + 32 * p < out ? 1u : 0u) << p;
  }
  const uint32_t *pSrc = a.weightGroups + (pOk ? pRow * groupsPerRow + kFirst / kQ4Group : 0);
  // A lane's activation copies share a chunk of K; copy p is row xRow0 + p * kXRowsPerCopy.
  constexpr int kXRowsPerCopy = 32 / kXChunks;
  const int xRow0 = lane / kXChunks, xChunk = lane % kXChunks;
  const int xK = kFirst32 + 8 * xChunk; // the copies' k at the first unit
  const uint16_t *xSrc = x + (xRow0 < nRows ? xRow0 * in + xK : 0);
  const uint32_t xDst = kXOffset + xRow0 * 2 * kUnitK + 16 * (xChunk ^ (xRow0 & 1));
  const int xCopies = (nRows * kXChunks + 31) / 32; // copies any lane of the warp makes
  // Where lane (g, t) reads its activations in a slot: row 8n + g (row 0 for rows past nRows,
  // whose sums are never stored), chunks 2t and 2t + 1 of each 64 k.
  uint32_t xRead[2][2];
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    const int r = xValid[n] ? 8 * n + g : 0;
    xRead[n][0] = kXOffset + r * 2 * kUnitK + 16 * ((2 * t) ^ (r & 1));
    xRead[n][1] = kXOffset + r * 2 * kUnitK + 16 * ((2 * t + 1) ^ (r & 1));
  }

  // Copies unit j of the warp's into its slot. Past the warp's last unit the copies are of zero
  // bytes (zeros written, nothing read, no branch): the slot is the one the last unit freed.
  auto issue = [&](int j) {
    const bool live = j < mine;
    const uint32_t slot = ring + (j % kStages) * slotBytes;
    const int step = j * kStep32, k0 = kFirst32 + step;
#pragma unroll
    for (int i = 0; i < kWRows; ++i) {
      const uint8_t *src = wSrc + i * wRowStride + (kQ4 ? step / 2 : step);
      if constexpr (kQ4) {
        const bool ok = live && ((wOk >> i) & 1u) && k0 + 32 * t < in32;
        cpAsync16(slot + (i * 8 + g) * 64 + 16 * (t ^ (g & 2)), ok ? src : weight, ok ? 16u : 0u);
      } else {
        const int k = k0 + 16 * t;
        const bool ok = live && ((wOk >> i) & 1u) && k < in32;
        const uint32_t dst = slot + (i * 32 + lane) * 16;
        if (vecW) {
          cpAsync16(dst, ok ? src : weight, ok ? 16u : 0u);
        } else {
          const U32x4 v =
              ok ? loadFp8x16Scalar(weight + (o0 + g + 8 * i) * rowBytes, k, in) : zero4();
          storeShared16(dst, v.x, v.y, v.z, v.w);
        }
      }
    }
#pragma unroll
    for (int p = 0; p < kParamCopies; ++p) {
      // Both groups, or the first alone where the unit is K's last half unit; in one 8-byte copy
      // where rows hold an even number of groups (else the pair may be misaligned).
      const bool row = live && ((pOk >> p) & 1u);
      const bool first = row && k0 < in32, second = row && k0 + 64 < in32;
      const uint32_t *src = pSrc + 32 * p * groupsPerRow + step / kQ4Group;
      const uint32_t dst = slot + kCodeBytes + 8 * (lane + 32 * p);
      if (groupsPerRow % 2 == 0) {
        cpAsync8(dst, first ? src : a.weightGroups, second ? 8u : first ? 4u : 0u);
      } else {
        cpAsync4(dst, first ? src : a.weightGroups, first ? 4u : 0u);
        cpAsync4(dst + 4, second ? src + 1 : a.weightGroups, second ? 4u : 0u);
      }
    }
#pragma unroll
    for (int p = 0; p < kXCopies; ++p) {
      if (p >= xCopies) {
        break; // uniform: no lane has a row there
      }
      // Rows past nRows are never read (see xRead), and the slot has room for min(rows, 16)
      // rows only, so those copies are not made at all. One activation tile means nRows <= 8;
      // `r < 8` says so at compile time, which lets the compiler drop the copies past row 8.
      const int r = xRow0 + p * kXRowsPerCopy;
      const bool ok = xK + step < in32;
      cpAsync16If(live && (kXTiles == 2 || r < 8) && r < nRows,
                  slot + xDst + p * kXRowsPerCopy * 2 * kUnitK,
                  ok ? xSrc + p * kXRowsPerCopy * in + step : x, ok ? 16u : 0u);
    }
  };

  float acc[kMTiles][2][4] = {}; // [weight tile (16 outputs)][activation tile (8 rows)][fragment]
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    issue(j);
    cpAsyncCommit();
  }
  for (int j = 0; j < mine; ++j) {
    issue(j + kStages - 1);
    cpAsyncCommit();
    cpAsyncWait<kStages - 1>();
    __syncwarp();
    const int64_t u = firstUnit + static_cast<int64_t>(j) * warps;
    const uint32_t slot = ring + (j % kStages) * slotBytes;
    // Lane (g, t)'s 16 activations of row 8n + g at k [kUnit + 16t, +16) of the unit's first
    // (or, for Q4, second: kUnit 64) 64 k, as 8 packed pairs.
    auto activations = [&](int n, int kUnit, uint32_t (&xr)[8]) {
      if constexpr (kVecX) {
        const U32x4 lo = loadSharedU128(slot + xRead[n][0] + 2 * kUnit);
        const U32x4 hi = loadSharedU128(slot + xRead[n][1] + 2 * kUnit);
        xr[0] = lo.x, xr[1] = lo.y, xr[2] = lo.z, xr[3] = lo.w;
        xr[4] = hi.x, xr[5] = hi.y, xr[6] = hi.z, xr[7] = hi.w;
      } else {
        loadBf16x16(xRow[n], u * kUnitK + kUnit + 16 * t, in, xAligned, xValid[n], xr);
      }
    };
    if constexpr (kQ4) {
      const uint32_t kMask = 0x000F000Fu, kBias = 0x43004300u; // in registers: one LOP3 a pair
      uint32_t prm[kWRows][2];
#pragma unroll
      for (int i = 0; i < kWRows; ++i) {
        loadSharedU64(slot + kCodeBytes + (i * 8 + g) * 8, prm[i][0], prm[i][1]);
      }
      const int swap = (g >> 1) & 1;
#pragma unroll
      for (int G = 0; G < 2; ++G) {
        // Pair p = 4 word + s is k (8 word + s, 8 word + s + 4), as the codes' pairs.
        uint32_t xp[2][8];
        float sx[2][4] = {};
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          if (n < kXTiles) {
            uint32_t xr[8];
            activations(n, 64 * G, xr);
#pragma unroll
            for (int wd = 0; wd < 2; ++wd) {
              xp[n][4 * wd + 0] = bytePerm(xr[4 * wd], xr[4 * wd + 2], 0x5410u);
              xp[n][4 * wd + 1] = bytePerm(xr[4 * wd], xr[4 * wd + 2], 0x7632u);
              xp[n][4 * wd + 2] = bytePerm(xr[4 * wd + 1], xr[4 * wd + 3], 0x5410u);
              xp[n][4 * wd + 3] = bytePerm(xr[4 * wd + 1], xr[4 * wd + 3], 0x7632u);
            }
#pragma unroll
            for (int m = 0; m < 4; ++m) {
              mmaBf16(sx[n], kOnes, kOnes, kOnes, kOnes, xp[n][2 * m], xp[n][2 * m + 1]);
            }
          }
        }
        const uint32_t piece = 32 * (G ^ swap) + 8 * t;
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          const int i0 = 2 * mt, i1 = 2 * mt + 1;
          uint32_t lo[2], hi[2];
          loadSharedU64(slot + (i0 * 8 + g) * 64 + piece, lo[0], lo[1]);
          loadSharedU64(slot + (i1 * 8 + g) * 64 + piece, hi[0], hi[1]);
          // Nibbles s and s + 4 of a code word as a bf16 pair (128 + q each).
          uint32_t A[4][4];
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            const int wd = m >> 1, sh = 2 * (m & 1);
            A[m][0] = andOr(lo[wd] >> (4 * sh), kMask, kBias);
            A[m][1] = andOr(hi[wd] >> (4 * sh), kMask, kBias);
            A[m][2] = andOr(lo[wd] >> (4 * sh + 4), kMask, kBias);
            A[m][3] = andOr(hi[wd] >> (4 * sh + 4), kMask, kBias);
          }
          // shifted: minimum - 128 scale, for the codes' offset of 128.
          const float s0 = f16ToF32(prm[i0][G] & 0xFFFFu);
          const float s1 = f16ToF32(prm[i1][G] & 0xFFFFu);
          const float m0 = fmaf(-128.0f, s0, f16ToF32(prm[i0][G] >> 16));
          const float m1 = fmaf(-128.0f, s1, f16ToF32(prm[i1][G] >> 16));
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            if (n < kXTiles) {
              float q[4] = {};
#pragma unroll
              for (int m = 0; m < 4; ++m) {
                mmaBf16(q, A[m][0], A[m][1], A[m][2], A[m][3], xp[n][2 * m], xp[n][2 * m + 1]);
              }
              float *d = acc[mt][n];
              d[0] = fmaf(m0, sx[n][0], fmaf(s0, q[0], d[0]));
              d[1] = fmaf(m0, sx[n][1], fmaf(s0, q[1], d[1]));
              d[2] = fmaf(m1, sx[n][0], fmaf(s1, q[2], d[2]));
              d[3] = fmaf(m1, sx[n][1], fmaf(s1, q[3], d[3]));
            }
          }
        }
      }
    } else {
      const float blockScale = fp8Scales[u / 2];
      uint32_t xr[2][8];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        if (n < kXTiles) {
          activations(n, 0, xr[n]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const U32x4 lo = loadSharedU128(slot + ((2 * mt) * 32 + lane) * 16);
        const U32x4 hi = loadSharedU128(slot + ((2 * mt + 1) * 32 + lane) * 16);
        const uint32_t lw[4] = {lo.x, lo.y, lo.z, lo.w}, hw[4] = {hi.x, hi.y, hi.z, hi.w};
        uint32_t A[4][4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          A[m][0] = fp8Pair(lw[m], 0x1404u);
          A[m][1] = fp8Pair(hw[m], 0x1404u);
          A[m][2] = fp8Pair(lw[m], 0x3424u);
          A[m][3] = fp8Pair(hw[m], 0x3424u);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          if (n < kXTiles) {
            float v[4] = {};
#pragma unroll
            for (int m = 0; m < 4; ++m) {
              mmaBf16(v, A[m][0], A[m][1], A[m][2], A[m][3], xr[n][2 * m], xr[n][2 * m + 1]);
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              acc[mt][n][e] = fmaf(blockScale, v[e], acc[mt][n][e]);
            }
          }
        }
      }
    }
    __syncwarp();
  }
  cpAsyncWait<0>();
  __syncwarp();

  // The warp's partial sums go over its own ring.
  const int ringFloats = kStages * slotBytes / 4;
  storeDecodeFragments<kMTiles, kOuts>(reinterpret_cast<float *>(quantSmem) + warp * ringFloats,
                                       acc, kXTiles, g, t);
  __syncthreads();
  auto warpSum = [&](int i) {
    float sum = 0.0f;
    for (int v = 0; v < warps; ++v) {
      sum += reinterpret_cast<const float *>(quantSmem)[v * ringFloats + i];
    }
    return sum;
  };
  T *y = static_cast<T *>(a.y);
  if constexpr (kSplit == 1) {
    for (int i = threadIdx.x; i < nRows * kOuts; i += blockDim.x) {
      const int r = i / kOuts, o = i % kOuts;
      if (o0 + o < out) {
        y[(r0 + r) * out + o0 + o] = outputAt<T>(a, r0 + r, o0 + o, warpSum(i));
      }
    }
  } else {
    // The block's sums after warp 0's partials (the ring is at least twice their size).
    float *blockSum = reinterpret_cast<float *>(quantSmem) + kRows * kOuts;
    for (int i = threadIdx.x; i < nRows * kOuts; i += blockDim.x) {
      blockSum[i] = warpSum(i);
    }
    clusterSync();
    const uint32_t sumAddress = sharedAddress(blockSum);
    for (int i = static_cast<int>(rank) + kSplit * threadIdx.x; i < nRows * kOuts;
         i += kSplit * blockDim.x) {
      const int r = i / kOuts, o = i % kOuts;
      if (o0 + o < out) {
        float sum = 0.0f;
#pragma unroll
        for (int q = 0; q < kSplit; ++q) {
          sum += loadClusterShared(sumAddress + 4 * i, q);
        }
        y[(r0 + r) * out + o0 + o] = outputAt<T>(a, r0 + r, o0 + o, sum);
      }
    }
    clusterSync(); // no block's shared memory goes while another reads it
  }
}

/// decodeQuantBody instantiated for the block's activation tiles (rows beyond 8 of its 16) and
/// whether the activations come through the ring (rows 16-byte aligned, and the launch's shared
/// memory holds them: linearDecodeQuantLaunch) or from global memory, so that the loop body has
/// no branches and the scheduler can overlap the independent mma chains and loads of a unit.
/// Either way a lane gets the same values, so the sums do not depend on which.
template <typename T, typename W, int kMTiles, int kStages, int kSplit>
__device__ __forceinline__ void decodeQuantDispatch(const LinearGpuArgs &a, int64_t tileBlock,
                                                    unsigned rank) {
  const int64_t rowGroups = (a.rows + kLinearDecodeRows - 1) / kLinearDecodeRows;
  const bool two = a.rows - (tileBlock % rowGroups) * kLinearDecodeRows > 8;
  const uint32_t ringWithX =
      (blockDim.x >> 5) * kStages * linearQuantSlotBytes(IsQ4<W>::value, kMTiles, a.rows);
  const bool vec =
      a.inFeatures % 8 == 0 && aligned16(a.x) && ringWithX <= ptx::dynamicSharedBytes();
  if (two) {
    vec ? decodeQuantBody<T, W, kMTiles, kStages, kSplit, 2, true>(a, tileBlock, rank)
        : decodeQuantBody<T, W, kMTiles, kStages, kSplit, 2, false>(a, tileBlock, rank);
  } else {
    vec ? decodeQuantBody<T, W, kMTiles, kStages, kSplit, 1, true>(a, tileBlock, rank)
        : decodeQuantBody<T, W, kMTiles, kStages, kSplit, 1, false>(a, tileBlock, rank);
  }
}

} // namespace linear_detail

template <typename T, typename W, int kMTiles = kLinearDecodeMTiles,
          int kStages = kLinearQuantStages>
__global__ void __launch_bounds__(kLinearQuantMaxWarps * 32)
    linearDecodeQuantKernel(LinearGpuArgs a) {
  linear_detail::decodeQuantDispatch<T, W, kMTiles, kStages, 1>(a, blockIdx.x, 0);
}

/// The same with K split over the kSplit blocks of a cluster (grid kSplit x the plain grid).
template <typename T, typename W, int kMTiles, int kSplit, int kStages = kLinearQuantStages>
__global__ void __cluster_dims__(kSplit, 1, 1) __launch_bounds__(kLinearQuantMaxWarps * 32)
    linearDecodeQuantSplitKernel(LinearGpuArgs a) {
  linear_detail::decodeQuantDispatch<T, W, kMTiles, kStages, kSplit>(a, blockIdx.x / kSplit,
                                                                     ptx::clusterRank());
}

// ---------------------------------------------------------------------------------------------
// Prefill, bf16 x bf16, shared by both prefill kernels: C[rows, out] = x[rows, in] · W[out, in]ᵀ
// with both operands K-contiguous (x is the row-major A, W the column-major B). Tiles are staged
// in shared memory by cp.async (element loads where rows are not 16-byte aligned), rows of kK bf16
// whose 16-byte chunks are XOR-swizzled by the row: with 8 chunks per row (128 bytes) chunk c of
// row r sits at c ^ (r % 8), which is also the hardware's 128-byte swizzle that wgmma reads; with
// 4 chunks (64 bytes) at c ^ ((r / 2) % 4). Either way the 8 rows an ldmatrix reads hit 8
// distinct 16-byte bank groups.
// ---------------------------------------------------------------------------------------------
namespace linear_detail {

template <int kK> __device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  if constexpr (kK == 64) {
    return row * 128 + ((chunk ^ (row & 7)) << 4);
  } else {
    return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
  }
}

/// One operand's Rows x kK tile from `base` (rows of `in` bf16 from `row0`, `rowCount` of them)
/// into shared memory at `dst`, by `Threads` threads.
template <int Rows, int kK, int Threads>
__device__ __forceinline__ void loadPrefillTile(uint32_t dst, const uint16_t *base, int64_t row0,
                                                int64_t rowCount, int64_t in, int64_t k0,
                                                bool vec) {
  constexpr int kChunks = kK / 8;
  static_assert(Rows * kChunks % Threads == 0, "whole chunks per thread");
#pragma unroll
  for (int j = 0; j < Rows * kChunks / Threads; ++j) {
    const int id = threadIdx.x + Threads * j;
    const int row = id / kChunks, chunk = id % kChunks;
    const int64_t r = row0 + row, k = k0 + chunk * 8;
    const bool valid = r < rowCount && k < in;
    if (vec) {
      const uint16_t *src = valid ? base + r * in + k : base;
      cpAsync16(dst + swizzled<kK>(row, chunk), src, valid ? 16u : 0u);
    } else {
      const U32x4 v = valid ? loadBf16x8<false>(base + r * in, k, in, false) : zero4();
      storeShared16(dst + swizzled<kK>(row, chunk), v.x, v.y, v.z, v.w);
    }
  }
}

/// Stores output (row, col) and (row, col + 1) (col even) of y (outputAt: with bias and addend).
__device__ __forceinline__ void storePair(const LinearGpuArgs &a, int64_t row, int64_t col,
                                          float v0, float v1, bool pairs) {
  const int64_t out = a.outFeatures;
  if (row >= a.rows || col >= out) {
    return;
  }
  Bf16 *dst = static_cast<Bf16 *>(a.y) + row * out + col;
  const Bf16 b0 = outputAt<Bf16>(a, row, col, v0);
  if (col + 1 < out) {
    const Bf16 b1 = outputAt<Bf16>(a, row, col + 1, v1);
    if (pairs) {
      *reinterpret_cast<uint32_t *>(dst) =
          static_cast<uint32_t>(b0.bits) | (static_cast<uint32_t>(b1.bits) << 16);
      return;
    }
    dst[1] = b1;
  }
  dst[0] = b0;
}

} // namespace linear_detail

namespace linear_detail {

/// One quantized weight row's share of a 32-k prefill stage, held in registers between its load
/// and its decode: Q4 16 bytes of codes and the group's (scale, minimum); fp8 32 bytes and
/// whether the row's 128-block scale is zero (the tile is then stored as zeros).
struct PrefillQuantRegs {
  U32x4 c[2];
  uint32_t params;
  bool zero;
};

template <typename W>
__device__ __forceinline__ void fetchQuantRow(const LinearGpuArgs &a, int64_t o, int64_t k0,
                                              bool vecW, PrefillQuantRegs &r) {
  const int64_t in = a.inFeatures;
  const bool valid = o < a.outFeatures;
  const uint8_t *weight = static_cast<const uint8_t *>(a.weight);
  if constexpr (IsQ4<W>::value) {
    r.c[0] = valid ? loadStream(weight + o * (in / 2) + k0 / 2) : zero4();
    r.params = valid ? a.weightGroups[o * (in / kQ4Group) + k0 / kQ4Group] : 0u;
    r.zero = false;
  } else {
    r.c[0] = valid ? loadFp8x16(weight + o * in, k0, in, vecW) : zero4();
    r.c[1] = valid ? loadFp8x16(weight + o * in, k0 + 16, in, vecW) : zero4();
    r.zero = !valid || fp8Scale(a, o, k0) == 0.0f;
  }
}

/// Stores the row's 32 weights decoded to bf16 as the 4 swizzled 16-byte chunks of its tile row.
template <typename W>
__device__ __forceinline__ void storeQuantRow(uint32_t tile, int row, const PrefillQuantRegs &r) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    uint32_t v[4];
    if constexpr (IsQ4<W>::value) {
      const float scale = f16ToF32(r.params & 0xFFFFu), minimum = f16ToF32(r.params >> 16);
      const uint32_t words[4] = {r.c[0].x, r.c[0].y, r.c[0].z, r.c[0].w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float lo = fmaf(scale, q4CodeF32(words[c] >> (8 * e)), minimum);
        const float hi = fmaf(scale, q4CodeF32(words[c] >> (8 * e + 4)), minimum);
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(v[e]) : "f"(hi), "f"(lo));
      }
    } else {
      const U32x4 &q = r.c[c >> 1];
      const uint32_t w0 = (c & 1) == 0 ? q.x : q.z, w1 = (c & 1) == 0 ? q.y : q.w;
      v[0] = r.zero ? 0u : fp8Pair(w0, 0x1404u);
      v[1] = r.zero ? 0u : fp8Pair(w0, 0x3424u);
      v[2] = r.zero ? 0u : fp8Pair(w1, 0x1404u);
      v[3] = r.zero ? 0u : fp8Pair(w1, 0x3424u);
    }
    storeShared16(tile + swizzled<32>(row, c), v[0], v[1], v[2], v[3]);
  }
}

} // namespace linear_detail

// mma.sync (sm_90a and sm_121a): block tile 128 rows x kTileN outputs x kK, warps of 64 x 64
// (4 x 8 mma tiles) two deep along the rows; 4 stages of 32 k or 3 of 64. Quantized W (Q4 groups,
// fp8 blocks; stages of 32 k): each thread loads one weight row's share of the stage kStages - 1
// ahead into registers and stores it decoded to bf16 after the current stage's mmas; for fp8 the
// accumulators are held in units of the current 128-block's scale (that of the warp's 64 outputs,
// which lie in one block), multiplied by old / new at each block and by the last at the end.
template <typename T, typename W, int kTileN = kLinearPrefillTileN, int kK = kLinearPrefillK>
__global__ void __launch_bounds__(kTileN) linearPrefillMmaKernel(LinearGpuArgs a) {
  constexpr bool kQuant = sizeof(W) == 1;
  static_assert(sizeof(T) == 2 && (sizeof(W) == 2 || kQuant),
                "linearPrefillMmaKernel is bf16 x bf16, Q4 or fp8");
  static_assert(kTileN == 128 || kTileN == 256, "64 x 64 warp tiles, 2 x (kTileN / 64) warps");
  static_assert(kK == 32 || kK == 64, "rows of 64 or 128 bytes");
  static_assert(!kQuant || kK == 32, "quantized tiles are decoded 32 k a row");
  using namespace linear_detail;
  constexpr int kStages = kK == 32 ? 4 : 3, kThreads = kTileN;
  constexpr int kXBytes = kLinearPrefillTileM * kK * 2;
  constexpr int kWBytes = kTileN * kK * 2;
  extern __shared__ __align__(128) uint8_t tiles[]; // [stage][x tile, W tile]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp & 1) * 64, wn = (warp >> 1) * 64;
  const int64_t in = a.inFeatures, out = a.outFeatures, rows = a.rows;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kLinearPrefillTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  const bool vec = in % 8 == 0 && aligned16(a.x) && (kQuant || aligned16(a.weight));
  const bool vecW = in % 16 == 0 && aligned16(a.weight); // fp8 rows in 16-byte loads
  const uint16_t *x = static_cast<const uint16_t *>(a.x);
  const uint16_t *weight = static_cast<const uint16_t *>(a.weight);
  const uint32_t base = sharedAddress(tiles);
  const int kTiles = static_cast<int>((in + kK - 1) / kK);
  PrefillQuantRegs quant;

  auto load = [&](int kt) {
    const uint32_t stage = base + (kt % kStages) * (kXBytes + kWBytes);
    const int64_t k0 = static_cast<int64_t>(kt) * kK;
    loadPrefillTile<kLinearPrefillTileM, kK, kThreads>(stage, x, m0, rows, in, k0, vec);
    if constexpr (kQuant) {
      fetchQuantRow<W>(a, n0 + threadIdx.x, k0, vecW, quant);
    } else {
      loadPrefillTile<kTileN, kK, kThreads>(stage + kXBytes, weight, n0, out, in, k0, vec);
    }
  };
  auto storeQuant = [&](int kt) {
    if constexpr (kQuant) {
      storeQuantRow<W>(base + (kt % kStages) * (kXBytes + kWBytes) + kXBytes, threadIdx.x, quant);
    }
  };

  float acc[4][8][4] = {};
  float unit = 1.0f; // fp8: the scale the accumulators are in units of
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kTiles) {
      load(s);
      storeQuant(s);
    }
    cpAsyncCommit();
  }
  for (int kt = 0; kt < kTiles; ++kt) {
    cpAsyncWait<kStages - 2>();
    __syncthreads(); // tile kt landed for all; the stage tile kt - 1 used is free again
    const bool ahead = kt + kStages - 1 < kTiles;
    if (ahead) {
      load(kt + kStages - 1);
    }
    cpAsyncCommit();
    if constexpr (kQuant && !IsQ4<W>::value) {
      if ((kt * kK) % kFp8Block == 0) {
        const float s = fp8Scale(a, n0 + wn < out ? n0 + wn : 0, static_cast<int64_t>(kt) * kK);
        if (s != 0.0f) {
          const float ratio = unit / s;
          unit = s;
#pragma unroll
          for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                acc[mi][ni][e] *= ratio;
              }
            }
          }
        }
      }
    }
    const uint32_t xs = base + (kt % kStages) * (kXBytes + kWBytes);
    const uint32_t ws = xs + kXBytes;
#pragma unroll
    for (int kk = 0; kk < kK / 16; ++kk) {
      uint32_t af[4][4], bf[4][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        // Matrices: rows 0-7 / 8-15 of k 0-7, then of k 8-15 (a0a1, a2a3, a4a5, a6a7).
        const int row = wm + mi * 16 + (lane & 15);
        ldmatrixX4(af[mi], xs + swizzled<kK>(row, kk * 2 + (lane >> 4)));
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        // Matrices: outputs 0-7 at k 0-7 and 8-15 (b0b1, b2b3 of tile 2np), then outputs 8-15.
        const int row = wn + np * 16 + ((lane >> 4) << 3) + (lane & 7);
        ldmatrixX4(bf[np], ws + swizzled<kK>(row, kk * 2 + ((lane >> 3) & 1)));
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) {
          const uint32_t *b = bf[ni >> 1] + (ni & 1) * 2;
          mmaBf16(acc[mi][ni], af[mi][0], af[mi][1], af[mi][2], af[mi][3], b[0], b[1]);
        }
      }
    }
    if (ahead) {
      storeQuant(kt + kStages - 1);
    }
  }
  cpAsyncWait<0>();
  if constexpr (kQuant && !IsQ4<W>::value) {
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
      for (int ni = 0; ni < 8; ++ni) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[mi][ni][e] *= unit;
        }
      }
    }
  }

  const bool pairs = out % 2 == 0 && (reinterpret_cast<uint64_t>(a.y) & 3u) == 0;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 8; ++ni) {
      const int64_t row = m0 + wm + mi * 16 + g, col = n0 + wn + ni * 8 + 2 * t;
      storePair(a, row, col, acc[mi][ni][0], acc[mi][ni][1], pairs);
      storePair(a, row + 8, col, acc[mi][ni][2], acc[mi][ni][3], pairs);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// wgmma (sm_90a only): block tile 128 rows x 256 outputs x 64 k, two warpgroups of 64 x 256 (one
// wgmma.m64n256k16 per 16 k), 4 stages of 48 KB fed by cp.async two tiles ahead. Both operands
// are K-major with the 128-byte swizzle (rows of 64 k, 8-row groups 1 KB apart); advancing 16 k
// within a row is +32 bytes on the descriptor's start address, as the swizzle is a function of
// the address bits and every tile starts on a 1 KB boundary. A stage is refilled two iterations
// after its wgmmas were issued, once wgmma.wait_group(1) and a barrier say they are done.
// ---------------------------------------------------------------------------------------------
namespace linear_detail {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/// A wgmma shared-memory descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t wgmmaDescriptor(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

/// d[64 x 256] += a[64 x 16] · b[256 x 16]ᵀ, both from shared memory (one warpgroup).
__device__ __forceinline__ void wgmma256(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "
      "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "
      "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
      "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "
      "%123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(1));
}

/// Pins the accumulators in place around the asynchronous wgmmas (the compiler must not move
/// them while the tensor cores write them).
__device__ __forceinline__ void wgmmaFenceOperands(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) {
    asm volatile("" : "+f"(d[i])::"memory");
  }
}
#endif

} // namespace linear_detail

template <typename T, typename W>
__global__ void __launch_bounds__(256) linearPrefillWgmmaKernel(LinearGpuArgs a) {
  static_assert(sizeof(T) == 2 && sizeof(W) == 2, "linearPrefillWgmmaKernel is bf16 x bf16");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace linear_detail;
  constexpr int kK = 64, kStages = kLinearWgmmaStages, kTileM = kLinearPrefillTileM;
  constexpr int kTileN = kLinearWgmmaTileN, kThreads = 256;
  constexpr int kXBytes = kTileM * kK * 2, kWBytes = kTileN * kK * 2;
  extern __shared__ uint8_t wgmmaTiles[]; // [stage][x tile, W tile], from a 1 KB boundary
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  const int64_t in = a.inFeatures, out = a.outFeatures, rows = a.rows;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  const bool vec = in % 8 == 0 && aligned16(a.x) && aligned16(a.weight);
  const uint16_t *x = static_cast<const uint16_t *>(a.x);
  const uint16_t *weight = static_cast<const uint16_t *>(a.weight);
  const uint32_t base = (sharedAddress(wgmmaTiles) + 1023u) & ~1023u;
  const int kTiles = static_cast<int>((in + kK - 1) / kK);

  auto load = [&](int kt) {
    const uint32_t stage = base + (kt % kStages) * (kXBytes + kWBytes);
    const int64_t k0 = static_cast<int64_t>(kt) * kK;
    loadPrefillTile<kTileM, kK, kThreads>(stage, x, m0, rows, in, k0, vec);
    loadPrefillTile<kTileN, kK, kThreads>(stage + kXBytes, weight, n0, out, in, k0, vec);
  };

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) {
    acc[i] = 0.0f;
  }
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < kTiles) {
      load(s);
    }
    cpAsyncCommit();
  }
  for (int kt = 0; kt < kTiles; ++kt) {
    cpAsyncWait<kStages - 3>();
    // This thread's copies of tile kt are done; make them visible to the tensor cores' (async)
    // proxy, then wait for everyone's (and for the wgmmas of tile kt - 2 in both warpgroups).
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (kt + kStages - 2 < kTiles) {
      load(kt + kStages - 2);
    }
    cpAsyncCommit();
    const uint32_t xs = base + (kt % kStages) * (kXBytes + kWBytes) + group * 64 * 128;
    const uint32_t ws = base + (kt % kStages) * (kXBytes + kWBytes) + kXBytes;
    wgmmaFenceOperands(acc);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < kK / 16; ++kk) {
      wgmma256(acc, wgmmaDescriptor(xs + kk * 32), wgmmaDescriptor(ws + kk * 32));
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    wgmmaFenceOperands(acc);
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    wgmmaFenceOperands(acc);
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  wgmmaFenceOperands(acc);
  cpAsyncWait<0>();

  // Accumulator j of a thread: n8 tile j / 4; elements 0, 1 at (row g, cols 2t, 2t + 1) of the
  // warp's 16 rows, 2, 3 eight rows down.
  const bool pairs = out % 2 == 0 && (reinterpret_cast<uint64_t>(a.y) & 3u) == 0;
  const int64_t row = m0 + group * 64 + (warp & 3) * 16 + g;
#pragma unroll
  for (int j = 0; j < kTileN / 8; ++j) {
    const int64_t col = n0 + j * 8 + 2 * t;
    storePair(a, row, col, acc[4 * j], acc[4 * j + 1], pairs);
    storePair(a, row + 8, col, acc[4 * j + 2], acc[4 * j + 3], pairs);
  }
#else
  __trap(); // wgmma exists on sm_90a only; linearKernelFor never picks this kernel elsewhere
#endif
}

// ---------------------------------------------------------------------------------------------
// Decode, any T and W (f32 FMA): block = 4 outputs x 8 rows, 4 warps split K. Lane l of a warp
// takes chunk l of every 32 (16 bytes of each of the 4 weight rows), widens it once and multiplies
// it into all 8 rows' activations. The 32 accumulators of a lane then meet in a butterfly that
// leaves lane l with the warp's total of accumulator l (31 shuffles instead of 32 x 5).
// ---------------------------------------------------------------------------------------------
template <typename T, typename W>
__global__ void __launch_bounds__(kLinearGemvWarps * 32) linearGemvKernel(LinearGpuArgs a) {
  using namespace linear_detail;
  // Weights per 16-byte chunk, widened E at a time (Q4: 32 a chunk, in two halves of 16).
  constexpr bool kQ4 = IsQ4<W>::value;
  constexpr int E = kQ4 ? 16 : 16 / sizeof(W), kHalves = kQ4 ? 2 : 1, kChunkK = E * kHalves;
  constexpr int kOuts = kLinearGemvOuts, kRows = kLinearGemvRows;
  static_assert(kOuts * kRows == 32, "one accumulator per lane after the butterfly");
  __shared__ float partial[kLinearGemvWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t in = a.inFeatures, out = a.outFeatures;
  const uint32_t rowGroups = static_cast<uint32_t>((a.rows + kRows - 1) / kRows);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x % rowGroups) * kRows;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x / rowGroups) * kOuts;
  const int64_t restRows = a.rows - r0;
  const int nRows = static_cast<int>(restRows < kRows ? restRows : kRows);
  // Q4 rows are whole chunks (in is a multiple of 64); the code plane must be 16-byte aligned.
  const bool vec = (kQ4 || in % E == 0) && aligned16(a.x) && aligned16(a.weight);
  const uint8_t *weight = static_cast<const uint8_t *>(a.weight);
  const int64_t rowBytes = kQ4 ? in / 2 : in * static_cast<int64_t>(sizeof(W));
  const T *x = static_cast<const T *>(a.x) + r0 * in;

  float acc[kOuts * kRows] = {}; // [output][row]
  const int64_t chunks = (in + kChunkK - 1) / kChunkK;
  for (int64_t c = static_cast<int64_t>(warp) * 32 + lane; c - lane < chunks;
       c += kLinearGemvWarps * 32) {
    const int64_t k = c * kChunkK;
    U32x4 raw[kOuts];
#pragma unroll
    for (int i = 0; i < kOuts; ++i) {
      raw[i] = vec && c < chunks && o0 + i < out ? loadStream(weight + (o0 + i) * rowBytes + c * 16)
                                                 : zero4();
    }
    if (c >= chunks) {
      continue;
    }
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const int64_t kh = k + h * E;
      float w[kOuts][E];
#pragma unroll
      for (int i = 0; i < kOuts; ++i) {
        if (o0 + i < out) {
          widenWeights<W>(a, o0 + i, k, vec, raw[i], w[i], h);
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) {
            w[i][e] = 0.0f;
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r < nRows) {
          float xv[E];
          loadActivations<T, E>(x + r * in, kh, in, vec, xv);
#pragma unroll
          for (int i = 0; i < kOuts; ++i) {
#pragma unroll
            for (int e = 0; e < E; ++e) {
              acc[i * kRows + r] = fmaf(xv[e], w[i][e], acc[i * kRows + r]);
            }
          }
        }
      }
    }
  }

  // Butterfly reduce-scatter: lane l ends with the warp's total of accumulator l.
  butterflyStep<16>(acc, lane);
  butterflyStep<8>(acc, lane);
  butterflyStep<4>(acc, lane);
  butterflyStep<2>(acc, lane);
  butterflyStep<1>(acc, lane);
  partial[warp][lane] = acc[0];
  __syncthreads();
  if (warp == 0) {
    const int i = lane / kRows, r = lane % kRows;
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kLinearGemvWarps; ++v) {
      sum += partial[v][lane];
    }
    if (r < nRows && o0 + i < out) {
      static_cast<T *>(a.y)[(r0 + r) * out + o0 + i] = outputAt<T>(a, r0 + r, o0 + i, sum);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Prefill, any T and W (f32 FMA, exact to f32 accumulation): 64 x 64 outputs per block, 256
// threads of 4 x 4, K in steps of 16 through shared memory (widened to f32 on the way in, the next
// step's loads in flight while the current one is multiplied).
// ---------------------------------------------------------------------------------------------
template <typename T, typename W>
__global__ void __launch_bounds__(256) linearTiledKernel(LinearGpuArgs a) {
  using namespace linear_detail;
  constexpr int kTile = kLinearTile, kK = 16, kPad = 4;
  __shared__ float xs[2][kK][kTile + kPad], ws[2][kK][kTile + kPad];
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int64_t in = a.inFeatures, out = a.outFeatures, rows = a.rows;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTile;
  // Loader: thread loads 4 consecutive k of row (tid / 4) of both tiles.
  const int lr = threadIdx.x >> 2, lk = (threadIdx.x & 3) * 4;
  const T *xRow = static_cast<const T *>(a.x) + (m0 + lr < rows ? m0 + lr : 0) * in;
  const bool xOk = m0 + lr < rows, wOk = n0 + lr < out;
  const int64_t o = n0 + lr;

  float xr[4], wr[4];
  auto fetch = [&](int64_t k0) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t k = k0 + lk + e;
      xr[e] = xOk && k < in ? toFloat(xRow[k]) : 0.0f;
      wr[e] = wOk && k < in ? weightAt<W>(a, o, k) : 0.0f;
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      xs[buf][lk + e][lr] = xr[e];
      ws[buf][lk + e][lr] = wr[e];
    }
  };

  float acc[4][4] = {};
  fetch(0);
  stash(0);
  __syncthreads();
  const int64_t steps = (in + kK - 1) / kK;
  for (int64_t s = 0; s < steps; ++s) {
    const int buf = static_cast<int>(s & 1);
    if (s + 1 < steps) {
      fetch((s + 1) * kK);
    }
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      float xv[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        xv[i] = xs[buf][k][ty + 16 * i];
        wv[i] = ws[buf][k][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
        }
      }
    }
    if (s + 1 < steps) {
      stash(buf ^ 1); // the other buffer was last read before the previous barrier
    }
    __syncthreads();
  }

  T *y = static_cast<T *>(a.y);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t col = n0 + tx + 16 * j;
    if (col >= out) {
      continue;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = m0 + ty + 16 * i;
      if (row < rows) {
        y[row * out + col] = outputAt<T>(a, row, col, acc[i][j]);
      }
    }
  }
}

} // namespace glm::kernels
