// concat on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   inputs[i]  T [rows, widths[i]]       i < count <= kConcatMaxInputs
//   out        T [rows, Σ widths]         out[r] = inputs[0][r] ‖ inputs[1][r] ‖ …
//
// Grid (rows, ceil(max width / 1024), count), 128 threads: block (r, y, i) copies up to 1024
// elements of input i's row r, 8 a thread, to its place in out's row.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

/// The MTP block joins two rows ([enorm(e), hnorm(h)]); four leaves room without a pointer table.
constexpr int kConcatMaxInputs = 4;

struct ConcatGpuArgs {
  const void *inputs[kConcatMaxInputs];
  int64_t widths[kConcatMaxInputs];
  void *out;
  int64_t rows;
  int32_t count; // inputs used
};

#ifndef __CUDACC_RTC__
inline LaunchDims concatLaunch(int64_t rows, int64_t maxWidth, int count) {
  LaunchDims d = rowChunkLaunch(rows, maxWidth);
  d.grid[2] = static_cast<unsigned>(count);
  return d;
}
#endif

} // namespace glm::kernels
