// count_tokens: each sequence's token counts (contract in count_tokens.h, launch rule in
// count_tokens_gpu.h).
#pragma once

#include "kernels/count_tokens/count_tokens_gpu.h"

namespace glm::kernels {

__global__ void __launch_bounds__(kCountTokensThreads) countTokensKernel(CountTokensGpuArgs a) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= a.rows) {
    return;
  }
  const int64_t b = r / a.ctx.rowsPerSequence;
  const int32_t token = a.tokens[r], slot = a.ctx.slots[b], position = a.ctx.positions[r];
  if (position < 0 || slot < 0 || token < 0 || token >= a.vocab) {
    return;
  }
  uint32_t *count = a.counts + static_cast<int64_t>(slot) * a.vocab + token;
  if (position < a.params[b].promptTokens) {
    atomicOr(count, kPromptSeenBit);
  } else {
    atomicAdd(count, 1u);
  }
}

} // namespace glm::kernels
