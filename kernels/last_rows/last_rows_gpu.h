// last_rows on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   x          T [batch · rowsPerSequence, width]
//   positions  i32 [batch · rowsPerSequence]   the step's: a negative position marks padding
//   out        T [batch, width]                 must not alias x
//   picked     i32 [batch]                      the positions of the rows out holds (-1: none),
//                                               the head's positions after it
//
//   out[b] = x[r], r the last row of sequence b (rows [b R, (b + 1) R)) whose position is not
//   negative; a sequence without one (a padding batch entry) copies its first row, which nothing
//   reads.
//
// One block row per sequence, 128 threads each moving 8 consecutive elements (16-byte accesses
// where the rows allow): a prefill chunk of 2048 rows is scanned for its last real row by every
// block in ~16 loads a thread, then one row of 4096 moves. Exact: a copy.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct LastRowsGpuArgs {
  const void *x;
  const int32_t *positions;
  void *out;
  int32_t *picked;
  int64_t batch;
  int64_t rowsPerSequence;
  int64_t width;
};

constexpr int kLastRowsThreads = 128;

#ifndef __CUDACC_RTC__
inline LaunchDims lastRowsLaunch(int64_t batch, int64_t width) {
  return rowChunkLaunch(batch, width);
}
#endif

} // namespace glm::kernels
