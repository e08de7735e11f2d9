// argmax: the launch contract of greedy sampling.
//
//   logits f32 [rows, vocab]
//   out    i32 [rows]
//
//   out[r] = the smallest i with logits[r][i] = max_j logits[r][j]     (ties to the lower id)
// NaN entries never win (a row of NaNs gives 0).
#pragma once

#include "base/Status.h"

#include <cstdint>

namespace glm::kernels {

struct ArgmaxArgs {
  const float *logits = nullptr;
  int32_t *out = nullptr;
  int64_t rows = 0;
  int64_t vocab = 0;
};

Status argmaxRef(const ArgmaxArgs &args);

} // namespace glm::kernels
