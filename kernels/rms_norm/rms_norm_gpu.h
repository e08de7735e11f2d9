// rms_norm on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   x       T [rows, dim]
//   weight  W [dim]          null = unweighted
//   out     T [rows, dim]    may alias x
//
// One block per row (256 threads, a strided pass over dim): the row's sum of squares is reduced in
// f32, the normalised row is rounded to T before the weight product as HF does, then rounded again.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct RmsNormGpuArgs {
  const void *x;
  const void *weight;
  void *out;
  int64_t rows;
  int64_t dim;
  float eps;
};

#ifndef __CUDACC_RTC__
inline LaunchDims rmsNormLaunch(int64_t rows) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(rows);
  d.block[0] = 256;
  return d;
}
#endif

} // namespace glm::kernels
