// convert on the GPU: the argument struct and grid rule of bf16 -> f32 widening.
//
//   x    Bf16 [count]
//   out  f32  [count]   must not alias x
//
// Each thread widens 8 values (a 16-byte load, two 16-byte stores) when count is a multiple of 8,
// else one at a time.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct ConvertGpuArgs {
  const void *x;
  void *out;
  int64_t count;
};

#ifndef __CUDACC_RTC__
inline LaunchDims convertLaunch(int64_t count) {
  LaunchDims d;
  d.grid[0] = count > 0 ? ceilDiv(count, 8 * 256) : 1;
  d.block[0] = 256;
  return d;
}
#endif

} // namespace glm::kernels
