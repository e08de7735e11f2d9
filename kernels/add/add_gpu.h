// add on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   a, b   T [count]
//   out    T [count]     out = a + b; may alias a or b
//
// Each thread adds one chunk of 8 elements (16-byte loads and stores when the pointers allow), 256
// threads a block. With T = bf16 the sum is taken in f32 and rounded once, as torch's bf16 add.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct AddGpuArgs {
  const void *a;
  const void *b;
  void *out;
  int64_t count;
};

#ifndef __CUDACC_RTC__
inline LaunchDims addLaunch(int64_t count) {
  LaunchDims d;
  d.grid[0] = ceilDiv(count, 8 * 256);
  d.block[0] = 256;
  return d;
}
#endif

} // namespace glm::kernels
