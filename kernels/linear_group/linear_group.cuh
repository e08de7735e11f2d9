// linear_group: the decode-quant kernel over several linears of one input width (contract and grid
// rule in linear_group_gpu.h).
#pragma once

#include "kernels/linear/linear.cuh"
#include "kernels/linear_group/linear_group_gpu.h"

namespace glm::kernels {

template <typename T, typename W>
__global__ void __launch_bounds__(kLinearQuantMaxWarps * 32)
    linearGroupDecodeQuantKernel(LinearGroupGpuArgs g) {
  // The block's part, by constant indices into the parameters (a dynamic index would copy the
  // struct to local memory): the last part whose first block is at or before this one.
  const int64_t block = blockIdx.x;
  LinearGroupPart part = g.part[0];
  int64_t first = 0;
#pragma unroll
  for (int q = 1; q < kLinearGroupMaxParts; ++q) {
    if (q < g.parts && block >= g.part[q - 1].blockEnd) {
      part = g.part[q];
      first = g.part[q - 1].blockEnd;
    }
  }
  const LinearGpuArgs a{part.x, part.weight,  part.weightScaleInv, nullptr, part.y,
                        g.rows, g.inFeatures, part.outFeatures,    0,       part.weightGroups};
  linear_detail::decodeQuantDispatch<T, W, kLinearDecodeMTiles, kLinearQuantStages, 1>(
      a, block - first, 0);
}

} // namespace glm::kernels
