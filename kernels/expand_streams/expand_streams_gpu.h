// expand_streams on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   x    T [tokens, hidden]
//   out  T [tokens, streams, hidden]     out[t][s] = x[t] for every stream s (exact copies)
//
// Grid (tokens, ceil(hidden / 1024)), 128 threads: each thread reads one 8-element chunk of x once
// and writes it to every stream.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct ExpandStreamsGpuArgs {
  const void *x;
  void *out;
  int64_t tokens;
  int64_t streams; // hc_mult
  int64_t hidden;
};

#ifndef __CUDACC_RTC__
inline LaunchDims expandStreamsLaunch(int64_t tokens, int64_t hidden) {
  return rowChunkLaunch(tokens, hidden);
}
#endif

} // namespace glm::kernels
