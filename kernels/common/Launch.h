// A kernel launch's shape: what each kernels/<op>/<op>_gpu.h grid rule returns, and what a plan
// step's KernelLaunch records.
#pragma once

#include <cstdint>
#include <string>

namespace glm::kernels {

struct LaunchDims {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned sharedMemory = 0;
};

/// One launch of a kernel instance named by its NVRTC name expression: what the grid rule of an
/// op that runs several kernels returns.
struct NamedLaunch {
  std::string name;
  LaunchDims dims;
};

/// A kernel instance (kernelInstance's NVRTC name expression) without its glm::kernels::
/// qualifications: the kernel's symbol in tables and in plan.launch's `kernel`.
inline std::string shortKernelName(std::string name) {
  const std::string prefix = "glm::kernels::";
  for (size_t at = name.find(prefix); at != std::string::npos; at = name.find(prefix)) {
    name.erase(at, prefix.size());
  }
  return name;
}

/// ceil(a / b) for launch arithmetic.
inline unsigned ceilDiv(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

/// The grid of the row-wise elementwise kernels: one block row per row, 128 threads each covering
/// 8 consecutive elements (a 16-byte bf16 access), as many blocks along the row as its width needs.
inline LaunchDims rowChunkLaunch(int64_t rows, int64_t width) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(rows);
  d.grid[1] = ceilDiv(width, 8 * 128);
  d.block[0] = 128;
  return d;
}

} // namespace glm::kernels
