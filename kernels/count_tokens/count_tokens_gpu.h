// count_tokens on the GPU: the argument struct the kernel takes by value, and its grid rule
// (contract in count_tokens.h). One thread per row; rows of one sequence may hold the same token,
// so the updates are atomic (an OR and an add commute, so the result is the reference's).
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/common/StepContext.h"
#include "kernels/sample/sample_params.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct CountTokensGpuArgs {
  const int32_t *tokens;
  StepContext ctx; // positions, slots, rowsPerSequence
  const SampleWords *params;
  uint32_t *counts;
  int64_t rows;
  int64_t vocab;
};

constexpr int kCountTokensThreads = 256;

#ifndef __CUDACC_RTC__
inline LaunchDims countTokensLaunch(int64_t rows) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>((rows + kCountTokensThreads - 1) / kCountTokensThreads);
  d.block[0] = kCountTokensThreads;
  return d;
}
#endif

} // namespace glm::kernels
