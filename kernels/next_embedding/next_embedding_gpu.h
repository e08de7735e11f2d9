// next_embedding on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   ids         i32 [batch · rowsPerSequence]
//   sampled     i32 [sampledRows, 21]   every row's draws (sampledRows = batch · rowsPerSequence),
//                                       or each sequence's last real row's (= batch)
//   positions   i32 [batch · rowsPerSequence]   the step's: a negative position marks padding
//   params      SampleWords [batch]             the step's sampling_params: `following`
//   table       W   [vocab, hidden]
//   out         T   [batch · rowsPerSequence, hidden]
//
//   Row n = b R + r: with followInput, next = ids[n + 1] when row n + 1 (r + 1 < R) holds a
//   token, else params[b].following - 1 when that word is set; otherwise (and without
//   followInput) next = sampled[n or b][0]. out[n] = table[next]. Zeros at position 0 and on
//   padding rows, and for an id outside [0, vocab) (next_embedding.h's contract; the CPU fails the
//   step instead, a captured kernel cannot).
//
// Grid (rows, ceil(hidden / 1024)), 128 threads, one 8-element chunk of the row each, as the
// embedding's.
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/sample/sample_params.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct NextEmbeddingGpuArgs {
  const int32_t *ids;
  const int32_t *sampled;
  const int32_t *positions;
  const SampleWords *params;
  const void *table;
  void *out;
  int64_t rowsPerSequence;
  int64_t sampledRows;
  int64_t rows;
  int64_t vocab;
  int64_t hidden;
  int32_t followInput;
};

#ifndef __CUDACC_RTC__
inline LaunchDims nextEmbeddingLaunch(int64_t rows, int64_t hidden) {
  return rowChunkLaunch(rows, hidden);
}
#endif

} // namespace glm::kernels
