// sample on the GPU: the argument struct the sampler kernel takes by value, and its grid rule.
//
//   logits   f32 [rows, vocab]      the Logits io slot
//   params   i32 [batch, 8]         the SamplingParams io slot: temperature, top_p, min_p (f32
//                                   bits), top_k, seed low, seed high, 0, 0; null = all greedy
//   ctx      StepContext            positions[r] keys row r's draw (negative: padding, out = 0);
//                                   row r uses sequence r / rowsPerSequence's parameters
//   out      i32 [rows]             the SampledIds io slot
//
// Picks the token runtime/engine/Sampler.cpp's sampleToken picks (contract in sample.h).
//
// sampleKernel: one block of 512 threads per row. Greedy rows (the op's greedy attribute, or
// temperature <= 0) take one pass: argmax, ties to the lower id. Sampled rows walk the vocabulary
// in sampleToken's order (logit desc, id asc) a chunk of kSampleChunk tokens at a time: a radix
// select on the 64-bit key (orderable logit bits, inverted id) finds the chunk's last key in a few
// passes over the row, the chunk is gathered and bitonic-sorted in shared memory, and one thread
// runs sampleToken's sequential double sums over it. Only the chunks the top-k / top-p / min-p
// cuts and the draw reach are ever sorted; a top_k <= kSampleChunk is one chunk.
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/common/StepContext.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct SampleGpuArgs {
  const float *logits;
  const int32_t *params;
  StepContext ctx;
  int32_t *out;
  int64_t rows;
  int64_t vocab;
  int32_t greedy; // the op's `greedy` attribute: argmax for every row
};

constexpr int kSampleThreads = 512;
constexpr int kSampleChunk = 4096; // tokens sorted at a time (keys u64 + probabilities f64)

#ifndef __CUDACC_RTC__
inline LaunchDims sampleLaunch(int64_t rows) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(rows);
  d.block[0] = kSampleThreads;
  d.sharedMemory = kSampleChunk * (8 + 8);
  return d;
}
#endif

} // namespace glm::kernels
