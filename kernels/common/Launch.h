// A kernel launch's shape: what each kernels/<op>/<op>_gpu.h grid rule returns, and what a plan
// step's KernelLaunch records.
#pragma once

#include <cstdint>

namespace glm::kernels {

struct LaunchDims {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned sharedMemory = 0;
};

/// ceil(a / b) for launch arithmetic.
inline unsigned ceilDiv(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

} // namespace glm::kernels
