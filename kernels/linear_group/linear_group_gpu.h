// linear_group on the GPU: several linears of one input width, in one launch of the decode-quant
// kernel (kernels/linear/linear_gpu.h), so that a decode step pays one launch and one tail for
// q/k/v, gate/up, f_b/g_b and the like instead of one each.
//
//   parts[p].x            bf16 [rows, in]                       one buffer for all, or each its own
//   parts[p].weight       W [out_p, in]                         Q4 groups or fp8 blocks, all one W
//   parts[p].weightScaleInv / weightGroups                      the sections after the codes
//   parts[p].y            bf16 [rows, out_p]                    must not alias x or each other
//   parts[p].blockEnd     the part's last block + 1: part p owns blocks [blockEnd_{p-1},
//   blockEnd_p)
//
//   y_p = linear(x, W_p), each part exactly as linearDecodeQuantKernel computes it at the same
//   block size: a block runs the same body on its part's 32 outputs and 16 rows.
//
// The launch sizes warps and rings for all the parts' blocks together (they share in, so each
// warp's share of K is the same in every part).
#pragma once

#include "kernels/linear/linear_gpu.h"

namespace glm::kernels {

/// Parts a group holds at most: GLM's largest same-input set is a KDA layer's six projections (q,
/// k, v, f_a, b, g_a).
constexpr int kLinearGroupMaxParts = 8;

struct LinearGroupPart {
  const void *x;
  const void *weight;
  const float *weightScaleInv;  // fp8
  const uint32_t *weightGroups; // Q4
  void *y;
  int64_t outFeatures;
  int64_t blockEnd;
};

struct LinearGroupGpuArgs {
  int64_t rows;
  int64_t inFeatures;
  int32_t parts;
  LinearGroupPart part[kLinearGroupMaxParts];
};

/// Blocks of the plain decode-quant grid for one part of `out` outputs.
GLM_HOST_DEVICE constexpr int64_t linearGroupPartBlocks(int64_t rows, int64_t out) {
  return ((rows + kLinearDecodeRows - 1) / kLinearDecodeRows) *
         ((out + 16 * kLinearDecodeMTiles - 1) / (16 * kLinearDecodeMTiles));
}

#ifndef __CUDACC_RTC__
/// The group's grid: every part's blocks, with the warps and rings the plain kernel's rule gives
/// that many blocks of 32 outputs.
inline LaunchDims linearGroupLaunch(int64_t rows, int64_t in, int64_t totalBlocks, int smCount,
                                    LinearQuantSizing sizing) {
  const int64_t rowGroups = (rows + kLinearDecodeRows - 1) / kLinearDecodeRows;
  const int64_t tiles = (totalBlocks + rowGroups - 1) / rowGroups;
  return linearDecodeQuantLaunch(rows, in, tiles * 16 * kLinearDecodeMTiles, smCount, sizing);
}
#endif

} // namespace glm::kernels
