// dsa_indexer on the GPU: the argument struct its four kernels take by value, the workspace they
// share, and their grid rules (math in dsa_indexer.h).
//
//   q           T [rows, heads, headDim]
//   k           T [rows, headDim]
//   gate        T [rows, headDim]
//   headWeights T [rows, heads]             before the heads^-1/2 scale
//   ape         W [kpool, headDim]
//   keys        S paged, [headDim] per closed pool (unitsPerPage = pageTokens / kpool)
//   tail        S slot, [kpool - 1, 2 * headDim]: the open pool's rows, key then gate
//   selected    i32 [rows, width]           width = topk (+ kpool - 1 with the tail)
//   workspace   dsaIndexerWorkspaceBytes(rows, maxPools), no initial contents needed
//
// A step runs four kernels in this order, all with the same arguments:
//   1. dsaIndexerAppendKernel<T, S, W>  grid rows: block r clears row r's histogram; the first
//      row of each sequence appends the sequence's rows (closes pools into pages, keeps the open
//      pool's rows in the tail slot).
//   2. dsaIndexerScoreKernel<T, S>      grid (dsaIndexerScoreLaunch, rows): the scores of the
//      row's candidate pools (split evenly over the row's blocks), as order-preserving u32 keys,
//      and a 2048-bin histogram of their top 11 bits. bf16 q and keys (heads <= 32, headDim a
//      multiple of 32, <= 128) use bf16 mma with f32 accumulation (exact products); anything else
//      f32 FMA.
//   3. dsaIndexerFilterKernel           grid (ceil(maxPools / 1024), rows): bit masks of the
//      candidates above the histogram's cut bin and of those in it.
//   4. dsaIndexerSelectKernel           grid rows, 1024 threads: the exact cut inside the bin
//      (two more radix passes over its members), ties at the cut to the lower pool index
//      (TopkTieRule::LowerIndex), then the row: chosen pools' tokens in ascending pool order (the
//      reference lists them by descending score; consumers treat the row as a set), -1 padding,
//      then the open pool's tail.
// Rows whose query has at most topk / kpool candidate pools select every candidate: kernels 2
// and 3 skip them. Padding rows (negative position) leave state untouched and get -1 rows; a
// sequence is padding when its first row is. Scores are f32: they agree with the f64 reference
// up to rounding, so near-ties (within 1e-5 of the row's largest score) may resolve differently.
// The mma path loads q rows and paged key rows 16 bytes at a time: both must be 16-byte aligned.
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/common/StepContext.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"

#include <algorithm>
#endif

namespace glm::kernels {

struct DsaIndexerGpuArgs {
  const void *q;
  const void *k;
  const void *gate;
  const void *headWeights;
  const void *ape;
  int32_t *selected;
  void *workspace;
  StepContext ctx;
  PagedState keys;
  SlotState tail;
  int32_t rows;
  int32_t heads;
  int32_t headDim;
  int32_t kpool;
  int32_t topk;     // tokens; topk / kpool pools
  int32_t width;    // slots per row of `selected`
  int32_t maxPools; // ctx.maxPages * keys.unitsPerPage: pools a sequence can hold
};

/// Histogram of a row's scores over their top 11 key bits.
inline constexpr int32_t kDsaHistBins = 2048;
/// The score kernel splits a row's pools over its blocks in multiples of this.
inline constexpr int32_t kDsaScorePoolsPerBlock = 128;
inline constexpr int32_t kDsaFilterPoolsPerBlock = 1024;

/// 32-bit words of one row's workspace: scores [maxPools], the mask of pools above the cut bin and
/// of pools in it [ceil(maxPools / 32) each], and the histogram; rounded up to 16 bytes.
#ifdef __CUDACC_RTC__
__device__
#endif
    inline int64_t dsaIndexerRowWords(int64_t maxPools) {
  const int64_t words = maxPools + 2 * ((maxPools + 31) / 32) + kDsaHistBins;
  return (words + 3) / 4 * 4;
}

#ifndef __CUDACC_RTC__
inline int64_t dsaIndexerWorkspaceBytes(int64_t rows, int64_t maxPools) {
  return rows * dsaIndexerRowWords(maxPools) * 4;
}

inline LaunchDims dsaIndexerAppendLaunch(int64_t rows) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(rows);
  d.block[0] = 256;
  return d;
}

/// Shared memory: the histogram, then q staged per block: f32 rows padded by one (and the scaled
/// head weights) for the FMA path, or bf16 rows of 32 heads and 32 scaled weights for the mma
/// path.
/// Blocks per row: about two per SM over all rows (a block takes 128 pools or more; prefill rows
/// get one block each).
inline LaunchDims dsaIndexerScoreLaunch(int64_t rows, int64_t maxPools, int64_t heads,
                                        int64_t headDim, int64_t smCount = 132) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(std::clamp<int64_t>(
      ceilDiv(maxPools, kDsaScorePoolsPerBlock), 1, std::max<int64_t>(1, 2 * smCount / rows)));
  d.grid[1] = static_cast<unsigned>(rows);
  d.block[0] = 256;
  const int64_t fma = (heads * (headDim + 1) + heads) * 4, mma = 32 * headDim * 2 + 32 * 4;
  d.sharedMemory = static_cast<unsigned>(kDsaHistBins * 4 + (std::max(fma, mma) + 15) / 16 * 16);
  return d;
}

inline LaunchDims dsaIndexerFilterLaunch(int64_t rows, int64_t maxPools) {
  LaunchDims d;
  d.grid[0] = ceilDiv(maxPools, kDsaFilterPoolsPerBlock);
  d.grid[1] = static_cast<unsigned>(rows);
  d.block[0] = 256;
  return d;
}

inline LaunchDims dsaIndexerSelectLaunch(int64_t rows) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(rows);
  d.block[0] = 1024;
  return d;
}
#endif

} // namespace glm::kernels
