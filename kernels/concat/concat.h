// concat: the launch contract of joining rows along the feature dimension (the MTP block's
// [enorm(e), hnorm(h)] input to eh_proj).
//
//   inputs[i]  f32 [rows, widths[i]]
//   out        f32 [rows, Σ widths]     out[r] = inputs[0][r] ‖ inputs[1][r] ‖ …
#pragma once

#include "base/Status.h"

#include <cstdint>
#include <span>

namespace glm::kernels {

struct ConcatArgs {
  std::span<const float *const> inputs;
  std::span<const int64_t> widths;
  float *out = nullptr;
  int64_t rows = 0;
};

Status concatRef(const ConcatArgs &args);

} // namespace glm::kernels
