// mla_sparse_attention on the GPU: the argument struct its three kernels take by value, the
// workspace they share, and their grid rules (math in mla_sparse_attention.h).
//
//   q         T [rows, heads, qkHeadDim]
//   latent    T [rows, rank]                    this step's latents c
//   kvB       W [heads·(qkHeadDim + vHeadDim), rank]   W = f32, Bf16, MlaQ4Groups or Fp8E4m3
//   kvBGroups f16 pairs [heads·(qkHeadDim + vHeadDim)][rank/64]   W = MlaQ4Groups only
//   kvBScaleInv f32 [ceil(kv_b rows/128)][ceil(rank/128)]          W = Fp8E4m3 only
//   selected  i32 [rows, width]                 absolute positions, -1 = none
//   latents   S paged, [rank] per token (unitsPerPage = pageTokens); S f32, bf16 or fp8 e4m3
//   out       T [rows, heads·vHeadDim]
//   workspace mlaSparseAttentionWorkspaceBytes(rows, heads, rank, chunks), f32
//
// A step runs three kernels in this order, all with the same arguments (the absorbed form):
//   1. mlaAbsorbKernel<T, S, W>  grid (heads·ceil(rank / 64), ceil(rows / 8)), 256 threads:
//      q̃ = Wkᵀ q per row and head into the workspace (f32); the blocks of x = 0 also append the
//      rows' latents to their pages.
//   2. mlaAttendMmaKernel<T, S>  (mlaAttendUsesMma: bf16 plans) grid (chunks, heads / 16, rows),
//      128 threads: 16 heads of one row over one chunk of the row's slots in 32-token tiles
//      staged in shared memory, scores and P·C on bf16 tensor cores with q̃ and P split into
//      bf16 hi + lo (f32-accurate against the exact bf16 latents), online softmax over tiles.
//      Otherwise mlaAttendKernel<T, S> grid (chunks, ceil(heads / 4), rows), 256 threads: 4
//      heads per block in f32 FMA, warps split the slots. Either writes the f32 partial (max,
//      sum, Σ a_j c_j) to the workspace, or with one chunk the normalised mix in place of q̃.
//   3. mlaOutputKernel<T, W>     grid (heads·ceil(vHeadDim / 32), ceil(rows / 8)), 256 threads:
//      merges the chunks' partials and applies Wv; the output is rounded to T once.
// Positions before the step's first (the sequence's length) are read from the pages, later ones
// (this step's rows) from `latent` rounded to S, so no kernel waits for the append. A row's
// selected positions must be distinct (dsa_indexer's are); positions after the row's own are
// skipped. Padding rows (negative position) attend to nothing: zeros, and no state writes.
// Limits: rank <= 512 and a multiple of 8 (of 64 for Q4 kv_b), qkHeadDim <= 512, chunks <= 64,
// paged rows 16-byte aligned.
//
// kv_b may be held encoded (kernels/common/DenseFormats.h, one matrix [kv_b rows, rank]; the plan
// binds kvBGroups / kvBScaleInv to the sections after the codes): W = MlaQ4Groups reads Q4 groups,
// W = Fp8E4m3 fp8 blocks. Kernels 1 and 3 widen every weight exactly as the reference does (Q4:
// fmaf(scale, q, minimum), the format's two roundings since scale · q is exact in f32; fp8: the
// e4m3 value times its block's scaleInv, one rounding) and then run as for plain weights, so the
// results are the plain kernels' on the dequantized matrix. Kernel 2 never reads kv_b.
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/common/StepContext.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"

#include <algorithm>
#endif

