// exl3 on the GPU: the device primitives of EXL3 decoding (the state of a stream position, the
// three codebooks, the 128-point Hadamard across a warp) and the exact reconstruction kernels of
// exl3_gpu.h. reference/exl3_format.md is the specification; each primitive is bit-exact with
// kernels/exl3/exl3_ref.cpp.
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/exl3/exl3_gpu.h"

namespace glm::kernels {

/// §2.2-2.3: the 16-bit state of stream position p (0..255) of one tile, given as its 8·K
/// little-endian 32-bit words (u16 pairs, low half first, as stored): the 16 stream bits that end
/// at bit (p + 1)·K, cyclically, most significant first.
__device__ __forceinline__ uint32_t exl3State(const uint32_t *tile, int bits, int p) {
  int first = (p + 1) * bits - 16;
  if (first < 0) {
    first += 256 * bits; // the window wraps around the end of the tail-biting stream
  }
  const int word = first >> 5;
  const int next = word + 1 == 8 * bits ? 0 : word + 1;
  // The 32 stream bits from `first` on are the high word of (tile[word]:tile[next]) << offset.
  return __funnelshift_l(tile[next], tile[word], first & 31) >> 16;
}

__device__ __forceinline__ float exl3HalfToFloat(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

/// §3: the fp16 bits a codebook (0 3INST, 1 MCG, 2 MUL1) assigns to a 16-bit state, computed with
/// the same single-rounding fp16 instructions exllamav3's kernels use.
__device__ __forceinline__ uint16_t exl3CodebookHalf(uint32_t state, int codebook) {
  uint16_t w;
  if (codebook == 2) {
    // 1024 + the byte sum of the hashed state is an exact fp16 integer; one fma maps it.
    const uint32_t x = state * 0x83DCD12Du;
    uint32_t h;
    asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(h) : "r"(x), "r"(0x01010101u), "r"(0x6400u));
    const uint16_t scale = 0x1EEEu, offset = 0xC931u;
    asm("fma.rn.f16 %0, %1, %2, %3;"
        : "=h"(w)
        : "h"(static_cast<uint16_t>(h)), "h"(scale), "h"(offset));
    return w;
  }
  uint32_t x = codebook == 0 ? state * 89226354u + 64248484u : state * 0xCBAC1FEDu;
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  asm("add.rn.f16 %0, %1, %2;"
      : "=h"(w)
      : "h"(static_cast<uint16_t>(x & 0xFFFFu)), "h"(static_cast<uint16_t>(x >> 16)));
  return w;
}

/// §4.1 without the 1/√128: the natural-order Sylvester butterfly over 128 values held by a warp,
/// lane l holding elements l, l + 32, l + 64, l + 96. Stages run in the CPU reference's order
/// (pair distance 1, 2, ..., 64) and each output is the same a + b or a - b of the same operands,
/// so a double-precision transform equals the reference's bit for bit.
template <typename T> __device__ __forceinline__ void exl3Butterfly128(T (&v)[4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 1; h < 32; h <<= 1) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const T other = __shfl_xor_sync(0xFFFFFFFFu, v[j], h);
      // The lower element of a pair becomes a + b, the upper a - b (a the lower one).
      v[j] = (lane & h) ? other - v[j] : v[j] + other;
    }
  }
