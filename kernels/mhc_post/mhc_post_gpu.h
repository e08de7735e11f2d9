// mhc_post on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   y        T   [tokens, hidden]        sub-block output
//   residual T   [tokens, hc, hidden]    R: the streams mhc_pre read
//   post     f32 [tokens, hc]
//   comb     f32 [tokens, hc, hc]        comb[t][i][j]
//   out      T   [tokens, hc, hidden]    may alias residual
//
//   out[t][j] = post[t][j] · y[t] + Σ_i comb[t][i][j] · R[t][i]
//
// hc is the kernel's template parameter (4 for GLM-5.3). Grid (tokens, ceil(hidden / 1024)), 128
// threads: a thread reads one 8-element chunk of y and of every old stream, and writes that chunk
// of every new stream, so out may overwrite residual. With T = bf16 it rounds where HF's bf16
// forward does (glm53_arch.md §2.2): post and comb to bf16, the product post·y to bf16, the
// 4-term sum Σ_i comb·R (an f32-accumulated bf16 matmul) to bf16, and their sum to bf16.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct MhcPostGpuArgs {
  const void *y;
  const void *residual;
  const void *post; // f32
  const void *comb; // f32
  void *out;
  int64_t tokens;
  int64_t hidden;
};

#ifndef __CUDACC_RTC__
inline LaunchDims mhcPostLaunch(int64_t tokens, int64_t hidden) {
  return rowChunkLaunch(tokens, hidden);
}
#endif

} // namespace glm::kernels