namespace glm::kernels {

/// The weight type of the absorb and output kernels when kv_b is Q4 groups: `kvB` is the code
/// plane (two codes a byte, the low nibble the even column) and `kvBGroups` the (scale, minimum)
/// pairs.
struct MlaQ4Groups {
  uint8_t codes;
};

struct MlaSparseAttentionGpuArgs {
  const void *q;
  const void *latent;
  const void *kvB;
  const int32_t *selected;
  void *out;
  void *workspace;
  StepContext ctx;
  PagedState latents;
  int32_t rows;
  int32_t heads;
  int32_t qkHeadDim;
  int32_t vHeadDim;
  int32_t rank;
  int32_t width;
  int32_t chunks; // slot chunks per row: mlaSparseAttentionChunks
  float scale;
  const uint32_t *kvBGroups; // Q4 kv_b: f16 (scale, minimum), the scale in the low half
  const float *kvBScaleInv;  // fp8 kv_b: one per 128 x 128 block
};

inline constexpr int32_t kMlaMaxRank = 512;
inline constexpr int32_t kMlaMaxChunks = 64;

#ifndef __CUDACC_RTC__
/// Whether kernel 2 runs in its tensor-core form: bf16 activations with a bf16 or fp8 state
/// (exact in bf16), heads a multiple of 16, rank a multiple of 32.
inline bool mlaAttendUsesMma(bool bf16Activations, int64_t stateBytes, int64_t heads,
                             int64_t rank) {
  return bf16Activations && stateBytes <= 2 && heads % 16 == 0 && rank % 32 == 0 &&
         rank <= kMlaMaxRank;
}

/// Decode splits each row's slots into chunks of whole 32-slot tiles so that the attend kernel
/// has about one block per SM (132 on an H200); prefill rows (more than 16) are blocks enough
/// with one chunk each, which needs no merge workspace.
inline int32_t mlaSparseAttentionChunks(int64_t rows, int64_t heads, int64_t width, bool mma,
                                        int64_t smCount = 132) {
  if (rows > 16) {
    return 1;
  }
  const int64_t tiles = std::max<int64_t>(1, (width + 31) / 32);
  const int64_t blocksPerChunk = rows * ((heads + (mma ? 15 : 3)) / (mma ? 16 : 4));
  int64_t tilesPerChunk = std::max<int64_t>(1, (tiles * blocksPerChunk + smCount - 1) / smCount);
  tilesPerChunk = std::max(tilesPerChunk, (tiles + kMlaMaxChunks - 1) / kMlaMaxChunks);
  return static_cast<int32_t>((tiles + tilesPerChunk - 1) / tilesPerChunk);
}

/// q̃ [rows, heads, rank], then with several chunks the partials [rows, chunks, heads, rank + 2].
inline int64_t mlaSparseAttentionWorkspaceBytes(int64_t rows, int64_t heads, int64_t rank,
                                                int64_t chunks) {
  return rows * heads * rank * 4 + (chunks > 1 ? rows * chunks * heads * (rank + 2) * 4 : 0);
}

inline LaunchDims mlaAbsorbLaunch(int64_t rows, int64_t heads, int64_t rank) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(heads) * ceilDiv(rank, 64);
  d.grid[1] = ceilDiv(rows, 8);
  d.block[0] = 256;
  return d;
}

/// The tensor-core form takes 16 heads per block with 128 threads and dynamic shared memory for
/// q̃ (hi, lo) and a 32-token tile, bf16 rows padded by 8, and P (hi, lo).
inline LaunchDims mlaAttendLaunch(int64_t rows, int64_t heads, int64_t rank, int64_t chunks,
                                  bool mma) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(chunks);
  d.grid[1] = ceilDiv(heads, mma ? 16 : 4);
  d.grid[2] = static_cast<unsigned>(rows);
  d.block[0] = mma ? 128 : 256;
  d.sharedMemory = mma ? static_cast<unsigned>((64 * (rank + 8) + 2 * 16 * 40) * 2) : 0;
  return d;
}

inline LaunchDims mlaOutputLaunch(int64_t rows, int64_t heads, int64_t vHeadDim) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(heads) * ceilDiv(vHeadDim, 32);
  d.grid[1] = ceilDiv(rows, 8);
  d.block[0] = 256;
  return d;
}
#endif

} // namespace glm::kernels
