// convert: bf16 -> f32 widening (contract in convert_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/convert/convert_gpu.h"

namespace glm::kernels {

__global__ void __launch_bounds__(256) convertBf16ToF32Kernel(ConvertGpuArgs a) {
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  const Bf16 *x = static_cast<const Bf16 *>(a.x);
  float *out = static_cast<float *>(a.out);
  if (a.count % 8 == 0) {
    if (first < a.count) {
      // 8 bf16 in one 16-byte load; the upper half of each 32-bit word is the odd element.
      const uint4 packed = *reinterpret_cast<const uint4 *>(x + first);
      const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
      float v[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[2 * i] = __uint_as_float(words[i] << 16);
        v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
      }
      reinterpret_cast<float4 *>(out + first)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4 *>(out + first)[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    return;
  }
  for (int64_t i = first; i < first + 8 && i < a.count; ++i) {
    out[i] = toFloat(x[i]);
  }
}

} // namespace glm::kernels
