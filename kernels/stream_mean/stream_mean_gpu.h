// stream_mean on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   streams T [tokens, hc, hidden]
//   out     T [tokens, hidden]          out[t] = (1/hc) Σ_s streams[t][s]
//
// Grid (tokens, ceil(hidden / 1024)), 128 threads, one 8-element chunk each. The sum is taken in
// f32 in stream order and rounded once, as torch's bf16 mean (f32 accumulation, one rounding).
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct StreamMeanGpuArgs {
  const void *streams;
  void *out;
  int64_t tokens;
  int64_t hcMult;
  int64_t hidden;
};

#ifndef __CUDACC_RTC__
inline LaunchDims streamMeanLaunch(int64_t tokens, int64_t hidden) {
  return rowChunkLaunch(tokens, hidden);
}
#endif

} // namespace glm::kernels
