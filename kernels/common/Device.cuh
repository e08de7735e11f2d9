// Device helpers every kernel uses: loads and stores that widen to / narrow from f32, fp8 decoding
// and warp/block reductions. Compiled by NVRTC only (no CUDA headers: NVRTC does not ship them).
#pragma once

#include "kernels/common/DeviceTypes.h"

namespace glm::kernels {

__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(Bf16 v) {
  return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
}
/// fp8 e4m3fn -> f32, exact (bias 7, no infinities, S.1111.111 is NaN).
__device__ __forceinline__ float toFloat(Fp8E4m3 v) {
  const uint32_t sign = (v.bits & 0x80u) << 24;
  const uint32_t e = (v.bits >> 3) & 0xFu, m = v.bits & 0x7u;
  if (e == 0xFu && m == 0x7u) {
    return __uint_as_float(sign | 0x7FC00000u);
  }
  if (e == 0) {
    const float magnitude = static_cast<float>(m) * 0.001953125f; // subnormal: m/8 * 2^-6
    return sign ? -magnitude : magnitude;
  }
  return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

template <typename T> __device__ __forceinline__ T fromFloat(float v);
template <> __device__ __forceinline__ float fromFloat<float>(float v) { return v; }
/// Round to nearest even, as torch's .to(bfloat16); NaN stays a quiet NaN.
template <> __device__ __forceinline__ Bf16 fromFloat<Bf16>(float v) {
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return Bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  }
  u += 0x7FFFu + ((u >> 16) & 1u);
  return Bf16{static_cast<uint16_t>(u >> 16)};
}

/// The value an activation of type T holds after a store: identity for f32, bf16 rounding else.
template <typename T> __device__ __forceinline__ float roundTo(float v) {
  return toFloat(fromFloat<T>(v));
}

/// Eight consecutive elements from a 16-byte-aligned address, widened to f32.
__device__ __forceinline__ void load8(const float *p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4 *>(p);
  const float4 b = *reinterpret_cast<const float4 *>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8(const Bf16 *p, float (&v)[8]) {
  const uint4 q = *reinterpret_cast<const uint4 *>(p);
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  }
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  }
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
/// `scratch` holds 32 floats of shared memory; the call ends with the block synchronised, so it
/// may be called again with the same scratch.
__device__ __forceinline__ float blockSum(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpSum(v);
  if (lane == 0) {
    scratch[warp] = v;
  }
  __syncthreads();
  const int warps = blockDim.x >> 5;
  float total = lane < warps ? scratch[lane] : 0.0f;
  total = warpSum(total);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float blockMax(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpMax(v);
  if (lane == 0) {
    scratch[warp] = v;
  }
  __syncthreads();
  const int warps = blockDim.x >> 5;
  float total = lane < warps ? scratch[lane] : -__int_as_float(0x7F800000);
  total = warpMax(total);
  __syncthreads();
  return total;
}

} // namespace glm::kernels
