// add: elementwise sum (contract in add_gpu.h), and the 8-element chunk loads and stores that the
// other elementwise kernels (concat, embedding, expand_streams, stream_mean, swiglu, mhc_*) share.
#pragma once

#include "kernels/add/add_gpu.h"
#include "kernels/common/Device.cuh"

namespace glm::kernels {
namespace elementwise {

/// Elements one thread moves: 16 bytes of bf16, 32 of f32. Wide enough that a warp issues 16-byte
/// accesses, narrow enough that a 4096-wide row still spreads over 512 threads at batch 1.
constexpr int kChunk = 8;

struct alignas(16) Bytes16 {
  uint32_t w[4];
};

__device__ __forceinline__ bool aligned16(const void *p) {
  return (reinterpret_cast<uint64_t>(p) & 15u) == 0;
}

/// The chunk at p widened to f32: 16-byte loads when `vector` (p 16-byte aligned, 8 elements in
/// bounds), else element by element for the first n, zeros after.
__device__ __forceinline__ void load8(const float *p, float (&v)[kChunk], int n, bool vector) {
  if (vector) {
    const Bytes16 lo = reinterpret_cast<const Bytes16 *>(p)[0];
    const Bytes16 hi = reinterpret_cast<const Bytes16 *>(p)[1];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = __uint_as_float(lo.w[i]);
      v[4 + i] = __uint_as_float(hi.w[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      v[i] = i < n ? p[i] : 0.0f;
    }
  }
}

__device__ __forceinline__ void load8(const Bf16 *p, float (&v)[kChunk], int n, bool vector) {
  if (vector) {
    const Bytes16 b = *reinterpret_cast<const Bytes16 *>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(b.w[i] << 16);
      v[2 * i + 1] = __uint_as_float(b.w[i] & 0xFFFF0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      v[i] = i < n ? toFloat(p[i]) : 0.0f;
    }
  }
}

/// Stores the first n values of a chunk, rounded to the destination type.
__device__ __forceinline__ void store8(float *p, const float (&v)[kChunk], int n, bool vector) {
  if (vector) {
    Bytes16 lo, hi;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo.w[i] = __float_as_uint(v[i]);
      hi.w[i] = __float_as_uint(v[4 + i]);
    }
    reinterpret_cast<Bytes16 *>(p)[0] = lo;
    reinterpret_cast<Bytes16 *>(p)[1] = hi;
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < n) {
        p[i] = v[i];
      }
    }
  }
}

__device__ __forceinline__ void store8(Bf16 *p, const float (&v)[kChunk], int n, bool vector) {
  if (vector) {
    Bytes16 b;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      b.w[i] = static_cast<uint32_t>(fromFloat<Bf16>(v[2 * i]).bits) |
               (static_cast<uint32_t>(fromFloat<Bf16>(v[2 * i + 1]).bits) << 16);
    }
    *reinterpret_cast<Bytes16 *>(p) = b;
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < n) {
        p[i] = fromFloat<Bf16>(v[i]);
      }
    }
  }
}

/// Elements of a chunk that start at `first` in a row of `width`.
__device__ __forceinline__ int chunkCount(int64_t first, int64_t width) {
  const int64_t left = width - first;
  return left < kChunk ? static_cast<int>(left) : kChunk;
}

} // namespace elementwise

template <typename T> __global__ void __launch_bounds__(256) addKernel(AddGpuArgs a) {
  using namespace elementwise;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (first >= a.count) {
    return;
  }
  const int n = chunkCount(first, a.count);
  const bool vector = n == kChunk && aligned16(a.a) && aligned16(a.b) && aligned16(a.out);
  float x[kChunk], y[kChunk];
  load8(static_cast<const T *>(a.a) + first, x, n, vector);
  load8(static_cast<const T *>(a.b) + first, y, n, vector);
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    x[i] += y[i];
  }
  store8(static_cast<T *>(a.out) + first, x, n, vector);
}

} // namespace glm::kernels