#pragma unroll
  for (int h = 1; h < 4; h <<= 1) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if ((j & h) == 0) {
        const T a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

/// double -> bf16, rounded once to nearest even, as FloatFormats.h's doubleToBf16 (no detour
/// through f32, whose rounding could decide a tie differently).
__device__ __forceinline__ Bf16 exl3DoubleToBf16(double x) {
  const uint64_t u = static_cast<uint64_t>(__double_as_longlong(x));
  const uint64_t magnitude = u & 0x7FFFFFFFFFFFFFFFull;
  const uint16_t sign = static_cast<uint16_t>((u >> 48) & 0x8000u);
  if (magnitude > 0x7FF0000000000000ull) {
    return Bf16{0x7FC0u};
  }
  int exponent = static_cast<int>(magnitude >> 52) - 1023;
  if (exponent < -126) {
    // bf16's subnormals are multiples of 2^-133; scaling by a power of two is exact.
    const double units = rint(fabs(x) * 0x1p133);
    return Bf16{static_cast<uint16_t>(sign | static_cast<uint16_t>(units))};
  }
  const uint64_t mantissa = magnitude & ((1ull << 52) - 1);
  uint32_t keep = static_cast<uint32_t>(mantissa >> 45);
  const uint64_t rest = mantissa & ((1ull << 45) - 1), half = 1ull << 44;
  if (rest > half || (rest == half && (keep & 1u))) {
    ++keep;
  }
  if (keep == 128u) {
    keep = 0;
    ++exponent;
  }
  if (exponent > 127) {
    return Bf16{static_cast<uint16_t>(sign | 0x7F80u)};
  }
  return Bf16{static_cast<uint16_t>(sign | ((exponent + 127) << 7) | keep)};
}

__device__ __forceinline__ const uint32_t *exl3Meta(const Exl3GpuWeights &w, int64_t m) {
  return reinterpret_cast<const uint32_t *>(w.slice + w.metaOffset) + 2 * m;
}

__global__ void __launch_bounds__(1024) exl3SelectKernel(const Exl3SelectGpuArgs a) {
  for (int64_t i = threadIdx.x; i < a.experts; i += blockDim.x) {
    a.mask[i] = 0;
  }
  __syncthreads();
  for (int64_t s = threadIdx.x; s < a.slots; s += blockDim.x) {
    const int64_t e = static_cast<int64_t>(a.expertIds[s]) - a.firstExpert;
    if (e >= 0 && e < a.experts) {
      a.mask[e] = 1;
    }
  }
}

__global__ void __launch_bounds__(256) exl3ReconstructKernel(const Exl3ReconstructGpuArgs a) {
  const Exl3GpuWeights &w = a.weights;
  const int64_t m = blockIdx.y;
  if (a.mask != nullptr && a.mask[m] == 0) {
    return;
  }
  extern __shared__ double exl3Shared[];
  auto *wHat = reinterpret_cast<uint16_t *>(exl3Shared); // [128][128], row = input feature
  double *rotated = exl3Shared + 128 * 128 * 2 / 8;      // [128][kExl3ReconstructColumns + 1]
  constexpr int stride = kExl3ReconstructColumns + 1;

  const int64_t blocksN = w.n / 128;
  const int64_t kb = blockIdx.x / blocksN, nb = blockIdx.x % blocksN;
  const uint32_t *meta = exl3Meta(w, m);
  const int bits = static_cast<int>(meta[0]), codebook = static_cast<int>(meta[1]);
  const auto *trellis = reinterpret_cast<const uint32_t *>(w.slice + m * w.trellisStride);
  const int64_t tilesN = w.n / 16;

  // Ŵ of the block: thread t decodes stream position t of each of its 8 × 8 tiles.
  const int p = threadIdx.x;
  const int r = exl3TileRow(p), c = exl3TileCol(p);
  for (int t = 0; t < 64; ++t) {
    const int tk = t >> 3, tn = t & 7;
    const uint32_t *tile = trellis + ((kb * 8 + tk) * tilesN + nb * 8 + tn) * 8 * bits;
    wHat[(16 * tk + r) * 128 + 16 * tn + c] = exl3CodebookHalf(exl3State(tile, bits, p), codebook);
  }
  __syncthreads();

  const double scale = 1.0 / sqrt(128.0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const auto *suh = reinterpret_cast<const uint16_t *>(w.slice + w.suhOffset) + m * w.k + kb * 128;
  const auto *svh = reinterpret_cast<const uint16_t *>(w.slice + w.svhOffset) + m * w.n + nb * 128;
  // Each pass rotates every row (Ŵ · H) but keeps kExl3ReconstructColumns of its columns, then
  // rotates those columns (H · ...): shared memory for all 128 columns in double would not fit
  // GB10's 99 KB per block.
  static_assert(kExl3ReconstructColumns == 32, "a pass keeps one element of each lane's four");
#pragma unroll
  for (int pass = 0; pass < 128 / kExl3ReconstructColumns; ++pass) {
    for (int row = warp; row < 128; row += 8) {
      double v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = exl3HalfToFloat(wHat[row * 128 + 32 * j + lane]);
      }
      exl3Butterfly128(v);
      // Column 32·pass + lane is v[pass] (kExl3ReconstructColumns == 32).
      rotated[row * stride + lane] = v[pass] * scale;
    }
    __syncthreads();
    for (int col = warp; col < kExl3ReconstructColumns; col += 8) {
      double v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = rotated[(32 * j + lane) * stride + col];
      }
      exl3Butterfly128(v);
      const int64_t o = nb * 128 + pass * kExl3ReconstructColumns + col;
      if (o < w.out) {
        const double sv = exl3HalfToFloat(svh[pass * kExl3ReconstructColumns + col]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t i = kb * 128 + 32 * j + lane;
          if (i < w.in) {
            const double su = exl3HalfToFloat(suh[32 * j + lane]);
            a.out[(m * w.out + o) * w.in + i] = exl3DoubleToBf16(v[j] * scale * su * sv);
          }
        }
      }
    }
    __syncthreads();
  }
}

} // namespace glm::kernels
