// swiglu on the GPU: the clamped SwiGLU activation between a plan's gate/up and down projections
// (the `glm.swiglu` op; the projections are linear's). The argument struct the kernel takes by
// value, and its grid rule.
//
//   gate  T [rows, width]   row stride inputStride (elements)
//   up    T [rows, width]   row stride inputStride
//   out   T [rows, width]   contiguous; may alias gate or up when inputStride == width
//
//   out = silu(min(gate, limit)) · clamp(up, −limit, limit)      limit = +inf: no clamps
//
// inputStride == width for separate gate and up tensors; 2·width with up = gate + width reads one
// fused [gate | up] projection row. With T = bf16 the kernel rounds as HF's bf16 forward does:
// silu is computed in f32 and rounded to bf16 (torch's bf16 silu), then the bf16 product rounds
// again. The clamps are exact in any type, and a NaN passes through them as torch.clamp's does.
//
// Grid (rows, ceil(width / 1024)), 128 threads, one 8-element chunk each.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct SwigluGpuArgs {
  const void *gate;
  const void *up;
  void *out;
  int64_t rows;
  int64_t width;
  int64_t inputStride;
  float limit;
};

#ifndef __CUDACC_RTC__
inline LaunchDims swigluLaunch(int64_t rows, int64_t width) { return rowChunkLaunch(rows, width); }
#endif

} // namespace glm::kernels
