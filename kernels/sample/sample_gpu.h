// sample on the GPU: the argument struct both sampler kernels take by value, and their grid rules
// (contract in sample.h; they pick the tokens sampleRef picks).
//
// sampleProcessKernel: a block per (row, slice of kProcessSlice tokens). For a row whose
// sequence has a mask, a logit_bias or a penalty it writes the processed logits (sample.h) to the
// workspace, [rows, vocab] f32: masked copy, then the slice's bias entries, then penalties, each
// phase after the block's barrier, as the reference orders them. Other rows are left alone.
//
// sampleKernel: a cluster of kSampleCluster blocks per row, each block a slice of the vocabulary
// read from L2 on every pass (one SM alone would wait on memory: a pass over 620 KB from one block
// took ~25 us). Every quantity is a cluster-wide integer reduction, so each block takes the same
// decisions: the row's top key (greedy's token), then for sampled rows radix selects over the
// 64-bit order keys, 8 bits a pass, on histograms of counts (top-k) or of weights (the top-p cut,
// the draw), kept per warp in shared memory and summed over the cluster through distributed shared
// memory. A select's first histogram also gives the weight it selects in (W, M), and it stops as
// soon as its bin holds one key. Rows that ask for logprobs then select their k-th key and gather
// the k most likely.
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/common/StepContext.h"
#include "kernels/sample/sample_params.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct SampleGpuArgs {
  const float *logits;
  StepContext ctx; // positions, slots, rowsPerSequence
  const SampleWords *params;
  const int32_t *bias;
  const uint32_t *mask;
  const uint32_t *counts; // the token_counts state
  float *processed;       // workspace: [rows, vocab]
  int32_t *ids;           // [rows, 1 + kSampleTopLogprobs]
  float *logprobs;        // [rows, 1 + kSampleTopLogprobs]
  int64_t vocab;
  int32_t greedy; // the op's `greedy` attribute: argmax for every row
};

constexpr int kSampleThreads = 512;
constexpr int kSampleCluster = 8; // blocks per row
constexpr int kSampleBins = 256;  // a radix digit's
constexpr int kProcessThreads = 256;
constexpr int kProcessSlice = 8192; // tokens a processing block covers

/// Whether a sequence's row is processed before sampling (a mask, a bias or a penalty applies).
GLM_HOST_DEVICE inline bool sampleProcesses(const SampleWords &p) {
  return p.hasMask != 0 || p.biasCount > 0 || p.presence != 0.0f || p.frequency != 0.0f ||
         (p.repetition != 0.0f && p.repetition != 1.0f);
}

/// What a sampler block keeps in shared memory (all of it dynamic: over 48 KB). The block's own
/// histogram and value are double-buffered by round, so that one cluster barrier a round keeps a
/// block from overwriting what another is still reading.
struct SampleShared {
  uint32_t warpCount[kSampleThreads / 32][kSampleBins];
  uint64_t warpMass[kSampleThreads / 32][kSampleBins];
  uint32_t blockCount[2][kSampleBins]; // read by the cluster
  uint64_t blockMass[2][kSampleBins];
  uint32_t rowCount[kSampleBins]; // the cluster's sums
  uint64_t rowMass[kSampleBins];
  uint64_t partial[kSampleThreads / 32];
  uint64_t blockValue[2]; // read by the cluster
  uint64_t value;         // a reduction's result, for the whole block
  uint64_t above;         // a select's: the count or weight of the bins above the chosen one
  uint32_t bin, binCount;
  uint32_t listCount; // the logprobs' gather: this block's keys
  uint64_t list[kSampleTopLogprobs];
};

#ifndef __CUDACC_RTC__
inline LaunchDims sampleProcessLaunch(int64_t rows, int64_t vocab) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(rows);
  d.grid[1] = static_cast<unsigned>((vocab + kProcessSlice - 1) / kProcessSlice);
  d.block[0] = kProcessThreads;
  return d;
}

inline LaunchDims sampleLaunch(int64_t rows) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(rows * kSampleCluster);
  d.block[0] = kSampleThreads;
  d.sharedMemory = sizeof(SampleShared);
  return d;
}
#endif

} // namespace glm::kernels
