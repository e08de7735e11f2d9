// last_rows: the launch contract of picking each sequence's last row of a step (the row a prefill
// chunk's logits are read from), so that the head runs on that row alone.
//
//   x          f32 [rows, width]
//   rows       i64 [count]            the row of x each output row copies
//   out        f32 [count, width]     must not alias x
//   positions  i32 [rows]             optional: the step's positions, and then
//   picked     i32 [count]            the positions of the rows out holds
//
//   out[b] = x[rows[b]], picked[b] = positions[rows[b]]
//
// The CPU engine knows which rows each sequence ran (its row groups) and passes their last; the
// GPU kernel finds them from the step's positions (last_rows_gpu.h).
#pragma once

#include "base/Status.h"

#include <cstdint>

namespace glm::kernels {

struct LastRowsArgs {
  const float *x = nullptr;
  const int64_t *rows = nullptr;
  float *out = nullptr;
  int64_t count = 0;
  int64_t width = 0;
  const int32_t *positions = nullptr;
  int32_t *picked = nullptr;
};

Status lastRowsRef(const LastRowsArgs &args);

} // namespace glm::kernels
